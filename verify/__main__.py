"""`python -m verify` is the `normverify` command."""

from verify.cli import main

raise SystemExit(main())

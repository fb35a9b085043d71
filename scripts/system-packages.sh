#!/usr/bin/env bash
# The system packages of README's two commands: pdflatex with the LaTeX packages normverify's documents load
# (derivations, conformance report), and poppler's pdfinfo/pdftotext, with which the tests read the PDFs back.
#
#   scripts/system-packages.sh                 install what is missing, when it can
#   scripts/system-packages.sh --check NAME... exit 1 with one line saying why when one of NAME is missing
#
# The Makefile's set-up runs it before every `make verify` / `make test`: with everything present it costs a
# few lookups and prints nothing, so a tool removed since the last run is noticed. What is missing is installed
# with apt-get (Debian/Ubuntu) as root or with passwordless sudo; otherwise one line names what is missing and
# the command that installs it. It never fails the set-up: without these tools `make verify` writes no PDF and
# the PDF tests are skipped, each saying why.
set -uo pipefail

# verify/latex.py's install hint names the same packages (tests/test_latex.py holds them equal).
PACKAGES=(texlive-latex-base texlive-latex-recommended lmodern poppler-utils)
INSTALL="apt-get install -y --no-install-recommends ${PACKAGES[*]}"
# Commands on PATH, and LaTeX files kpsewhich finds: lmodern.sty from lmodern, booktabs.sty standing for the
# packages of texlive-latex-recommended (booktabs, fancyvrb, float, xcolor).
NEEDED=(pdflatex pdfinfo pdftotext lmodern.sty booktabs.sty)

missing() {  # those of "$@" not found
  local absent=() name
  for name in "$@"; do
    case $name in
      # without TeX at all, pdflatex's absence says it: a LaTeX file is looked up when kpsewhich is there
      *.sty) ! command -v kpsewhich >/dev/null 2>&1 || kpsewhich "$name" >/dev/null 2>&1 || absent+=("$name") ;;
      *) command -v "$name" >/dev/null 2>&1 || absent+=("$name") ;;
    esac
  done
  echo "${absent[*]}"
}

hint="to install: \`make setup\` as root, or \`sudo $INSTALL\`"

if [ "${1:-}" = --check ]; then
  shift
  absent=$(missing "$@")
  [ -z "$absent" ] && exit 0
  echo "${absent// /, } not found; $hint"
  exit 1
fi

absent=$(missing "${NEEDED[@]}")
[ -z "$absent" ] && exit 0
absent=${absent// /, }
skipped="until then the PDF report is not written and the PDF tests are skipped"

if ! command -v apt-get >/dev/null 2>&1; then
  echo "set-up: $absent not found (not Debian/Ubuntu: install TeX Live with lmodern and booktabs, and poppler); $skipped"
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "set-up: $absent not found and not root (no passwordless sudo) to install them; $skipped; run: sudo $INSTALL"
  exit 0
fi

echo "set-up: $absent not found; installing ${PACKAGES[*]} with apt-get (a few minutes, once)"
log=$(mktemp "${TMPDIR:-/tmp}/normverify-apt.XXXXXX")
if "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null >"$log" 2>&1 &&
   "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
     "${PACKAGES[@]}" </dev/null >>"$log" 2>&1; then
  rm -f "$log"
else
  echo "set-up: apt-get failed ($(grep -E '^(E|W):' "$log" | tail -n 1 || true); log: $log); $skipped; run: sudo $INSTALL"
  exit 0
fi
still=$(missing "${NEEDED[@]}")
if [ -n "$still" ]; then
  echo "set-up: ${still// /, } still not found after installing ${PACKAGES[*]}; $skipped"
fi
exit 0

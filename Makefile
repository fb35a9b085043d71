# The two commands of README.md. Both do the set-up first: the venv is reused (the stamp is only rebuilt when
# pyproject.toml or the bootstrap script change), and the system packages (pdflatex, poppler) are looked up on every
# run, installed when missing and possible, else named in one line with the command that installs them.
VENV  ?= .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.normverify-installed
# Extra pytest arguments, e.g. make test PYTEST_ARGS="-k spectral"
PYTEST_ARGS ?=

.PHONY: setup system-packages verify test lint clean gpu-check

setup: $(STAMP) system-packages

system-packages:
	@bash scripts/system-packages.sh

$(STAMP): pyproject.toml scripts/bootstrap.sh
	VENV=$(VENV) bash scripts/bootstrap.sh
	touch $@

# The main job: every claim on the built-in kernels (torch and ours in Triton, all kinds), ci profile,
# summary on the terminal, results JSON and report in reports/ (the PDF when pdflatex is there after the set-up;
# otherwise one line says why not).
verify: setup
	@pdf=--pdf; why=$$(bash scripts/system-packages.sh --check pdflatex lmodern.sty booktabs.sty) || \
	  { pdf=; echo "make verify: no PDF report: $$why"; }; \
	run="$(VENV)/bin/normverify run --kernel torch --kernel triton --profile ci -n auto --report reports $$pdf"; \
	echo "$$run"; $$run

test: setup
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -n auto $(PYTEST_ARGS)

# The one-call GPU check (scripts/gpu_check.py): on a machine with a CUDA GPU and python3 with torch, no venv:
# every built-in that runs there (ci profile), the tests marked cuda, then the benchmark; summary and one archive in
# OUT (default gpu-check/). GPU_CHECK_ARGS=--dry-run runs the plumbing on the CPU.
OUT ?= gpu-check
gpu-check:
	python3 scripts/gpu_check.py $(OUT) $(GPU_CHECK_ARGS)

lint: setup
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) reports .pytest_cache .hypothesis

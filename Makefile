# The two commands of README.md. Both do the set-up first; a set-up venv is reused (the stamp is
# only rebuilt when pyproject.toml or the bootstrap script change), so re-runs start in seconds.
VENV  ?= .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.normverify-installed
# Extra pytest arguments, e.g. make test PYTEST_ARGS="-k spectral"
PYTEST_ARGS ?=

.PHONY: setup verify test lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/bootstrap.sh
	VENV=$(VENV) bash scripts/bootstrap.sh
	touch $@

# The main job: every claim on the built-in kernels (torch and ours in Triton, all kinds), ci profile,
# summary on the terminal, results JSON and report in reports/ (PDF when pdflatex is installed).
PDF_FLAG := $(if $(shell command -v pdflatex),--pdf,)
verify: $(STAMP)
	$(VENV)/bin/normverify run --kernel torch --kernel triton --profile ci -n auto --report reports $(PDF_FLAG)

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -n auto $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) reports .pytest_cache .hypothesis

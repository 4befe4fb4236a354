#!/usr/bin/env bash
# Create (idempotently) benchmarks/.venv-trl: a separate venv holding Hugging
# Face TRL (GRPOTrainer), the single-agent alternative, for side-by-side
# benchmarks (benchmarks/trl_grpo.py).
#
# torch is installed FIRST, in its own pip command, so that the CPU wheel
# (torch 2.13.0) is used; installing trl first would resolve torch to a newer
# version with multi-GB CUDA wheels. trl brings transformers, accelerate and
# datasets with it. Measured here: trl 1.16.0, transformers 5.24, accelerate 1.15.
#
# Usage: bash benchmarks/setup_trl_venv.sh   (PYTHON=python3.11 to override)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.venv-trl"
PYTHON="${PYTHON:-python3}"

TORCH_SPEC="torch==2.13.0"
TRL_SPEC="trl"

if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup_trl_venv] creating $VENV with $($PYTHON --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"

have() {  # have DIST VERSION -> exit 0 when installed (with that version, if given)
    "$PY" - "$1" "$2" <<'PYEOF'
import sys
from importlib import metadata
try:
    v = metadata.version(sys.argv[1])
except metadata.PackageNotFoundError:
    sys.exit(1)
sys.exit(0 if (sys.argv[2] == "" or v.split("+")[0] == sys.argv[2]) else 1)
PYEOF
}

if ! have torch 2.13.0; then
    "$PY" -m pip install --quiet --disable-pip-version-check "$TORCH_SPEC"
fi

# Keep torch pinned while trl resolves its dependencies.
if ! have trl "" || ! have accelerate "" || ! have datasets ""; then
    "$PY" -m pip install --quiet --disable-pip-version-check "$TRL_SPEC" "$TORCH_SPEC"
fi

"$PY" - <<'PYEOF'
from importlib import metadata
for d in ("torch", "trl", "transformers", "accelerate", "datasets", "tokenizers",
          "huggingface-hub", "numpy", "safetensors"):
    try:
        print(f"{d}=={metadata.version(d)}")
    except metadata.PackageNotFoundError:
        print(f"{d}: not installed")
import torch
print("torch.cuda.is_available()", torch.cuda.is_available())
PYEOF

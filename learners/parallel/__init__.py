"""Running on more than one device or process: the torchrun process group (`distributed.py`) and where
each model sits (`placement.py`). Imports nothing of `learners`.
"""

from learners.parallel.distributed import Distributed
from learners.parallel.placement import check_device, distinct_accelerators, per_agent, resolve_devices

__all__ = ["Distributed", "check_device", "distinct_accelerators", "per_agent", "resolve_devices"]

"""Running on more than one device or process: the torchrun process group and data parallelism
(`distributed.py`), FSDP2 sharding of each trainable model over the ranks (`fsdp.py`) and where each model
sits (`placement.py`). Imports nothing of `learners`.
"""

from learners.parallel.distributed import Distributed
from learners.parallel.fsdp import Sharding
from learners.parallel.placement import check_device, distinct_accelerators, per_agent, resolve_devices

__all__ = ["Distributed", "Sharding", "check_device", "distinct_accelerators", "per_agent", "resolve_devices"]

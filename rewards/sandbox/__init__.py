"""The sandbox for model-written Python: `execute` (in execute.py, whose docstring is the reference) with
its plan, launcher, cgroups and process handling. Imports only the standard library and its own modules.
"""

from rewards.sandbox.execute import ExecutionResult, execute, execute_many
from rewards.sandbox.limits import (
    CGROUP_SLACK_MB,
    MAX_DISK_MB,
    MAX_FILE_MB,
    MAX_OPEN_FILES,
    MAX_PROCESSES,
    SHARED_TMPFS_MB,
    SYSTEM_PYTHON,
)

__all__ = [
    "CGROUP_SLACK_MB",
    "MAX_DISK_MB",
    "MAX_FILE_MB",
    "MAX_OPEN_FILES",
    "MAX_PROCESSES",
    "SHARED_TMPFS_MB",
    "SYSTEM_PYTHON",
    "ExecutionResult",
    "execute",
    "execute_many",
]

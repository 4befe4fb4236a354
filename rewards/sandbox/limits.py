"""The sandbox's fixed limits: per-run resource caps and the preferred interpreter."""

__all__ = ["CGROUP_SLACK_MB", "MAX_DISK_MB", "MAX_FILE_MB", "MAX_OPEN_FILES", "MAX_PROCESSES", "SHARED_TMPFS_MB",
           "SYSTEM_PYTHON"]

MAX_PROCESSES = 32
"""RLIMIT_NPROC: processes plus threads the code may have at once."""
MAX_FILE_MB = 64
"""RLIMIT_FSIZE: the largest file the code may write."""
MAX_DISK_MB = 128
"""Size of the working-directory tmpfs (when a mount namespace is available)."""
MAX_OPEN_FILES = 128
"""RLIMIT_NOFILE."""
SYSTEM_PYTHON = "/usr/bin/python3"
"""Preferred interpreter: one that `nobody` can execute."""
CGROUP_SLACK_MB = 32
"""Added to `memory_mb` for the run's cgroup: the launcher that stays as the namespace's init, page tables."""
SHARED_TMPFS_MB = 16
"""Size of each of /tmp, /var/tmp and /dev/shm in the filesystem view."""

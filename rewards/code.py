"""`rewards.code`: the documented name (README, docs/sandbox.md, docs/tasks.md) of the sandbox's API.

The sandbox lives in `rewards/sandbox/`; this module re-exports its public names, so that
`from rewards.code import execute` keeps working.
"""

from rewards import sandbox
from rewards.sandbox import *  # noqa: F403  (sandbox.__all__: one list of names, kept in one place)

__all__ = sandbox.__all__

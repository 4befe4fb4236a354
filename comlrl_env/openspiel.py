"""`comlrl_env.openspiel` is `comlrl_env.games.openspiel` (the same module object), so imports written
against the older path, and patches of its attributes, keep working."""

import sys

from comlrl_env.games import openspiel as _module

sys.modules[__name__] = _module

"""`comlrl_env.openspiel_bots` is `comlrl_env.games.openspiel_bots` (the same module object), so imports
written against the older path keep working."""

import sys

from comlrl_env.games import openspiel_bots as _module

sys.modules[__name__] = _module

"""Spiders-and-Fly (ACE, Li et al., AAAI 2023): two spiders chase a random fly.

* :mod:`~acegnn.envs.spiders_fly.rules`: the game's rules, written once as per-grid
  tables (:class:`GridRules`) that everything below reads;
* :mod:`~acegnn.envs.spiders_fly.env`: :class:`SpidersFlyEnv`, the vectorised
  environment, which samples the fly's move;
* :mod:`~acegnn.envs.spiders_fly.oracle`: the exact optimal policy (:func:`solve`),
  the fly's move in expectation; ``python -m acegnn.envs.spiders_fly.oracle --grid 5``;
* :mod:`~acegnn.envs.spiders_fly.analysis`: exact evaluation of given policies and the
  anatomy of their steps gap;
* :mod:`~acegnn.envs.spiders_fly.task`: graphs, :class:`SpidersFlyTask` and
  :class:`SpidersFlyConfig` (``env.name: spiders_fly``).

The names below are imported from their modules when first used, so that running a
module of the package (the oracle's command line) does not import it twice.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, List

if TYPE_CHECKING:  # the same names, for static analysis
    from acegnn.envs.spiders_fly.analysis import (gap_anatomy, policy_capture, policy_regret,
                                                  policy_steps, visitation)
    from acegnn.envs.spiders_fly.env import SpidersFlyEnv, StepResult
    from acegnn.envs.spiders_fly.oracle import (OracleSolution, capture_within,
                                                optimal_discounted_q, optimal_steps_q, solve)
    from acegnn.envs.spiders_fly.rules import (ACTION_NAMES, CATCH_REWARD,
                                               DEFAULT_START_DISTANCE, MOVES, GridRules,
                                               action_mask_for, cell_coords, cell_index,
                                               grid_rules, live_states, valid_starts)
    from acegnn.envs.spiders_fly.task import (SpidersFlyConfig, SpidersFlyEval,
                                              SpidersFlyExactEval, SpidersFlyTask,
                                              oracle_solution, spiders_fly_graphs,
                                              spiders_fly_schema)

_SUBMODULES = ("rules", "env", "oracle", "analysis", "task")  # each imports at most those before it

__all__ = [
    # rules
    "ACTION_NAMES", "MOVES", "CATCH_REWARD", "DEFAULT_START_DISTANCE", "GridRules", "grid_rules",
    "action_mask_for", "cell_index", "cell_coords", "live_states", "valid_starts",
    # env
    "SpidersFlyEnv", "StepResult",
    # oracle
    "OracleSolution", "solve", "optimal_steps_q", "optimal_discounted_q", "capture_within",
    # analysis
    "policy_capture", "policy_steps", "visitation", "policy_regret", "gap_anatomy",
    # task
    "SpidersFlyConfig", "SpidersFlyTask", "SpidersFlyEval", "SpidersFlyExactEval",
    "spiders_fly_schema", "spiders_fly_graphs", "oracle_solution",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        for submodule in _SUBMODULES:
            module = importlib.import_module(f"{__name__}.{submodule}")
            if name in module.__all__:
                value = getattr(module, name)
                globals()[name] = value  # later look-ups skip this function
                return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))

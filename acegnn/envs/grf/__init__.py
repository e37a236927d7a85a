"""Google Research Football (gfootball 2.10.2) as graph tasks: the paper's two academy
scenarios with the paper's rules (:mod:`acegnn.envs.grf.engine` states them),
the games in engine processes that are restarted when they crash or hang.

Install the back-end with ``bash scripts/install_grf.sh``; ``docs/grf.md`` describes
the task."""
from acegnn.envs.grf.engine import ACTIONS, N_ACTIONS, UNIT_COLUMNS, EnginePool, Game
from acegnn.envs.grf.scenarios import SCENARIOS, GRFScenario, Layout, get_scenario
from acegnn.envs.grf.task import (GRFConfig, GRFEval, GRFTask, grf_graphs, grf_layout,
                                  grf_schema)

__all__ = ["ACTIONS", "N_ACTIONS", "SCENARIOS", "UNIT_COLUMNS", "EnginePool", "GRFConfig",
           "GRFEval", "GRFScenario", "GRFTask", "Game", "Layout", "get_scenario", "grf_graphs",
           "grf_layout", "grf_schema"]

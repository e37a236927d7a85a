"""StarCraft battles: one graph schema (:mod:`acegnn.envs.smac.units`) and two back-ends,
SMAX (:mod:`acegnn.envs.smac.smax`, JaxMARL, runs on a CPU) and StarCraft II
(:mod:`acegnn.envs.smac.sc2`, oxwhirl/smac with the game installed)."""
from acegnn.envs.smac.units import (KINDS, SMAC_ACTIONS, SMAX_ACTIONS, UNIT_COLUMNS, UNIT_TYPES,
                                    ActionLayout, BattleSpec, UnitStats, battle_graphs,
                                    battle_layout, battle_schema)

__all__ = ["KINDS", "SMAC_ACTIONS", "SMAX_ACTIONS", "UNIT_COLUMNS", "UNIT_TYPES", "ActionLayout",
           "BattleSpec", "UnitStats", "battle_graphs", "battle_layout", "battle_schema"]

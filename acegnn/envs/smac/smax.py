"""SMAX (JaxMARL's re-implementation of the SMAC scenarios) as a vectorised graph task.

Many SMAX battles step together in one compiled function (``jax.vmap`` + ``jax.jit``)
against SMAX's heuristic enemy AI. Observations reach torch through DLPack.

* **Episode limits** are SMAC's per map (:data:`SCENARIOS`); other battles keep SMAX's
  100 steps (:func:`get_scenario`). A battle still running at the limit is truncated;
  a battle with one side dead is terminated.
* **Resets**: the task steps with SMAX's ``step_env`` and resets finished battles
  itself, so :attr:`Transition.next_obs` is the true last state of an episode.
* **Win**: every enemy dead and an ally alive, read from the state.
* **Reward**: SMAX's (at most 2 per episode) times ``reward_scale``.

SMAX has no terrain, no medivac and six unit types: MMM2 and 2c_vs_64zg cannot be
built. See docs/battles.md for the maps and how SMAX differs from StarCraft II.

JAX keeps the compiled battles in a persistent cache, ``$XDG_CACHE_HOME/acegnn/jax``
(``~/.cache/acegnn/jax``), unless ``JAX_COMPILATION_CACHE_DIR`` names another or
``ACEGNN_JAX_CACHE=0``.
"""
from __future__ import annotations

import importlib.util
import itertools
import os
import re
import sys
import types
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.envs.base import Policy, Scene, Transition, VecTask, check_actions, first_episodes
from acegnn.envs.smac.units import (SMAX_ACTIONS, UNIT_COLUMNS, UNIT_TYPES, ActionTally, BattleEval,
                                    BattleSpec, UnitStats,
                                    battle_graphs, battle_positions, battle_scene, battle_schema)

#: SMAX unit type ids (jaxmarl's order) -> index in :data:`UNIT_TYPES`.
SMAX_TYPES = ("marine", "marauder", "stalker", "zealot", "zergling", "hydralisk")
_TYPE_IDS = {name: i for i, name in enumerate(SMAX_TYPES)}


@dataclass(frozen=True)
class Scenario:
    """A battle: unit types per side (SMAX type names) and SMAC's episode limit."""

    allies: Tuple[str, ...]
    enemies: Tuple[str, ...]
    time_limit: int
    note: str = ""


def _units(*groups: Tuple[int, str]) -> Tuple[str, ...]:
    return tuple(name for count, name in groups for _ in range(count))


#: SMAC's unit codes in map names (``2s3z``, ``6h_vs_8z``, ``2c_vs_64zg``) -> SMAX type
#: names; ``M`` (marauder) is SMAX's own code, SMAC names no map with it.
UNIT_CODES: Dict[str, str] = {"m": "marine", "M": "marauder", "s": "stalker", "z": "zealot",
                              "zg": "zergling", "h": "hydralisk"}
#: SMAC's codes of units SMAX does not have.
NOT_IN_SMAX: Dict[str, str] = {"c": "colossus", "b": "baneling"}
#: The episode limit of a battle that is not a SMAC map: SMAX's own default.
SMAX_TIME_LIMIT = 100

#: Every scenario by name. Limits are SMAC's (smac/env/starcraft2/maps/smac_maps.py);
#: 4m_vs_5m, 5m_vs_5m and 6m_vs_7m are not SMAC maps (the paper's transfer targets) and
#: play 5m_vs_6m's 70 steps.
SCENARIOS: Dict[str, Scenario] = {
    "3m": Scenario(_units((3, "marine")), _units((3, "marine")), 60),
    "8m": Scenario(_units((8, "marine")), _units((8, "marine")), 120),
    "25m": Scenario(_units((25, "marine")), _units((25, "marine")), 150),
    "2m_vs_1z": Scenario(_units((2, "marine")), _units((1, "zealot")), 150),
    "3s_vs_3z": Scenario(_units((3, "stalker")), _units((3, "zealot")), 150),
    "3s_vs_4z": Scenario(_units((3, "stalker")), _units((4, "zealot")), 200),
    "2s3z": Scenario(_units((2, "stalker"), (3, "zealot")), _units((2, "stalker"), (3, "zealot")), 120),
    "3s5z": Scenario(_units((3, "stalker"), (5, "zealot")), _units((3, "stalker"), (5, "zealot")), 150),
    "4m_vs_5m": Scenario(_units((4, "marine")), _units((5, "marine")), 70, "not a SMAC map"),
    "5m_vs_5m": Scenario(_units((5, "marine")), _units((5, "marine")), 70, "not a SMAC map"),
    "5m_vs_6m": Scenario(_units((5, "marine")), _units((6, "marine")), 70),
    "6m_vs_7m": Scenario(_units((6, "marine")), _units((7, "marine")), 70, "not a SMAC map"),
    "8m_vs_9m": Scenario(_units((8, "marine")), _units((9, "marine")), 120),
    "10m_vs_11m": Scenario(_units((10, "marine")), _units((11, "marine")), 150),
    "27m_vs_30m": Scenario(_units((27, "marine")), _units((30, "marine")), 180),
    "3s_vs_5z": Scenario(_units((3, "stalker")), _units((5, "zealot")), 250),
    "3s5z_vs_3s6z": Scenario(_units((3, "stalker"), (5, "zealot")),
                             _units((3, "stalker"), (6, "zealot")), 170),
    "6h_vs_8z": Scenario(_units((6, "hydralisk")), _units((8, "zealot")), 150),
    "6z_vs_24zg": Scenario(_units((6, "zealot")), _units((24, "zergling")), 400,
                           "corridor's units and limit on an open field (SMAX has no terrain)"),
}


def _side(name: str, side: str) -> Tuple[str, ...]:
    """The units of one side of a map name: groups of a count and a unit code."""
    groups = re.findall(r"(\d+)(zg|[A-Za-z])", side)
    if not groups or "".join(n + c for n, c in groups) != side:
        raise ValueError(
            f"unknown SMAX scenario {name!r}: not a map listed in SCENARIOS and not a name of "
            f"unit counts and codes such as 6m_vs_8m, 2s3z or 3s_vs_5z (codes: "
            f"{', '.join(f'{c}={t}' for c, t in UNIT_CODES.items())})")
    units = []
    for count, code in groups:
        if code in NOT_IN_SMAX or code not in UNIT_CODES:
            what = f"{NOT_IN_SMAX[code]} ({code})" if code in NOT_IN_SMAX else f"unit code {code!r}"
            raise ValueError(f"SMAX scenario {name!r}: {what} is not a SMAX unit type (SMAX has "
                             f"{', '.join(f'{t} ({c})' for c, t in UNIT_CODES.items())})")
        if int(count) < 1:
            raise ValueError(f"SMAX scenario {name!r}: a group of {count} {UNIT_CODES[code]}s")
        units += [UNIT_CODES[code]] * int(count)
    return tuple(units)


def scenario_name(allies: Sequence[str], enemies: Sequence[str]) -> str:
    """The SMAC-style name of a battle (``2s3z``, ``3s_vs_5z``): each side's runs of one
    unit type as count and code, ``_vs_`` between two different sides."""
    codes = {t: c for c, t in UNIT_CODES.items()}

    def one(units: Sequence[str]) -> str:
        return "".join(f"{len(list(g))}{codes[t]}" for t, g in itertools.groupby(units))

    a, e = one(allies), one(enemies)
    return a if a == e else f"{a}_vs_{e}"


def get_scenario(name: str) -> Scenario:
    """The battle a map name stands for: a listed map (:data:`SCENARIOS`, SMAC's limits),
    or any name of unit counts and SMAC's codes (:data:`UNIT_CODES`), one side
    (``4m``: both sides alike) or two (``6m_vs_8m``), with SMAX's 100-step limit."""
    if name in SCENARIOS:
        return SCENARIOS[name]
    sides = name.split("_vs_")
    if len(sides) > 2:
        raise ValueError(f"SMAX scenario {name!r}: more than two sides")
    allies, enemies = _side(name, sides[0]), _side(name, sides[-1])
    return Scenario(allies, enemies, SMAX_TIME_LIMIT,
                    f"not a SMAC map: units from its name, SMAX's {SMAX_TIME_LIMIT}-step limit")


def units_scenario(allies: Sequence[str], enemies: Sequence[str]) -> Scenario:
    """A battle of listed units (SMAX type names); a SMAC map's limit when its units are
    one (in SMAC's order), SMAX's 100 steps otherwise."""
    for side, units in (("allies", allies), ("enemies", enemies)):
        if not units:
            raise ValueError(f"env.{side} is empty: a battle needs a unit on each side")
        bad = sorted({u for u in units if u not in SMAX_TYPES})
        if bad:
            raise ValueError(f"env.{side}: {bad} are not SMAX unit types ({list(SMAX_TYPES)})")
    allies, enemies = tuple(allies), tuple(enemies)
    for sc in SCENARIOS.values():
        if (sc.allies, sc.enemies) == (allies, enemies) and not sc.note:
            return sc
    return Scenario(allies, enemies, SMAX_TIME_LIMIT,
                    f"listed units, SMAX's {SMAX_TIME_LIMIT}-step limit")


class _Engine:
    """One SMAX scenario compiled once per process: batched reset and step."""

    def __init__(self, sc: Scenario, time_limit: int) -> None:
        import jax
        import jax.numpy as jnp

        if "JAX_PLATFORMS" not in os.environ:
            # the battles run on the CPU, where the replay lives; a GPU backend would also
            # take 75% of the GPU's memory from the learner (no effect once JAX has started)
            jax.config.update("jax_platforms", "cpu")
        _compilation_cache(jax)
        self.cpu = jax.devices("cpu")[0]
        smax, jax_scenario = _jaxmarl_smax()
        unit_types = jnp.array([_TYPE_IDS[t] for t in sc.allies + sc.enemies], dtype=jnp.uint8)
        env = smax(max_steps=time_limit, scenario=jax_scenario(
            unit_types, len(sc.allies), len(sc.enemies), False, False))
        self.env, self.jax, self.jnp = env, jax, jnp
        self.n_allies, self.n_enemies = len(sc.allies), len(sc.enemies)
        self.time_limit = time_limit
        self._ours = jnp.array([UNIT_TYPES.index(t) for t in SMAX_TYPES], dtype=jnp.float32)
        stats = {"attack": [0.0] * len(UNIT_TYPES), "sight": [0.0] * len(UNIT_TYPES)}
        for i, name in enumerate(SMAX_TYPES):
            stats["attack"][UNIT_TYPES.index(name)] = float(env.unit_type_attack_ranges[i])
            stats["sight"][UNIT_TYPES.index(name)] = float(env.unit_type_sight_ranges[i])
        self.spec = BattleSpec(self.n_allies, self.n_enemies, (float(env.map_width), float(env.map_height)),
                               SMAX_ACTIONS, UnitStats(tuple(stats["attack"]), tuple(stats["sight"])))
        self.reset = jax.jit(jax.vmap(self._reset))
        self.step = jax.jit(jax.vmap(self._step))

    def _observe(self, state):
        jnp, env = self.jnp, self.env
        s = state.state
        t = s.unit_types.astype(jnp.int32)
        health = s.unit_health / env.unit_type_health[t]
        cooldown = jnp.clip(s.unit_weapon_cooldowns / env.unit_type_weapon_cooldowns[t], 0.0, 1.0)
        # an enemy's reads 0, as on StarCraft II, whose game does not report it
        cooldown = cooldown.at[self.n_allies:].set(0.0)
        units = jnp.stack([self._ours[t], s.unit_positions[:, 0], s.unit_positions[:, 1], health,
                           jnp.zeros_like(health), cooldown, s.unit_alive.astype(jnp.float32)], -1)
        avail = env.get_avail_actions(state)
        return units.astype(jnp.float32), jnp.stack([avail[a] for a in env.agents]).astype(bool)

    def _reset(self, key):
        key, sub = self.jax.random.split(key)
        _, state = self.env.reset(sub)
        # a reset state has weakly typed leaves (the step counter, the heuristic enemy's
        # last targets); made strong, the step compiles once instead of twice
        state = self.jax.tree_util.tree_map(lambda x: self.jax.lax.convert_element_type(x, x.dtype),
                                            state)
        return key, state, self._observe(state)

    def _step(self, key, state, actions):
        jax, jnp = self.jax, self.jnp
        key, sub = jax.random.split(key)
        acts = {a: actions[i] for i, a in enumerate(self.env.agents)}
        _, nxt, reward, _, _ = self.env.step_env(sub, state, acts)
        alive = nxt.state.unit_alive
        ally_alive, enemy_alive = alive[:self.n_allies], alive[self.n_allies:]
        terminated = ~enemy_alive.any() | ~ally_alive.any()
        truncated = (nxt.state.step >= self.time_limit) & ~terminated
        info = {"won": ~enemy_alive.any() & ally_alive.any(),
                "allies_alive": ally_alive.mean(), "enemies_alive": enemy_alive.mean()}
        next_obs = self._observe(nxt)
        key, fresh, fresh_obs = self._reset(key)
        done = terminated | truncated
        pick = lambda a, b: jnp.where(done, a, b)  # noqa: E731
        state = jax.tree_util.tree_map(pick, fresh, nxt)
        obs = jax.tree_util.tree_map(pick, fresh_obs, next_obs)
        return key, state, obs, next_obs, reward[self.env.agents[0]], terminated, truncated, info


def _jaxmarl_smax():
    """JaxMARL's ``HeuristicEnemySMAX`` and ``Scenario``, importing SMAX's modules only.

    ``import jaxmarl`` imports all of its environments, and some compute at import
    (several seconds); the packages' ``__init__`` are bypassed while SMAX's modules load.
    Unless jaxmarl was imported already, its modules are then forgotten, so that a later
    ``import jaxmarl`` loads it whole as usual."""
    stubbed = "jaxmarl" not in sys.modules
    if stubbed:
        for name in ("jaxmarl", "jaxmarl.environments"):
            pkg = types.ModuleType(name)
            pkg.__path__ = list(importlib.util.find_spec(name).submodule_search_locations)
            sys.modules[name] = pkg
    try:
        from jaxmarl.environments.smax.heuristic_enemy_smax_env import HeuristicEnemySMAX
        from jaxmarl.environments.smax.smax_env import Scenario
    finally:
        if stubbed:
            for name in [m for m in sys.modules if m == "jaxmarl" or m.startswith("jaxmarl.")]:
                del sys.modules[name]
    return HeuristicEnemySMAX, Scenario


#: Where JAX keeps compiled battles between processes (:func:`_compilation_cache`).
CACHE_DIR = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "acegnn", "jax")


def _compilation_cache(jax) -> None:
    """Keep compiled functions in :data:`CACHE_DIR` unless JAX already has a cache
    directory or ``ACEGNN_JAX_CACHE=0``. A size limit makes JAX lock the cache, so that
    processes started together share it safely."""
    if os.environ.get("ACEGNN_JAX_CACHE", "1") == "0" or jax.config.jax_compilation_cache_dir:
        return
    jax.config.update("jax_compilation_cache_dir", CACHE_DIR)
    jax.config.update("jax_compilation_cache_max_size", 2 ** 31)


@lru_cache(maxsize=8)
def _engine(sc: Scenario, time_limit: int) -> _Engine:
    return _Engine(sc, time_limit)


def _torch(x) -> Tensor:
    return torch.from_dlpack(x)


class SMAXTask(VecTask):
    """SMAX battles against the heuristic enemy, as graphs (:mod:`acegnn.envs.smac.units`).

    Args:
        scenario (str or Scenario): A map name (:func:`get_scenario`: a listed map, or
            unit counts and codes such as ``6m_vs_8m``) or a :class:`Scenario`.
            (default: :obj:`"5m_vs_6m"`)
        num_envs (int, optional): Battles stepped together. (default: :obj:`8`)
        seed (int, optional): Seed of the battles' randomness. (default: :obj:`0`)
        time_limit (int, optional): Steps before a battle is cut (truncated); the
            scenario's limit if :obj:`None`.
        reward_scale (float, optional): Factor on SMAX's reward. (default: :obj:`10.0`)
    """

    noop_action = SMAX_ACTIONS.noop

    def __init__(self, scenario: Union[str, Scenario] = "5m_vs_6m", num_envs: int = 8,
                 seed: int = 0, time_limit: Optional[int] = None,
                 reward_scale: float = 10.0) -> None:
        if isinstance(scenario, Scenario):
            self.battle, self.scenario = scenario, scenario_name(scenario.allies, scenario.enemies)
        else:
            self.battle, self.scenario = get_scenario(scenario), scenario
        self.num_envs, self.seed = num_envs, seed
        self.time_limit = self.battle.time_limit if time_limit is None else time_limit
        self.reward_scale = reward_scale
        self.engine = _engine(self.battle, self.time_limit)
        self.spec = self.engine.spec
        self.schema = battle_schema()
        self.n_agents = self.spec.n_allies
        self.obs_spec = {"units": ((self.spec.n_units, len(UNIT_COLUMNS)), torch.float32),
                         "avail": ((self.spec.n_allies, self.spec.slots), torch.bool)}
        jax = self.engine.jax
        # committed to the CPU: every step follows them there, whatever JAX's default device
        keys = jax.device_put(jax.random.split(jax.random.PRNGKey(seed), num_envs), self.engine.cpu)
        self._key, self._state, self._obs = self.engine.reset(keys)

    def observe(self) -> Dict[str, Tensor]:
        units, avail = self._obs
        return {"units": _torch(units), "avail": _torch(avail)}

    def step(self, actions: Tensor) -> Transition:
        actions = check_actions(actions, _torch(self._obs[1]))  # JAX would clamp silently
        jnp = self.engine.jnp
        out = self.engine.step(self._key, self._state, jnp.asarray(actions.numpy().astype("int32")))
        self._key, self._state, self._obs, next_obs, reward, terminated, truncated, info = out
        return Transition(
            reward=_torch(reward).float() * self.reward_scale, terminated=_torch(terminated),
            truncated=_torch(truncated),
            next_obs={"units": _torch(next_obs[0]), "avail": _torch(next_obs[1])},
            info={k: _torch(v) for k, v in info.items()})

    def graphs(self, obs: Dict[str, Tensor]) -> Batch:
        return battle_graphs(obs["units"], obs["avail"], self.spec)

    def test_task(self, episodes: int, seed: int) -> "SMAXTask":
        """The battles :meth:`evaluate` plays: one per environment, from ``seed``."""
        return SMAXTask(self.battle, episodes, seed, self.time_limit, self.reward_scale)

    def evaluate(self, act: Policy, episodes: int = 32, seed: int = 0) -> BattleEval:
        """Play ``episodes`` battles with ``act`` (same ``seed``, same starts and enemy
        randomness) and report their outcomes."""
        test = self.test_task(episodes, seed)
        tally = ActionTally(self.spec, episodes)
        ep = first_episodes(test, act, self.time_limit, tally)
        return BattleEval.of(ep.returns, ep.length, ep.terminated, ep.info, tally.counts)

    def state_dict(self) -> dict:
        jax = self.engine.jax
        leaves = jax.tree_util.tree_leaves((self._key, self._state, self._obs))
        return {"leaves": [torch.from_dlpack(x).clone() for x in leaves]}

    def load_state_dict(self, state: dict) -> None:
        jax, jnp = self.engine.jax, self.engine.jnp
        current = (self._key, self._state, self._obs)
        leaves, treedef = jax.tree_util.tree_flatten(current)
        saved = state["leaves"]
        if len(saved) != len(leaves) or any(tuple(s.shape) != tuple(x.shape) for s, x in zip(saved, leaves)):
            raise ValueError(f"the saved SMAX state does not fit this task ({self!r})")
        restored = [jax.device_put(jnp.asarray(s.numpy()).astype(x.dtype), self.engine.cpu)
                    for s, x in zip(saved, leaves)]
        self._key, self._state, self._obs = jax.tree_util.tree_unflatten(treedef, restored)

    def scene(self) -> Scene:
        return battle_scene(self.spec)

    def unit_positions(self, graphs: Batch) -> Tensor:
        return battle_positions(graphs, self.spec)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(scenario={self.scenario}, num_envs={self.num_envs})"


@dataclass
class SMAXConfig:
    """SMAX battle settings (``env.name: smax``)."""

    name: str = "smax"
    scenario: Optional[str] = "5m_vs_6m"
    """Map name: one of acegnn.envs.smac.smax.SCENARIOS (SMAC's limits), or unit counts
    and SMAC's codes (m marine, M marauder, s stalker, z zealot, zg zergling, h hydralisk),
    e.g. 6m_vs_8m, 4m, 2s_vs_3z; null when env.allies and env.enemies list the units."""
    allies: Optional[List[str]] = None
    """The allied units by SMAX type name (marine, marauder, stalker, zealot, zergling,
    hydralisk), with env.enemies and env.scenario=null."""
    enemies: Optional[List[str]] = None
    """The enemy units, as env.allies."""
    num_envs: int = 8
    """Battles stepped together while collecting (the paper's collector_env_num)."""
    time_limit: Optional[int] = None
    """Steps before a battle is cut (truncated); SMAC's limit of the map if null."""
    reward_scale: float = 10.0
    """Factor on SMAX's reward (at most 2 per battle); 10 gives SMAC's scale of 20."""

    def battle(self) -> Scenario:
        """The battle this config names (by its map name or its units)."""
        listed = (self.allies is not None, self.enemies is not None)
        if any(listed):
            if not all(listed) or self.scenario is not None:
                raise ValueError("env.allies and env.enemies list a battle's units together, "
                                 "with env.scenario=null (a map name or the units, not both)")
            return units_scenario(self.allies, self.enemies)
        if self.scenario is None:
            raise ValueError("env.scenario is null: name a map or list env.allies and env.enemies")
        return get_scenario(self.scenario)

    def __post_init__(self) -> None:
        self.battle()  # a clear error for a map that cannot be built
        if self.num_envs < 1:
            raise ValueError(f"env.num_envs must be >= 1 (got {self.num_envs})")
        if self.time_limit is not None and self.time_limit < 1:
            raise ValueError(f"env.time_limit must be >= 1 or null (got {self.time_limit})")
        if not self.reward_scale > 0:
            raise ValueError(f"env.reward_scale must be positive (got {self.reward_scale})")

    def make(self, seed: int) -> SMAXTask:
        return SMAXTask(self.scenario or self.battle(), self.num_envs, seed, self.time_limit,
                        self.reward_scale)

"""StarCraft II battles (oxwhirl/smac on the game) as graphs.

An adapter: each game is a ``smac.env.StarCraft2Env``. This module reads SMAC's unit
records (``env.agents`` / ``env.enemies``, ``raw_pb2.Unit`` messages keyed by index)
into the battle schema of :mod:`acegnn.envs.smac.units`. The translation is pure
functions of the records (:func:`sc2_units`, :func:`ally_unit_types`, :func:`sc2_spec`).

* **Actions** are SMAC's ids (:data:`~acegnn.envs.smac.units.SMAC_ACTIONS`), passed
  through unchanged. The masks are SMAC's ``get_avail_actions``, with
  :func:`acegnn.graph.only_noop` applied to dead agents.
* **Reward** is SMAC's own, unchanged.
* **Episode ends**: a battle cut at the map's limit (SMAC's ``info["episode_limit"]``
  with ``continuing_episode=True``) is truncated; every other end is terminated.
  ``won`` is SMAC's ``info["battle_won"]``. Finished games are reset after their last
  state is read.
* **Engine restarts**: a step after which SMAC relaunched the game (it returns
  ``(0, True, {})``) is marked in :attr:`Transition.dropped`.
* **Snapshots**: :meth:`SC2Task.state_dict` is ``None``; a resumed run starts fresh
  battles.

The games step one after the other in this process. See docs/sc2.md for the set-up and
how these battles differ from SMAX's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.envs.base import Policy, Scene, Transition, VecTask, check_actions, first_episodes
from acegnn.envs.smac.units import (SMAC_ACTIONS, UNIT_COLUMNS, UNIT_TYPES, ActionTally, BattleEval,
                                    BattleSpec, UnitStats,
                                    battle_graphs, battle_positions, battle_scene, battle_schema)
from acegnn.graph import only_noop
from acegnn.utils.registry import MissingBackend

#: Standard StarCraft II unit type ids (``pysc2.lib.units``) of the units SMAC's enemies
#: are made of -> name in :data:`UNIT_TYPES`. SMAC keeps these ids for the enemy side
#: (``StarCraft2Env.get_unit_type_id`` with ``ally=False``).
SC2_UNIT_TYPES: Dict[int, str] = {
    48: "marine", 51: "marauder", 54: "medivac", 74: "stalker", 73: "zealot", 4: "colossus",
    105: "zergling", 9: "baneling", 107: "hydralisk",
}

#: The ally unit types of each SMAC ``map_type``, in the order of their map-specific ids:
#: SMAC's maps give the agents their own unit types, numbered from the smallest id of
#: the first episode's agents (``StarCraft2Env._init_ally_unit_types``).
ALLY_TYPE_ORDER: Dict[str, Tuple[str, ...]] = {
    "marines": ("marine",),
    "MMM": ("marauder", "marine", "medivac"),
    "stalkers_and_zealots": ("stalker", "zealot"),
    "colossi_stalkers_zealots": ("colossus", "stalker", "zealot"),
    "zealots": ("zealot",),
    "hydralisks": ("hydralisk",),
    "stalkers": ("stalker",),
    "colossus": ("colossus",),
    "bane": ("baneling", "zergling"),
}

#: Every map of SMAC's registry (``smac/env/starcraft2/maps/smac_maps.py``) -> its
#: ``map_type``.
SMAC_MAPS: Dict[str, str] = {
    "3m": "marines", "8m": "marines", "25m": "marines", "5m_vs_6m": "marines",
    "8m_vs_9m": "marines", "10m_vs_11m": "marines", "27m_vs_30m": "marines",
    "2m_vs_1z": "marines", "MMM": "MMM", "MMM2": "MMM", "2s3z": "stalkers_and_zealots",
    "3s5z": "stalkers_and_zealots", "3s5z_vs_3s6z": "stalkers_and_zealots",
    "3s_vs_3z": "stalkers", "3s_vs_4z": "stalkers", "3s_vs_5z": "stalkers",
    "2s_vs_1sc": "stalkers", "1c3s5z": "colossi_stalkers_zealots", "corridor": "zealots",
    "so_many_baneling": "zealots", "6h_vs_8z": "hydralisks", "bane_vs_bane": "bane",
    "2c_vs_64zg": "colossus",
}

#: SMAC maps the schema cannot express, and why.
UNSUPPORTED_MAPS: Dict[str, str] = {
    "2s_vs_1sc": "its enemy is a spine crawler (SC2 unit type 98), which is not one of "
                 "acegnn.envs.smac.units.UNIT_TYPES",
}

#: The weapon cooldown that reads 1, per type (``StarCraft2Env.unit_max_cooldown``); a
#: medivac has no weapon and its column holds its energy over 200 (SMAC's ``get_state``).
MAX_COOLDOWN: Dict[str, float] = {
    "marine": 15.0, "marauder": 25.0, "medivac": 200.0, "stalker": 35.0, "zealot": 22.0,
    "colossus": 24.0, "hydralisk": 10.0, "zergling": 11.0, "baneling": 1.0,
}

#: ``StarCraft2Env.unit_shoot_range`` and ``unit_sight_range``: the same for every unit.
SHOOT_RANGE = 6.0
SIGHT_RANGE = 9.0
SC2_STATS = UnitStats(attack_range=(SHOOT_RANGE,) * len(UNIT_TYPES),
                      sight_range=(SIGHT_RANGE,) * len(UNIT_TYPES))

#: StarCraft2Env's difficulty codes of the built-in enemy AI.
DIFFICULTIES = ("1", "2", "3", "4", "5", "6", "7", "8", "9", "A")


def ally_unit_types(map_type: str, min_unit_type: int) -> Dict[int, str]:
    """The agents' map-specific unit type ids -> names, as
    ``StarCraft2Env._init_ally_unit_types`` numbers them.

    Args:
        map_type (str): The map's ``map_type`` (a key of :data:`ALLY_TYPE_ORDER`).
        min_unit_type (int): The smallest unit type id among the first episode's agents.
    """
    if map_type not in ALLY_TYPE_ORDER:
        raise ValueError(f"unknown SMAC map_type {map_type!r} (known: {sorted(ALLY_TYPE_ORDER)})")
    return {min_unit_type + k: name for k, name in enumerate(ALLY_TYPE_ORDER[map_type])}


def _unit_row(unit: Any, type_name: str, side: str, index: int) -> List[float]:
    """One row of :data:`UNIT_COLUMNS` from a ``raw_pb2.Unit``; normalised as SMAC's
    ``get_state_dict`` does (health over ``health_max``, shield over the unit's maximum,
    cooldown over ``unit_max_cooldown``, a medivac's energy in its place). An enemy's
    cooldown reads 0: the game does not report it. A dead unit (health 0) keeps its type
    and reads zero elsewhere."""
    type_id = float(UNIT_TYPES.index(type_name))
    if unit.health <= 0:
        return [type_id, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    if unit.health_max <= 0:
        raise ValueError(f"{side} {index} is alive with health_max {unit.health_max}")
    shield = unit.shield / unit.shield_max if unit.shield_max > 0 else 0.0
    if type_name == "medivac":
        spent = unit.energy
    else:  # the game does not fill an enemy's weapon_cooldown (raw.proto): it reads 0
        spent = unit.weapon_cooldown if side == "ally" else 0.0
    return [type_id, float(unit.pos.x), float(unit.pos.y), unit.health / unit.health_max,
            shield, spent / MAX_COOLDOWN[type_name], 1.0]


def _check_keys(units: Mapping[int, Any], side: str) -> None:
    if sorted(units) != list(range(len(units))):
        raise ValueError(f"{side} units must be keyed 0..{len(units) - 1}, as SMAC's are "
                         f"(got keys {sorted(units)})")


def sc2_units(agents: Mapping[int, Any], enemies: Mapping[int, Any],
              ally_types: Mapping[int, str],
              enemy_types: Mapping[int, str] = SC2_UNIT_TYPES) -> Tensor:
    """The ``units`` observation of a game: agents, then enemies, in SMAC's index order.

    Args:
        agents (dict): ``StarCraft2Env.agents``: index -> ``raw_pb2.Unit``.
        enemies (dict): ``StarCraft2Env.enemies``: index -> ``raw_pb2.Unit``.
        ally_types (dict): The agents' unit type ids -> names (:func:`ally_unit_types`).
        enemy_types (dict, optional): The enemies' unit type ids -> names.
            (default: :data:`SC2_UNIT_TYPES`)

    Shapes:
        output: ``[n_allies + n_enemies, 7]`` float, columns :data:`UNIT_COLUMNS`,
        positions in map units.
    """
    rows = []
    for side, units, types in (("ally", agents, ally_types), ("enemy", enemies, enemy_types)):
        _check_keys(units, side)
        for i in range(len(units)):
            unit = units[i]
            name = types.get(unit.unit_type)
            if name is None:
                raise ValueError(f"{side} {i} has unit type {unit.unit_type}, which is not one "
                                 f"of this map's {side} types {dict(types)}")
            rows.append(_unit_row(unit, name, side, i))
    return torch.tensor(rows, dtype=torch.float32).view(-1, len(UNIT_COLUMNS))


def sc2_avail(avail: Any, alive: Tensor) -> Tensor:
    """``[n_agents, num_slots]`` bool from SMAC's ``get_avail_actions()`` (one 0/1 list
    per agent), with exactly the no-op available to a dead agent
    (:func:`acegnn.graph.only_noop`)."""
    mask = torch.as_tensor(avail).bool()
    if mask.dim() != 2 or mask.size(0) != alive.numel():
        raise ValueError(f"available actions must be [{alive.numel()}, num_slots] "
                         f"(got {tuple(mask.shape)})")
    return only_noop(mask, alive.bool(), SMAC_ACTIONS.noop)


def healer_flags(agents: Mapping[int, Any], ally_types: Mapping[int, str],
                 map_type: str) -> Tuple[bool, ...]:
    """Per agent, whether its targeted actions heal allies: SMAC's medivacs on ``MMM``
    maps (``StarCraft2Env.get_agent_action``)."""
    _check_keys(agents, "ally")
    return tuple(map_type == "MMM" and ally_types.get(agents[i].unit_type) == "medivac"
                 for i in range(len(agents)))


def sc2_spec(n_agents: int, n_enemies: int, map_size: Tuple[float, float], num_slots: int,
             healers: Tuple[bool, ...] = ()) -> BattleSpec:
    """The :class:`BattleSpec` of a SMAC map.

    Args:
        n_agents (int): ``StarCraft2Env.n_agents``.
        n_enemies (int): ``StarCraft2Env.n_enemies``.
        map_size (tuple): ``(env.map_x, env.map_y)``.
        num_slots (int): ``env.get_total_actions()`` (``6 + n_enemies``).
        healers (tuple of bool, optional): :func:`healer_flags`. (default: none)
    """
    if n_agents < 1 or n_enemies < 1:
        raise ValueError(f"a battle needs agents and enemies (got {n_agents} and {n_enemies})")
    if num_slots != SMAC_ACTIONS.first_target + n_enemies:
        raise ValueError(f"SMAC has {SMAC_ACTIONS.first_target} + n_enemies = "
                         f"{SMAC_ACTIONS.first_target + n_enemies} actions per agent "
                         f"(got {num_slots})")
    if not (map_size[0] > 0 and map_size[1] > 0):
        raise ValueError(f"map size must be positive (got {tuple(map_size)})")
    return BattleSpec(n_agents, n_enemies, (float(map_size[0]), float(map_size[1])),
                      SMAC_ACTIONS, SC2_STATS, healers=tuple(healers), num_slots=num_slots)


def _make_smac_env(**kwargs: Any) -> Any:
    import google.protobuf
    from google.protobuf.internal import api_implementation

    if int(google.protobuf.__version__.split(".")[0]) >= 4 and api_implementation.Type() != "python":
        raise ValueError(
            f"StarCraft II through smac needs protobuf's pure-Python implementation: the "
            f"modules of s2clientprotocol do not load with protobuf "
            f"{google.protobuf.__version__}'s compiled one ({api_implementation.Type()}), and "
            f"TensorBoard needs protobuf >= 6. Set PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python "
            f"in the environment before starting (docs/sc2.md)")
    try:
        from smac.env import StarCraft2Env
    except ModuleNotFoundError as e:  # SMAC3, the optimiser, is also a package named smac
        raise MissingBackend(f"env.name=sc2 needs oxwhirl/smac, and the installed smac has no "
                             f"smac.env ({e}): it may be SMAC3, the hyper-parameter optimiser; "
                             f"pip uninstall smac, then docs/sc2.md") from None
    return StarCraft2Env(**kwargs)


class SC2Task(VecTask):
    """StarCraft II battles through oxwhirl/smac, as graphs (:mod:`acegnn.envs.smac.units`).

    Args:
        map_name (str): A SMAC map (:data:`SMAC_MAPS`). (default: :obj:`"5m_vs_6m"`)
        num_envs (int, optional): Games, stepped in turn. (default: :obj:`8`)
        seed (int, optional): Seeds the games' random seeds. (default: :obj:`0`)
        env_kwargs (dict, optional): Further ``StarCraft2Env`` arguments (``difficulty``,
            ``step_mul``, ``game_version``).
        make_env (callable, optional): ``make_env(map_name=..., seed=...,
            continuing_episode=True, **env_kwargs)`` returns one game; tests pass a
            stand-in. (default: ``smac.env.StarCraft2Env``)
        eval_envs (int, optional): Games of :meth:`evaluate`, launched at its first call
            and kept. (default: :obj:`4`)
    """

    noop_action = SMAC_ACTIONS.noop

    def __init__(self, map_name: str = "5m_vs_6m", num_envs: int = 8, seed: int = 0,
                 env_kwargs: Optional[Mapping[str, Any]] = None,
                 make_env: Optional[Callable[..., Any]] = None, eval_envs: int = 4) -> None:
        if map_name in UNSUPPORTED_MAPS:
            raise ValueError(f"SMAC map {map_name!r} cannot be played: "
                             f"{UNSUPPORTED_MAPS[map_name]}")
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1 (got {num_envs})")
        if eval_envs < 1:
            raise ValueError(f"eval_envs must be >= 1 (got {eval_envs})")
        self.map_name, self.num_envs, self.seed = map_name, num_envs, seed
        self.eval_envs = eval_envs
        self.env_kwargs = dict(env_kwargs or {})
        self.make_env = make_env if make_env is not None else _make_smac_env
        gen = torch.Generator().manual_seed(seed)
        game_seeds = torch.randint(0, 2 ** 31 - 1, (num_envs,), generator=gen).tolist()
        self.envs: List[Any] = []
        self._eval: Optional[Tuple[int, int, SC2Task]] = None  # (seed, games, task)
        try:
            for s in game_seeds:
                env = self.make_env(map_name=map_name, seed=int(s), continuing_episode=True,
                                    **self.env_kwargs)
                self.envs.append(env)
                env.reset()  # launches the game: map size and unit types are known after it
            first = self.envs[0]
            self.map_type = str(first.map_type)
            self.ally_types = ally_unit_types(
                self.map_type, min(u.unit_type for u in first.agents.values()))
            self.spec = self._spec_of(first)
            for b, env in enumerate(self.envs[1:], 1):
                if self._spec_of(env) != self.spec:
                    raise ValueError(f"game {b} plays another battle than game 0: "
                                     f"{self._spec_of(env)} vs {self.spec}")
        except BaseException:
            self.close()
            raise
        self.time_limit = int(first.episode_limit)
        self.schema = battle_schema()
        self.n_agents = self.spec.n_allies
        self.obs_spec = {"units": ((self.spec.n_units, len(UNIT_COLUMNS)), torch.float32),
                         "avail": ((self.spec.n_allies, self.spec.slots), torch.bool)}
        self._units, self._avail = self._stack([self._read(env) for env in self.envs])

    def _spec_of(self, env: Any) -> BattleSpec:
        healers = healer_flags(env.agents, self.ally_types, self.map_type)
        return sc2_spec(int(env.n_agents), int(env.n_enemies), (env.map_x, env.map_y),
                        int(env.get_total_actions()), healers)

    def _read(self, env: Any) -> Tuple[Tensor, Tensor]:
        units = sc2_units(env.agents, env.enemies, self.ally_types)
        if units.size(0) != self.spec.n_units:
            raise ValueError(f"the game holds {len(env.agents)} agents and {len(env.enemies)} "
                             f"enemies; {self.map_name} has {self.spec.n_allies} and "
                             f"{self.spec.n_enemies}")
        avail = sc2_avail(env.get_avail_actions(), units[:self.n_agents, 6] > 0)
        if avail.size(1) != self.spec.slots:
            raise ValueError(f"the game offers {avail.size(1)} actions per agent; "
                             f"{self.map_name} has {self.spec.slots}")
        return units, avail

    @staticmethod
    def _stack(obs: List[Tuple[Tensor, Tensor]]) -> Tuple[Tensor, Tensor]:
        return torch.stack([u for u, _ in obs]), torch.stack([a for _, a in obs])

    def observe(self) -> Dict[str, Tensor]:
        return {"units": self._units, "avail": self._avail}

    def step(self, actions: Tensor) -> Transition:
        actions = check_actions(actions, self._avail)
        B, n = self.num_envs, self.n_agents
        reward = torch.zeros(B)
        terminated = torch.zeros(B, dtype=torch.bool)
        truncated = torch.zeros(B, dtype=torch.bool)
        dropped = torch.zeros(B, dtype=torch.bool)
        won = torch.zeros(B, dtype=torch.bool)
        last, now = [], []
        for b, env in enumerate(self.envs):
            r, done, info = env.step(actions[b].tolist())
            if "battle_won" not in info:  # SMAC relaunched the game (a protocol error)
                dropped[b] = True
                env.reset()
                obs = self._read(env)
                last.append(obs)
                now.append(obs)
                continue
            obs = self._read(env)
            last.append(obs)
            cut = bool(done) and bool(info.get("episode_limit", False))
            terminated[b], truncated[b] = bool(done) and not cut, cut
            reward[b], won[b] = float(r), bool(info["battle_won"])
            if done:
                env.reset()
                obs = self._read(env)
            now.append(obs)
        next_units, next_avail = self._stack(last)
        self._units, self._avail = self._stack(now)
        alive = next_units[..., 6] > 0
        info = {"won": won, "allies_alive": alive[:, :n].float().mean(1),
                "enemies_alive": alive[:, n:].float().mean(1)}
        return Transition(reward=reward, terminated=terminated, truncated=truncated,
                          next_obs={"units": next_units, "avail": next_avail},
                          dropped=dropped, info=info)

    def restart(self) -> None:
        """Start a fresh battle in every game."""
        for env in self.envs:
            env.reset()
        self._units, self._avail = self._stack([self._read(env) for env in self.envs])

    def graphs(self, obs: Dict[str, Tensor]) -> Batch:
        return battle_graphs(obs["units"], obs["avail"], self.spec)

    def _eval_task(self, seed: int, games: int) -> Tuple[SC2Task, bool]:
        """The games that play test battles with ``seed``, and whether they were used."""
        if self._eval is not None and self._eval[:2] == (seed, games):
            return self._eval[2], True
        if self._eval is not None:
            self._eval[2].close()
            self._eval = None
        test = SC2Task(self.map_name, games, seed, self.env_kwargs, self.make_env, self.eval_envs)
        self._eval = (seed, games, test)
        return test, False

    def evaluate(self, act: Policy, episodes: int = 32, seed: int = 0) -> BattleEval:
        """Play ``episodes`` battles with ``act`` on ``eval_envs`` games of their own (in
        rounds of one battle per game, every game restarted between rounds) and report
        their outcomes. The games are seeded with ``seed`` when they are launched, at the
        first evaluation with that seed; StarCraft II does not replay a battle exactly."""
        if episodes < 1:
            raise ValueError(f"episodes must be >= 1 (got {episodes})")
        test, used = self._eval_task(seed, min(self.eval_envs, episodes))
        parts = []
        left = episodes
        while left > 0:
            if used:
                test.restart()
            tally = ActionTally(test.spec, test.num_envs)
            ep = first_episodes(test, act, test.time_limit, tally)
            used = True
            k = min(left, test.num_envs)
            parts.append((ep.returns[:k], ep.length[:k], ep.terminated[:k],
                          {key: ep.info[key][:k] for key in ("won", "allies_alive", "enemies_alive")},
                          tally.counts[:k]))
            left -= k
        returns, length, terminated, infos, counts = zip(*parts)
        return BattleEval.of(torch.cat(returns), torch.cat(length), torch.cat(terminated),
                             {key: torch.cat([i[key] for i in infos]) for key in infos[0]},
                             torch.cat(counts))

    def close(self) -> None:
        """Close every game (this task's and its evaluation's)."""
        if self._eval is not None:
            self._eval[2].close()
            self._eval = None
        envs, self.envs = self.envs, []
        for env in envs:
            env.close()

    def scene(self) -> Scene:
        return battle_scene(self.spec)

    def unit_positions(self, graphs: Batch) -> Tensor:
        return battle_positions(graphs, self.spec)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(map_name={self.map_name}, num_envs={self.num_envs})"


@dataclass
class SC2Config:
    """StarCraft II battles through oxwhirl/smac (``env.name: sc2``)."""

    name: str = "sc2"
    map_name: str = "5m_vs_6m"
    """SMAC map (acegnn.envs.smac.sc2.SMAC_MAPS; every one but 2s_vs_1sc)."""
    num_envs: int = 8
    """Games stepped in turn while collecting (one StarCraft II process each)."""
    eval_envs: int = 4
    """Games that play the test battles (launched at the first evaluation, then kept)."""
    difficulty: str = "7"
    """Built-in enemy AI: "1" (very easy) .. "7" (very hard, SMAC's default) .. "A"."""
    step_mul: int = 8
    """Game steps per agent step (SMAC's default)."""
    game_version: Optional[str] = None
    """StarCraft II version for pysc2 to run; null: the one installed."""

    def __post_init__(self) -> None:
        if self.map_name not in SMAC_MAPS:
            raise ValueError(f"env.map_name must be a SMAC map, one of {sorted(SMAC_MAPS)} "
                             f"(got {self.map_name!r})")
        if self.map_name in UNSUPPORTED_MAPS:
            raise ValueError(f"env.map_name {self.map_name!r} cannot be played: "
                             f"{UNSUPPORTED_MAPS[self.map_name]}")
        if self.num_envs < 1:
            raise ValueError(f"env.num_envs must be >= 1 (got {self.num_envs})")
        if self.eval_envs < 1:
            raise ValueError(f"env.eval_envs must be >= 1 (got {self.eval_envs})")
        if self.difficulty not in DIFFICULTIES:
            raise ValueError(f"env.difficulty must be one of {list(DIFFICULTIES)} "
                             f"(got {self.difficulty!r})")
        if self.step_mul < 1:
            raise ValueError(f"env.step_mul must be >= 1 (got {self.step_mul})")
        if self.game_version is not None and not self.game_version:
            raise ValueError(f"env.game_version must be a version or null "
                             f"(got {self.game_version!r})")

    def env_kwargs(self) -> Dict[str, Any]:
        """The ``StarCraft2Env`` arguments besides the map and the seed."""
        return {"difficulty": self.difficulty, "step_mul": self.step_mul,
                "game_version": self.game_version}

    def make(self, seed: int) -> SC2Task:
        return SC2Task(self.map_name, self.num_envs, seed, self.env_kwargs(),
                       eval_envs=self.eval_envs)

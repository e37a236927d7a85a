"""StarCraft battles as graphs, shared by the SMAX and StarCraft II back-ends.

One schema serves every map and both back-ends (paper Appendix, "Input Feature of ACE on
SMAC"), so one network plays any scenario as it is.

* **Nodes**: ``ally`` (the agents) and ``enemy``. Features: the unit type one-hot over
  :data:`UNIT_TYPES`, the position divided by the map size, and health, shield and
  weapon cooldown, each as a fraction of its maximum. A medivac's cooldown column holds
  its energy / 200; an enemy's cooldown reads 0.
* **Edges**: every ordered pair of distinct units (four relations). Features: the
  distance on the two axes and the Euclidean distance, in units of
  :data:`DISTANCE_SCALE`, and whether the destination is within the source's attack
  range and sight range.
* **Actions**: ``noop``, ``stop`` and four moves (active embedding only), ``attack``
  enemy ``j`` (passive message to enemy ``j``) and, for healers, ``heal`` ally ``j``
  (passive message to ally ``j``). Each back-end keeps its own action ids as slots
  (:class:`ActionLayout`).
* **Observations** (:func:`acegnn.graph.index.observed_units`): agent ``i`` observes
  the live units with ``dist < sight_range``, itself included; a dead agent observes
  nothing. The ally store's ``observes`` is ``[n_allies, n_units]``.
* **Dead units** stay nodes with ``alive`` flags: they send and receive no message, are
  not pooled (:func:`acegnn.graph.index.unit_alive`) and read zero features. A dead
  agent's only available action is the back-end's no-op slot.

An observation, what replay stores, is two arrays per environment:
``units`` ``[n_allies + n_enemies, 7]`` float (:data:`UNIT_COLUMNS`, positions in map
units) and ``avail`` ``[n_allies, num_slots]`` bool.

See docs/battles.md ("The graph") for the departures from the paper's feature table.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.envs.base import EvalResult, Scene
from acegnn.graph import ActionKind, DenseLayout, GraphSchema, dense_actions, full_edges, unit_index

#: Unit types of every SMAC and SMAX map (SMAX has marine .. hydralisk).
UNIT_TYPES = ("marine", "marauder", "medivac", "stalker", "zealot", "colossus", "zergling",
              "hydralisk", "baneling")
#: Columns of an observation's ``units`` array.
UNIT_COLUMNS = ("type", "x", "y", "health", "shield", "cooldown", "alive")
#: Action kinds, in schema order.
KINDS = ("noop", "stop", "move_north", "move_south", "move_east", "move_west", "attack", "heal")
#: Distances are measured in SMAC's sight range.
DISTANCE_SCALE = 9.0
NODE_FEATURES = len(UNIT_TYPES) + 5  # type one-hot, x, y, health, shield, cooldown
EDGE_FEATURES = 5  # dx, dy, distance, within attack range, within sight range
SIDES = ("ally", "enemy")
RELATIONS = tuple((s, "near", d) for s in SIDES for d in SIDES)


@lru_cache(maxsize=None)
def battle_schema() -> GraphSchema:
    """The one schema of every battle."""
    return GraphSchema(
        node_types={"ally": NODE_FEATURES, "enemy": NODE_FEATURES},
        edge_types={et: EDGE_FEATURES for et in RELATIONS},
        agent_types=("ally",),
        action_kinds=tuple(ActionKind(k, targeted=k in ("attack", "heal")) for k in KINDS),
    )


@dataclass(frozen=True)
class ActionLayout:
    """A back-end's action ids: the kind of each slot before the targeted ones, then one
    slot per target. ``moves`` and ``noop`` are slot numbers.

    Args:
        fixed (tuple of str): Kinds of the untargeted slots ``0..len(fixed)-1``.
        noop (int): The slot of an agent that can no longer act.
    """

    fixed: Tuple[str, ...]
    noop: int

    @property
    def first_target(self) -> int:
        return len(self.fixed)


#: SMAX (jaxmarl 0.2.0): moves north, east, south, west, then stop, then attack enemy j.
#: Dead units have stop as their only action.
SMAX_ACTIONS = ActionLayout(("move_north", "move_east", "move_south", "move_west", "stop"), noop=4)
#: SMAC: 0 no-op (dead units only), 1 stop, 2-5 moves north, south, east, west, then
#: attack enemy j, or heal ally j for healers (medivacs).
SMAC_ACTIONS = ActionLayout(("noop", "stop", "move_north", "move_south", "move_east", "move_west"),
                            noop=0)


@dataclass(frozen=True)
class UnitStats:
    """Ranges per unit type (indexed like :data:`UNIT_TYPES`), in map units."""

    attack_range: Tuple[float, ...]
    sight_range: Tuple[float, ...]


@dataclass(frozen=True)
class BattleSpec:
    """What the graph of a map needs besides its observations.

    Args:
        n_allies (int): Agents.
        n_enemies (int): Enemy units.
        map_size (tuple): ``(width, height)`` in map units.
        actions (ActionLayout): The back-end's action ids.
        stats (UnitStats): Attack and sight ranges per unit type.
        healers (tuple of bool, optional): Per ally, whether its targeted slots heal
            allies instead of attacking enemies (SMAC's medivacs). (default: none)
        num_slots (int, optional): Slots per agent; ``first_target + n_enemies`` if
            :obj:`None`.
    """

    n_allies: int
    n_enemies: int
    map_size: Tuple[float, float]
    actions: ActionLayout
    stats: UnitStats
    healers: Tuple[bool, ...] = ()
    num_slots: Optional[int] = None

    @property
    def slots(self) -> int:
        return self.num_slots if self.num_slots is not None else \
            self.actions.first_target + self.n_enemies

    @property
    def n_units(self) -> int:
        return self.n_allies + self.n_enemies


@lru_cache(maxsize=32)
def battle_layout(spec: BattleSpec) -> DenseLayout:
    """Units, all-pairs edges and the action table of every state of a map."""
    schema = battle_schema()
    counts = {"ally": spec.n_allies, "enemy": spec.n_enemies}
    edges = {et: full_edges(counts[et[0]], counts[et[2]], same=et[0] == et[2]) for et in RELATIONS}
    first, S = spec.actions.first_target, spec.slots
    n = spec.n_allies
    kind = torch.empty(n, S, dtype=torch.long)
    target = torch.full((n, S), -1, dtype=torch.long)
    ttype = torch.full((n, S), -1, dtype=torch.long)
    kind[:, :first] = torch.tensor([schema.kind_index(k) for k in spec.actions.fixed])
    healers = spec.healers or (False,) * n
    if len(healers) != n:
        raise ValueError(f"healers needs one flag per ally ({n}) (got {len(healers)})")
    for i, heals in enumerate(healers):
        k, side, count = ("heal", "ally", n) if heals else ("attack", "enemy", spec.n_enemies)
        m = min(count, S - first)
        kind[i, first:] = schema.kind_index(k)  # slots past the targets stay unavailable
        target[i, first:first + m] = torch.arange(m)
        ttype[i, first:] = schema.node_type_index(side)
        if m < S - first:  # no unit behind these slots: a move-like kind, never available
            kind[i, first + m:] = schema.kind_index("stop")
            ttype[i, first + m:] = -1
    actions = dense_actions(schema, "ally", kind, torch.ones(n, S, dtype=torch.bool), target)
    actions["target_type"] = torch.where(target.reshape(-1) >= 0, ttype.reshape(-1), -1)
    return DenseLayout(schema, counts, edges, actions)


@lru_cache(maxsize=32)
def _pairs(spec: BattleSpec) -> Dict[Tuple[str, str, str], Tensor]:
    """Per relation, the row of each edge in the ``[U * U]`` ordered unit pairs
    (source-major) of one state."""
    layout = battle_layout(spec)
    first = {"ally": 0, "enemy": spec.n_allies}
    return {et: (first[et[0]] + layout.edge_index[et][0]) * spec.n_units
            + first[et[2]] + layout.edge_index[et][1] for et in RELATIONS}


def battle_graphs(units: Tensor, avail: Tensor, spec: BattleSpec) -> Batch:
    """Graph batch of observations: ``units`` ``[B, U, 7]`` (:data:`UNIT_COLUMNS`) and
    ``avail`` ``[B, n_allies, num_slots]``."""
    B, U, _ = units.shape
    if U != spec.n_units or units.size(2) != len(UNIT_COLUMNS):
        raise ValueError(f"units must be [B, {spec.n_units}, {len(UNIT_COLUMNS)}] for "
                         f"{spec.n_allies} allies and {spec.n_enemies} enemies "
                         f"(got {tuple(units.shape)})")
    if avail.shape[1:] != (spec.n_allies, spec.slots):
        raise ValueError(f"avail must be [B, {spec.n_allies}, {spec.slots}] "
                         f"(got {tuple(avail.shape)})")
    units = units.float()
    types = units[..., 0].long()
    if bool(((types < 0) | (types >= len(UNIT_TYPES))).any()):
        raise ValueError(f"unit type ids must be in 0..{len(UNIT_TYPES) - 1} (got "
                         f"{types.unique().tolist()})")
    alive = units[..., 6] > 0
    size = units.new_tensor(spec.map_size)
    pos = units[..., 1:3]
    feats = torch.cat([F.one_hot(types, len(UNIT_TYPES)).to(units.dtype), pos / size,
                       units[..., 3:6]], dim=-1) * alive.unsqueeze(-1)  # [B, U, F]
    attack = units.new_tensor(spec.stats.attack_range)[types]  # [B, U]
    sight = units.new_tensor(spec.stats.sight_range)[types]
    sl = {"ally": slice(0, spec.n_allies), "enemy": slice(spec.n_allies, U)}
    layout = battle_layout(spec)
    # edge features of every ordered pair (source i, destination j), then each relation's
    delta = pos.unsqueeze(1) - pos.unsqueeze(2)  # [B, U, U, 2]: pos_j - pos_i
    dist = delta.norm(dim=-1, keepdim=True)
    both = (alive.unsqueeze(2) & alive.unsqueeze(1)).unsqueeze(-1)
    pairs = torch.cat([delta / DISTANCE_SCALE, dist / DISTANCE_SCALE,
                       (dist < attack.view(B, U, 1, 1)).to(units.dtype),
                       (dist < sight.view(B, U, 1, 1)).to(units.dtype)], dim=-1) * both
    pairs = pairs.view(B, U * U, EDGE_FEATURES)
    edge_attr = {et: pairs.index_select(1, rows.to(units.device)) for et, rows in _pairs(spec).items()}
    x = {t: feats[:, sl[t]] for t in SIDES}
    flags = {t: alive[:, sl[t]] for t in SIDES}
    out = layout.batch(x, edge_attr, avail.reshape(B, -1).bool(), flags)
    out["ally"].order_key = sort_key(units[:, sl["ally"]]).reshape(-1)
    # what each agent observes (ACE-CTDE): the live units within its sight range,
    # itself included; a dead agent observes nothing
    sees = (dist.squeeze(-1) < sight.view(B, U, 1)) & alive.unsqueeze(2) & alive.unsqueeze(1)
    out["ally"].observes = sees[:, sl["ally"]].reshape(B * spec.n_allies, U)
    return out


def sort_key(units: Tensor) -> Tensor:
    """The paper's sorted order (ablation "Sorted Order"): by unit type, then x, then y.
    ``[..., 7] -> [...]`` float64."""
    u = units.double()
    return u[..., 0] * 1e8 + u[..., 1] * 1e4 + u[..., 2]


def battle_scene(spec: BattleSpec) -> Scene:
    """The map's rectangle; the four moves drawn as arrows of one map unit."""
    w, h = spec.map_size
    lines = (((0.0, 0.0), (w, 0.0)), ((w, 0.0), (w, h)), ((w, h), (0.0, h)), ((0.0, h), (0.0, 0.0)))
    moves = (("move_north", (0.0, 1.0)), ("move_south", (0.0, -1.0)),
             ("move_east", (1.0, 0.0)), ("move_west", (-1.0, 0.0)))
    return Scene(xlim=(0.0, float(w)), ylim=(0.0, float(h)), lines=lines, moves=moves)


def battle_positions(graphs: Batch, spec: BattleSpec) -> Tensor:
    """``[num_units, 2]`` map positions read back from the node features (a dead unit
    reads ``(0, 0)``)."""
    schema = battle_schema()
    idx = unit_index(schema, graphs, check=False)
    pos = torch.empty(idx.num_units, 2)
    k = len(UNIT_TYPES)
    for t in SIDES:
        pos[idx.flat[t].cpu()] = graphs[t].x[:, k:k + 2].cpu() * torch.tensor(spec.map_size)
    return pos


def win_info(units: Tensor, n_allies: int) -> Dict[str, Tensor]:
    """``won`` (every enemy dead and an ally alive) of observations ``[B, U, 7]``."""
    alive = units[..., 6] > 0
    return {"won": ~alive[:, n_allies:].any(1) & alive[:, :n_allies].any(1)}


#: What :class:`ActionTally` counts the live agents' actions as: a move (any direction),
#: a stop (or SMAC's no-op), an attack (or a medivac's heal: the targeted slots).
ACTION_GROUPS = ("move", "stop", "attack")


def action_groups(actions: Tensor, spec: BattleSpec) -> Tensor:
    """The group of each action id (an index of :data:`ACTION_GROUPS`), same shape."""
    fixed = spec.actions.fixed
    table = torch.tensor([0 if kind.startswith("move") else 1 for kind in fixed])
    return torch.where(actions < len(fixed), table[actions.clamp(max=len(fixed) - 1)], 2)


def in_range(graphs: Batch, spec: BattleSpec) -> Tensor:
    """``[num_envs, n_agents]``: whether each agent has a target within reach (one of its
    target slots available: an enemy in attack range, or an ally a medivac can heal)."""
    n = graphs.num_graphs
    avail = graphs["action"].available.view(n, spec.n_allies, -1)
    return avail[:, :, spec.actions.first_target:].any(-1).cpu()


def live_action_groups(graphs: Batch, actions: Tensor, counted: Tensor,
                       spec: BattleSpec) -> Tuple[Tensor, Tensor]:
    """``(live, groups)``, both ``[num_envs, n_agents]``, of ``actions`` chosen on
    ``graphs``: whether the agent was alive when it chose, in an environment whose step
    counts (``counted`` ``[num_envs]``), and its action's group (:func:`action_groups`)."""
    n = actions.size(0)
    live = graphs["ally"].alive.view(n, -1).cpu() & counted.view(n, 1).cpu()
    return live, action_groups(actions.cpu(), spec)


class ActionTally:
    """The live agents' actions of test battles by group (:data:`ACTION_GROUPS`): the
    ``on_step`` of :func:`acegnn.envs.base.first_episodes`. ``counts`` ``[num_envs, 3]``:
    per battle, the actions of agents alive when they chose them (a battle an engine
    restart voided starts again from zero)."""

    def __init__(self, spec: BattleSpec, num_envs: int) -> None:
        self.spec = spec
        self.counts = torch.zeros(num_envs, len(ACTION_GROUPS), dtype=torch.long)

    def __call__(self, graphs: Batch, actions: Tensor, counted: Tensor, restarted: Tensor) -> None:
        self.counts[restarted.cpu()] = 0
        live, groups = live_action_groups(graphs, actions, counted, self.spec)
        self.counts += (F.one_hot(groups, len(ACTION_GROUPS)) * live.unsqueeze(-1)).sum(1)


@dataclass
class BattleEval(EvalResult):
    """Greedy test battles (SMAC's protocol: 32 episodes, no exploration)."""

    win_rate: float
    """Fraction of battles won (every enemy dead, an ally alive)."""
    mean_return: float
    """Mean undiscounted return, in the scale the task trains with."""
    mean_steps: float
    """Mean battle length; a battle cut at the time limit counts the limit."""
    allies_alive: float
    """Mean fraction of the agents alive at the end."""
    enemies_alive: float
    """Mean fraction of the enemies alive at the end."""
    draw_rate: float = 0.0
    """Fraction of battles that ended with both sides dead (no win)."""
    timeout_rate: float = 0.0
    """Fraction of battles cut at the time limit with both sides alive."""
    move_share: float = float("nan")
    """Fraction of the live agents' actions that were moves (NaN: not counted)."""
    stop_share: float = float("nan")
    """Fraction that were stops (SMAC: or no-ops)."""
    attack_share: float = float("nan")
    """Fraction that were attacks (or heals)."""

    @classmethod
    def of(cls, returns: Tensor, length: Tensor, terminated: Tensor,
           info: Dict[str, Tensor], actions: Optional[Tensor] = None) -> "BattleEval":
        """The means over battles ``[E]``: their returns, lengths, whether each ended by
        a side's death (``terminated``; otherwise the time limit cut it) and the task's
        last ``info`` (``won``, ``allies_alive``, ``enemies_alive``); ``actions``
        ``[E, 3]``: the live agents' actions per battle by group (:class:`ActionTally`),
        whose shares are over all the battles' agent-steps together (a longer battle
        weighs more)."""
        allies, enemies = info["allies_alive"].float(), info["enemies_alive"].float()
        shares = {}
        if actions is not None:
            total = actions.sum(0).double()
            shares = {f"{g}_share": float(c / total.sum()) if total.sum() > 0 else float("nan")
                      for g, c in zip(ACTION_GROUPS, total)}
        return cls(win_rate=float(info["won"].float().mean()),
                   mean_return=float(returns.float().mean()),
                   mean_steps=float(length.float().mean()),
                   allies_alive=float(allies.mean()), enemies_alive=float(enemies.mean()),
                   draw_rate=float((terminated & (allies == 0) & (enemies == 0)).float().mean()),
                   timeout_rate=float((~terminated).float().mean()), **shares)

    success_metric: ClassVar[str] = "win_rate"
    success_threshold: ClassVar[float] = 1.0
    headline: ClassVar[Tuple[str, ...]] = ("win_rate", "mean_return")

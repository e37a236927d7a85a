"""Google Research Football as a graph task (paper Appendix: "Input Feature of ACE on
GRF" and the interaction-aware action embedding).

* **Nodes**: ``player`` (our agents), ``opponent`` (every right player, the keeper
  included) and ``ball``. A player's and an opponent's features: a one-hot of its index
  among its type's units, position ``(x, y)``, speed (movement per step times
  :data:`SPEED_SCALE`) and whether it owns the ball. With ``sticky_features`` a player's
  features end with its 10 ``sticky_actions`` flags. The ball's features: position
  ``(x, y, z)``, direction (times :data:`SPEED_SCALE`) and two flags, owned by us and
  owned by them.
* **Edges**: every ordered pair of distinct units; features ``dst - src`` on the two axes.
* With ``features="official"``, the official code's columns (``gfootball_academy_env_ace.py``):
  no unit ids, positions relative to the goal ``(1, 0, 0)``, and 4 edge features ``dx, dy,
  dx / d, dy / d`` where ``d`` is, as its code computes it, the distance over every column
  from the position on (position, direction times :data:`SPEED_SCALE`, the players' sticky
  flags), not over the position alone (:data:`FEATURE_SETS`).
* **Actions**: gfootball's 19 standard actions, one kind each (slot = action id), all
  ``targeted`` at the ball. Only the ball owner's actions send a passive message to the
  ball (``target_on`` per state). Availability:
  :func:`~acegnn.envs.grf.engine.available_actions`.

An observation is three arrays per environment: ``units``
``[n_agents + n_opponents + 1, 7]`` float (:data:`~acegnn.envs.grf.engine.UNIT_COLUMNS`:
the agents, the opponents, the ball), ``avail`` ``[n_agents, 19]`` bool and ``sticky``
``[n_agents, 10]`` float (:data:`~acegnn.envs.grf.engine.STICKY`).

The rules and the engine processes are :mod:`acegnn.envs.grf.engine`'s. A game cannot
be snapshotted: :meth:`GRFTask.state_dict` is ``None``. See docs/grf.md ("The graph").
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar, Dict, Iterator, List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.envs.base import (EvalResult, Policy, Scene, Transition, VecTask, check_actions,
                              first_episodes)
from acegnn.envs.grf.engine import (ACTION_MASKS, ACTIONS, BACKENDS, MOVES, N_ACTIONS, REWARDS,
                                    STICKY, UNIT_COLUMNS, EnginePool, check_choice)
from acegnn.envs.grf.scenarios import SCENARIOS, GRFScenario, get_scenario
from acegnn.graph import ActionKind, DenseLayout, GraphSchema, dense_actions, full_edges, unit_index

#: A unit's movement per step times this is its speed feature (docs/grf.md, "The graph").
SPEED_SCALE = 50.0
NODE_TYPES = ("player", "opponent", "ball")
RELATIONS = tuple((s, "near", d) for s in NODE_TYPES for d in NODE_TYPES
                  if not (s == d == "ball"))
EDGE_FEATURES = {"paper": 2, "official": 4}  # dx, dy; and dx / d, dy / d
#: The feature sets (``env.features``): paper (the paper's feature table) or official (the
#: official code's columns; the possession flags stay ours: its code flags row
#: ``ball_owned_player - 1`` of our players whichever team owns the ball).
FEATURE_SETS = ("paper", "official")
#: Where the official code's positions are measured from: the goal it attacks.
GOAL = (1.0, 0.0, 0.0)
BALL_FEATURES = 8  # x, y, z, dx, dy, dz, owned by us, owned by them
#: One grid step of a move action drawn as an arrow (``y`` grows downwards).
MOVE_VECTORS = {"left": (-1, 0), "top_left": (-1, -1), "top": (0, -1), "top_right": (1, -1),
                "right": (1, 0), "bottom_right": (1, 1), "bottom": (0, 1), "bottom_left": (-1, 1)}


@lru_cache(maxsize=None)
def grf_schema(n_agents: int, n_opponents: int, sticky: bool = False,
               features: str = "paper") -> GraphSchema:
    """The schema of a scenario with ``n_agents`` players and ``n_opponents`` opponents
    (the paper's unit-id one-hots make the widths depend on the counts); ``sticky``: the
    players' features end with their sticky-action flags; ``features``: one of
    :data:`FEATURE_SETS`."""
    check_choice("features", features, FEATURE_SETS)
    ids = features == "paper"
    player = (n_agents if ids else 0) + 5 + (len(STICKY) if sticky else 0)
    return GraphSchema(
        node_types={"player": player, "opponent": (n_opponents if ids else 0) + 5,
                    "ball": BALL_FEATURES},
        edge_types={et: EDGE_FEATURES[features] for et in RELATIONS},
        agent_types=("player",),
        action_kinds=tuple(ActionKind(a, targeted=True) for a in ACTIONS),
    )


@lru_cache(maxsize=None)
def grf_layout(n_agents: int, n_opponents: int) -> DenseLayout:
    """Units, all-pairs edges and the action table shared by every state: each player's
    19 slots, of kinds 0..18, all aimed at ball 0 (switched per state by ``target_on``)."""
    schema = grf_schema(n_agents, n_opponents)
    counts = {"player": n_agents, "opponent": n_opponents, "ball": 1}
    edges = {et: full_edges(counts[et[0]], counts[et[2]], same=et[0] == et[2]) for et in RELATIONS}
    actions = dense_actions(schema, "player", torch.arange(N_ACTIONS),
                            available=torch.ones(n_agents, N_ACTIONS, dtype=torch.bool),
                            target=torch.zeros(N_ACTIONS, dtype=torch.long), target_type="ball")
    return DenseLayout(schema, counts, edges, actions)


def grf_graphs(units: Tensor, avail: Tensor, n_agents: int,
               sticky: Optional[Tensor] = None, features: str = "paper",
               flags: Optional[Tensor] = None) -> Batch:
    """Graph batch of observations ``units`` ``[B, U, 7]`` and ``avail``
    ``[B, n_agents, 19]`` (the opponents are the rows between the agents and the ball);
    ``sticky`` ``[B, n_agents, 10]``, when given, ends the players' features;
    ``features``: one of :data:`FEATURE_SETS`. The official edge features' distance reads
    the players' sticky flags ``flags`` (``[B, n_agents, 10]``; default ``sticky``, or
    none) whether or not they are features, as the official code's does."""
    check_choice("features", features, FEATURE_SETS)
    if units.dim() != 3 or units.size(2) != len(UNIT_COLUMNS) or units.size(1) < n_agents + 2:
        raise ValueError(f"units must be [B, n_agents + n_opponents + 1, {len(UNIT_COLUMNS)}] "
                         f"with {n_agents} agents (got {tuple(units.shape)})")
    B, U, _ = units.shape
    if avail.shape != (B, n_agents, N_ACTIONS):
        raise ValueError(f"avail must be [{B}, {n_agents}, {N_ACTIONS}] (got {tuple(avail.shape)})")
    for name, value in (("sticky", sticky), ("flags", flags)):
        if value is not None and value.shape != (B, n_agents, len(STICKY)):
            raise ValueError(f"{name} must be [{B}, {n_agents}, {len(STICKY)}] "
                             f"(got {tuple(value.shape)})")
    n_opp = U - n_agents - 1
    units = units.float()
    official = features == "official"
    pos, speed, owns = units[..., 0:2], units[..., 3:5] * SPEED_SCALE, units[..., 6:7]
    where = (pos - pos.new_tensor(GOAL[:2])) if official else pos  # the features' positions
    rows = {"player": slice(0, n_agents), "opponent": slice(n_agents, U - 1),
            "ball": slice(U - 1, U)}
    x = {}
    for t, n in (("player", n_agents), ("opponent", n_opp)):
        s = rows[t]
        ids = [] if official else [torch.eye(n, dtype=units.dtype, device=units.device).expand(B, n, n)]
        x[t] = torch.cat(ids + [where[:, s], speed[:, s], owns[:, s]], dim=2)
    if sticky is not None:
        x["player"] = torch.cat([x["player"], sticky.to(units.dtype)], dim=2)
    ball = units[:, -1]
    team = ball[:, 6:7]
    ball_pos = (ball[:, 0:3] - ball.new_tensor(GOAL)) if official else ball[:, 0:3]
    x["ball"] = torch.cat([ball_pos, ball[:, 3:6] * SPEED_SCALE, (team == 0).to(units.dtype),
                           (team == 1).to(units.dtype)], dim=1).unsqueeze(1)
    layout = grf_layout(n_agents, n_opp)
    if official:  # the columns the official code's distance runs over, [B, U, 16]
        flags = sticky if flags is None else flags
        state = units.new_zeros(B, U, len(STICKY))
        if flags is not None:
            state[:, :n_agents] = flags.to(units.dtype)
        state = torch.cat([units[..., 0:3], units[..., 3:6] * SPEED_SCALE, state], dim=2)
    edge_attr = {}
    for et in RELATIONS:
        src, dst = layout.edge_index[et]
        delta = pos[:, rows[et[2]]][:, dst] - pos[:, rows[et[0]]][:, src]  # [B, E, 2]
        if official:
            d = state[:, rows[et[2]]][:, dst] - state[:, rows[et[0]]][:, src]
            delta = torch.cat([delta, delta / (d.norm(dim=2, keepdim=True) + 1e-8)], dim=2)
        edge_attr[et] = delta
    # only the ball owner's actions reach the ball: [B, n_agents * 19]
    target_on = (owns[:, :n_agents, 0] > 0).repeat_interleave(N_ACTIONS, dim=1)
    out = layout.batch(x, edge_attr, avail.reshape(B, -1).bool(), target_on=target_on)
    out["player"].order_key = (pos[:, :n_agents, 0].double() * 1e4
                               + pos[:, :n_agents, 1].double()).reshape(-1)
    return out


#: The ball owner's actions, grouped (:class:`OwnerTally`).
OWNER_GROUPS = {"move": MOVES, "shot": ("shot",), "short_pass": ("short_pass",),
                "long_or_high_pass": ("long_pass", "high_pass"), "idle": ("idle",),
                "sprint_or_dribble": ("sprint", "release_sprint", "dribble", "release_dribble",
                                      "release_direction"),
                "sliding": ("sliding",)}
_GROUP_OF = torch.tensor([next(i for i, names in enumerate(OWNER_GROUPS.values()) if a in names)
                          for a in ACTIONS])


def position_column(n_agents: int, features: str = "paper") -> int:
    """The column of a player's ``x`` in :func:`grf_graphs`' features (after the paper's
    unit ids); its possession flag is 4 columns on (after ``x, y`` and the speed)."""
    check_choice("features", features, FEATURE_SETS)
    return n_agents if features == "paper" else 0


def owner_counts(graphs: Batch, actions: Tensor, counted: Tensor, n_agents: int,
                 features: str = "paper") -> Tensor:
    """``[num_envs, len(OWNER_GROUPS) + 2]`` per environment of one step: the ball owner's
    action group (one-hot), then its pitch ``x`` if it shot, then 1 if one of our agents
    owns the ball; zeros for environments whose step is not ``counted``. ``actions``
    ``[num_envs, n_agents]``, ``graphs`` built by :func:`grf_graphs` with ``features``."""
    n = actions.size(0)
    x = graphs["player"].x.cpu().view(n, n_agents, -1)
    at = position_column(n_agents, features)
    owns = x[..., at + 4] > 0
    has = owns.any(1) & counted.cpu()
    owner = owns.float().argmax(1)
    act = actions.cpu().gather(1, owner.unsqueeze(1)).squeeze(1)
    rows = torch.arange(n)
    out = torch.zeros(n, len(OWNER_GROUPS) + 2)
    out[rows, _GROUP_OF[act]] = 1.0
    pitch_x = x[rows, owner, at] + (GOAL[0] if features == "official" else 0.0)
    out[:, -2] = torch.where(act == ACTIONS.index("shot"), pitch_x, torch.zeros(()))
    out[:, -1] = 1.0
    return out * has.unsqueeze(1)


class OwnerTally:
    """:func:`owner_counts` summed over test episodes: the ``on_step`` of
    :func:`acegnn.envs.base.first_episodes`. ``counts`` ``[num_envs, len(OWNER_GROUPS) +
    2]`` per episode (one an engine restart voided starts again from zero)."""

    def __init__(self, n_agents: int, num_envs: int, features: str = "paper") -> None:
        self.n_agents, self.features = n_agents, features
        self.counts = torch.zeros(num_envs, len(OWNER_GROUPS) + 2)

    def __call__(self, graphs: Batch, actions: Tensor, counted: Tensor, restarted: Tensor) -> None:
        self.counts[restarted.cpu()] = 0.0
        self.counts += owner_counts(graphs, actions, counted, self.n_agents, self.features)


@dataclass
class GRFEval(EvalResult):
    """Greedy test episodes on GRF (the paper's protocol: 32 episodes, no exploration)."""

    win_rate: float
    """Fraction of episodes in which we scored."""
    mean_return: float
    """Mean undiscounted return (+100 a goal, -1 a loss by the task's reward rule)."""
    mean_steps: float
    """Mean episode length; an episode cut at the time limit counts the limit."""
    possession: float = float("nan")
    """Fraction of the steps in which one of our agents owned the ball (NaN: not counted)."""
    move_share: float = float("nan")
    """Fraction of the ball owner's actions that were moves (it carried the ball)."""
    pass_share: float = float("nan")
    """Fraction that were passes (short, long or high)."""
    shot_share: float = float("nan")
    """Fraction that were shots."""

    success_metric: ClassVar[str] = "win_rate"
    success_threshold: ClassVar[float] = 1.0
    headline: ClassVar[Tuple[str, ...]] = ("win_rate", "mean_return")


class GRFTask(VecTask):
    """Google Research Football scenarios as graphs, the games in engine processes.

    Args:
        scenario (str or GRFScenario): A name in
            :data:`~acegnn.envs.grf.scenarios.SCENARIOS`. (default:
            :obj:`"academy_3_vs_1_with_keeper"`)
        num_envs (int, optional): Games stepped together. (default: :obj:`8`)
        seed (int, optional): Seeds the games. (default: :obj:`0`)
        num_workers (int, optional): Engine processes the games are split over (at most
            one per game). (default: :obj:`2`)
        time_limit, goal_reward, end_reward, reward, time_limit_terminal, action_mask
            (optional): The rules, as :class:`~acegnn.envs.grf.engine.Game` takes them,
            with its defaults.
        sticky_features (bool, optional): The players' features end with their
            sticky-action flags. (default: :obj:`False`)
        features (str, optional): One of :data:`FEATURE_SETS`. (default: :obj:`"paper"`)
        eval_envs (int, optional): Games that play the test episodes (in rounds), made
            at the first evaluation and kept. (default: :obj:`8`)
        step_timeout (float, optional): Seconds before an engine process that has not
            answered a step counts as hung and is restarted. (default: :obj:`30.0`)
        start_timeout (float, optional): Seconds an engine process may take to start.
            (default: :obj:`120.0`)
        backend, ray_address, ray_cpus (optional): Where the engines run, as
            :class:`~acegnn.envs.grf.engine.EnginePool` takes them: processes on this
            machine (default) or Ray actors.
    """

    def __init__(self, scenario: "str | GRFScenario" = "academy_3_vs_1_with_keeper",
                 num_envs: int = 8, seed: int = 0, num_workers: int = 2, time_limit: int = 150,
                 goal_reward: float = 100.0, end_reward: float = -1.0, reward: str = "paper",
                 time_limit_terminal: bool = True, sticky_features: bool = False,
                 eval_envs: int = 8, step_timeout: float = 30.0,
                 start_timeout: float = 120.0, backend: str = "process",
                 ray_address: Optional[str] = None, ray_cpus: float = 1.0,
                 action_mask: str = "ours", features: str = "paper") -> None:
        self.spec = get_scenario(scenario)
        check_choice("features", features, FEATURE_SETS)
        self.features = features
        if isinstance(eval_envs, bool) or not isinstance(eval_envs, int) or eval_envs < 1:
            raise ValueError(f"eval_envs must be a positive integer (got {eval_envs!r})")
        self.num_envs, self.seed, self.time_limit = num_envs, seed, time_limit
        self.eval_envs, self.sticky_features = eval_envs, bool(sticky_features)
        self._pool_args = dict(num_workers=num_workers, time_limit=time_limit,
                               goal_reward=goal_reward, end_reward=end_reward, reward=reward,
                               time_limit_terminal=time_limit_terminal, action_mask=action_mask,
                               step_timeout=step_timeout, start_timeout=start_timeout,
                               backend=backend, ray_address=ray_address, ray_cpus=ray_cpus)
        self.n_agents = self.spec.n_agents
        self.schema = grf_schema(self.n_agents, self.spec.n_right, self.sticky_features, features)
        self.obs_spec = {"units": ((self.spec.n_units, len(UNIT_COLUMNS)), torch.float32),
                         "avail": ((self.n_agents, N_ACTIONS), torch.bool),
                         "sticky": ((self.n_agents, len(STICKY)), torch.float32)}
        self._eval: Optional[Tuple[int, int, GRFTask]] = None  # (seed, games, task)
        self.pool = EnginePool(self.spec, num_envs, seed=seed, **self._pool_args)

    @property
    def num_workers(self) -> int:
        return self.pool.num_workers

    def observe(self) -> Dict[str, Tensor]:
        return {"units": torch.from_numpy(self.pool.units.copy()),
                "avail": torch.from_numpy(self.pool.avail.copy()),
                "sticky": torch.from_numpy(self.pool.sticky.copy())}

    def step(self, actions: Tensor) -> Transition:
        out = self.pool.step(check_actions(actions, torch.from_numpy(self.pool.avail), ACTIONS).numpy())
        return Transition(
            reward=torch.from_numpy(out.reward), terminated=torch.from_numpy(out.terminated),
            truncated=torch.from_numpy(out.truncated),
            next_obs={"units": torch.from_numpy(out.units), "avail": torch.from_numpy(out.avail),
                      "sticky": torch.from_numpy(out.sticky)},
            dropped=torch.from_numpy(out.dropped),
            info={"won": torch.from_numpy(out.won), "half_court": torch.from_numpy(out.half_court)})

    def graphs(self, obs: Dict[str, Tensor]) -> Batch:
        return grf_graphs(obs["units"], obs["avail"], self.n_agents,
                          obs["sticky"] if self.sticky_features else None, self.features,
                          obs["sticky"])

    def restart(self, seed: int) -> None:
        """A new episode in every game, drawn from ``seed`` (the same seed, the same
        episodes for the same actions)."""
        self.pool.reseed(seed)

    def _eval_task(self, seed: int, games: int) -> GRFTask:
        """The games that play test episodes with ``seed`` (made with that seed at its
        first evaluation, then kept)."""
        if self._eval is not None and self._eval[:2] == (seed, games):
            return self._eval[2]
        if self._eval is not None:
            self._eval[2].close()
            self._eval = None
        test = GRFTask(self.spec, games, seed, sticky_features=self.sticky_features,
                       eval_envs=self.eval_envs, features=self.features, **self._pool_args)
        self._eval = (seed, games, test)
        return test

    def test_rounds(self, episodes: int, seed: int) -> Iterator[Tuple["GRFTask", int]]:
        """The rounds of :meth:`evaluate`'s test episodes: ``(games, k)`` per round, the
        games reseeded for it; the first episode of each of the first ``k`` games is a
        test episode."""
        if episodes < 1:
            raise ValueError(f"episodes must be >= 1 (got {episodes})")
        test = self._eval_task(seed, min(self.eval_envs, episodes))
        left, r = episodes, 0
        while left > 0:
            test.restart(seed * 1_000_003 + r)
            k = min(left, test.num_envs)
            yield test, k
            left, r = left - k, r + 1

    def evaluate(self, act: Policy, episodes: int = 32, seed: int = 0) -> GRFEval:
        """Play ``episodes`` episodes with ``act`` on ``eval_envs`` games of their own
        (made with ``seed``), in rounds of one episode per game; round ``r`` reseeds the
        games from ``(seed, r)``: the same seed plays the same episodes, whatever the
        training task's seed."""
        returns, length, won, owner = [], [], [], []
        for test, k in self.test_rounds(episodes, seed):
            tally = OwnerTally(self.n_agents, test.num_envs, self.features)
            ep = first_episodes(test, act, self.time_limit, tally)
            returns.append(ep.returns[:k])
            length.append(ep.length[:k].float())
            won.append(ep.info["won"][:k].float())
            owner.append(tally.counts[:k])

        def mean(parts: List[Tensor]) -> float:
            return float(torch.cat(parts).mean())

        counts = torch.cat(owner).sum(0).double()
        owned, g = float(counts[-1]), list(OWNER_GROUPS)

        def share(*groups: str) -> float:
            return sum(float(counts[g.index(k)]) for k in groups) / owned if owned else float("nan")

        return GRFEval(win_rate=mean(won), mean_return=mean(returns), mean_steps=mean(length),
                       possession=owned / float(torch.cat(length).sum()),
                       move_share=share("move"), pass_share=share("short_pass", "long_or_high_pass"),
                       shot_share=share("shot"))

    def close(self) -> None:
        """End the engine processes (this task's and its evaluation's)."""
        if self._eval is not None:
            self._eval[2].close()
            self._eval = None
        self.pool.close()

    def scene(self) -> Scene:
        """The pitch (``y`` grows downwards), its halfway line and goal mouths; the eight
        moves drawn as arrows of 0.05."""
        lines = (((-1.0, -0.42), (1.0, -0.42)), ((1.0, -0.42), (1.0, 0.42)),
                 ((1.0, 0.42), (-1.0, 0.42)), ((-1.0, 0.42), (-1.0, -0.42)),
                 ((0.0, -0.42), (0.0, 0.42)),
                 ((-1.0, -0.044), (-1.03, -0.044)), ((-1.03, -0.044), (-1.03, 0.044)),
                 ((-1.03, 0.044), (-1.0, 0.044)),
                 ((1.0, -0.044), (1.03, -0.044)), ((1.03, -0.044), (1.03, 0.044)),
                 ((1.03, 0.044), (1.0, 0.044)))
        moves = tuple((m, (0.05 * MOVE_VECTORS[m][0], 0.05 * MOVE_VECTORS[m][1])) for m in MOVES)
        return Scene(xlim=(-1.05, 1.05), ylim=(-0.45, 0.45), lines=lines, moves=moves,
                     invert_y=True)

    def unit_positions(self, graphs: Batch) -> Tensor:
        """Each unit's ``(x, y)`` on the pitch, read back from its features."""
        idx = unit_index(self.schema, graphs, check=False)
        pos = torch.empty(idx.num_units, 2)
        official = self.features == "official"
        ids = {"player": position_column(self.n_agents, self.features),
               "opponent": position_column(self.spec.n_right, self.features), "ball": 0}
        for t, k in ids.items():
            pos[idx.flat[t].cpu()] = graphs[t].x[:, k:k + 2].float().cpu()
        if official:
            pos += torch.tensor(GOAL[:2])
        return pos

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(scenario={self.spec.name}, num_envs={self.num_envs}, "
                f"num_workers={self.num_workers})")


@dataclass
class GRFConfig:
    """Google Research Football settings (``env.name: grf``)."""

    name: str = "grf"
    scenario: str = "academy_3_vs_1_with_keeper"
    """A name in acegnn.envs.grf.scenarios.SCENARIOS."""
    num_envs: int = 8
    """Games stepped together while collecting (the paper's collector_env_num)."""
    num_workers: int = 2
    """Engine processes the games are split over (the engines step in parallel); at most
    one per game is started."""
    time_limit: int = 150
    """Steps before an episode is cut (CDS and the official code: 150; the paper states none)."""
    time_limit_terminal: bool = True
    """The cut ends the episode, no bootstrap (the official code's and CDS's); false: it
    is truncated and the learner bootstraps from the last state."""
    reward: str = "paper"
    """Which ends pay end_reward: paper (only the ball or an agent back in our half; every
    other end 0) or cds (every end but a goal, the time limit included)."""
    goal_reward: float = 100.0
    """Reward of a goal (paper: +100)."""
    end_reward: float = -1.0
    """Reward of a loss (paper: -1)."""
    sticky_features: bool = False
    """Each player's features end with its 10 sticky-action flags (the official code's;
    not in the paper's feature table)."""
    features: str = "paper"
    """The units' and edges' features: paper (its feature table: unit ids, pitch positions,
    the distance on two axes) or official (the official code's columns: no unit ids,
    positions relative to the goal, 4 edge features: the distance on two axes and the
    same divided by its distance over every column; docs/grf.md, "The graph")."""
    action_mask: str = "ours"
    """The actions offered: ours (dribble to any agent not dribbling, release_direction
    while moving, sliding while our team does not own the ball) or official (the official
    code's: dribble to the ball owner only, release_direction always, sliding never). The
    paper states no mask."""
    eval_envs: int = 8
    """Games that play the test episodes, in rounds (made at the first evaluation)."""
    step_timeout: float = 30.0
    """Seconds before an engine process that has not answered a step is restarted."""
    start_timeout: float = 120.0
    """Seconds an engine process may take to create its games."""
    backend: str = "process"
    """Where the engines run: process (forkserver processes on this machine) or ray (Ray
    actors, on any node of a Ray cluster; supervised alike). Changes no result."""
    ray_address: Optional[str] = None
    """backend ray: the cluster to connect to (ray.init's address; auto: the cluster this
    machine is a node of); none starts a Ray on this machine for the run."""
    ray_cpus: float = 1.0
    """backend ray: CPUs Ray reserves for each engine actor on a cluster (none on the Ray a
    run without ray_address starts, whose engines share the cores as processes do)."""

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(f"env.scenario must be one of {sorted(SCENARIOS)} "
                             f"(got {self.scenario!r})")
        for key in ("num_envs", "num_workers", "time_limit", "eval_envs"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"env.{key} must be a positive integer (got {value!r})")
        for key, choices in (("reward", REWARDS), ("action_mask", ACTION_MASKS),
                             ("backend", BACKENDS), ("features", FEATURE_SETS)):
            check_choice(f"env.{key}", getattr(self, key), choices)
        for key in ("step_timeout", "start_timeout"):
            if not getattr(self, key) > 0:
                raise ValueError(f"env.{key} must be positive seconds (got {getattr(self, key)!r})")
        if not self.ray_cpus > 0:
            raise ValueError(f"env.ray_cpus must be positive (got {self.ray_cpus!r})")
        if not self.goal_reward > self.end_reward:
            raise ValueError(f"env.goal_reward must exceed env.end_reward (got "
                             f"{self.goal_reward} and {self.end_reward})")

    def make(self, seed: int) -> GRFTask:
        return GRFTask(self.scenario, self.num_envs, seed, self.num_workers, self.time_limit,
                       self.goal_reward, self.end_reward, self.reward, self.time_limit_terminal,
                       self.sticky_features, self.eval_envs, self.step_timeout,
                       self.start_timeout, self.backend, self.ray_address, self.ray_cpus,
                       self.action_mask, self.features)

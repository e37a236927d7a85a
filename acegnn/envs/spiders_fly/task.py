"""Spiders-and-Fly as a graph task (paper Appendix, Table "Input Feature").

Nodes: two ``spider`` units (the agents) and one ``fly``; node features are the unit
id one-hot (spider 0, spider 1, fly) and the position scaled to ``[0, 1]``. Every
ordered pair of units is an edge whose features are the distance on the two axes,
``(dst - src) / (N - 1)``. Actions stay/up/down/left/right only have an active
embedding (no target unit).

``features="onehot"`` encodes the same information a second time as one-hots: the row
and column of each unit (``N`` each) and the signed distance on each axis (``2N - 1``
each), so that walls, corners and adjacency are single input units rather than
thresholds of a scalar. The schema then depends on ``N``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.envs.base import (EvalResult, ExactEvaluation, Policy, Scene, Transition, VecTask,
                              first_episodes)
from acegnn.envs.spiders_fly.analysis import policy_capture, policy_steps
from acegnn.envs.spiders_fly.env import SpidersFlyEnv
from acegnn.envs.spiders_fly.oracle import OracleSolution, solve
from acegnn.envs.spiders_fly.rules import (ACTION_NAMES, MOVES, N_ACTIONS, N_AGENTS, action_mask_for,
                                           cell_coords, cell_index, live_states, valid_starts)
from acegnn.graph import ActionKind, DenseLayout, GraphSchema, dense_actions, unit_index

__all__ = ["SpidersFlyConfig", "SpidersFlyTask", "SpidersFlyEval", "SpidersFlyExactEval",
           "spiders_fly_schema", "spiders_fly_graphs", "live_states", "oracle_solution"]

NODE_FEATURES = 5  # id one-hot (3) + (row, col) / (N - 1)
EDGE_FEATURES = 2  # (drow, dcol) / (N - 1)
FEATURES = ("scalar", "onehot")
EDGES = {
    ("spider", "near", "spider"): torch.tensor([[0, 1], [1, 0]]),
    ("spider", "near", "fly"): torch.tensor([[0, 1], [0, 0]]),
    ("fly", "near", "spider"): torch.tensor([[0, 0], [0, 1]]),
}


def _feature_sizes(grid_size: Optional[int], features: str) -> tuple:
    if features not in FEATURES:
        raise ValueError(f"unknown Spiders-and-Fly features '{features}' (choose from {FEATURES})")
    if features == "scalar":
        return NODE_FEATURES, EDGE_FEATURES
    if grid_size is None:
        raise ValueError("features='onehot' needs the grid size")
    return NODE_FEATURES + 2 * grid_size, EDGE_FEATURES + 2 * (2 * grid_size - 1)


def spiders_fly_schema(grid_size: Optional[int] = None, features: str = "scalar") -> GraphSchema:
    """Graph schema; ``grid_size`` only matters for ``features="onehot"`` (every grid
    shares the one scalar schema)."""
    return _schema(grid_size if features != "scalar" else None, features)


@lru_cache(maxsize=None)
def _schema(grid_size: Optional[int], features: str) -> GraphSchema:
    node, edge = _feature_sizes(grid_size, features)
    return GraphSchema(
        node_types={"spider": node, "fly": node},
        edge_types={et: edge for et in EDGES},
        agent_types=("spider",),
        action_kinds=tuple(ActionKind(name) for name in ACTION_NAMES),
    )


@lru_cache(maxsize=None)
def oracle_solution(grid_size: int) -> OracleSolution:
    """The exact optimal policy of a grid, solved once per process."""
    return solve(grid_size)


def spiders_fly_graphs(positions: Tensor, grid_size: int, features: str = "scalar") -> Batch:
    """Graph batch of positions ``[B, 3, 2]`` (spider 0, spider 1, fly)."""
    B, n = positions.size(0), grid_size
    cells = positions.long()
    ids = torch.eye(3).expand(B, 3, 3)
    feats = torch.cat([ids, cells.float() / (n - 1)], dim=-1)  # [B, 3, 5]
    if features == "onehot":
        feats = torch.cat([feats, F.one_hot(cells, n).flatten(-2).float()], dim=-1)
    x = {"spider": feats[:, :2], "fly": feats[:, 2:]}
    unit = {"spider": cells[:, :2], "fly": cells[:, 2:]}
    edge_attr = {}
    for et, ei in EDGES.items():
        delta = unit[et[2]][:, ei[1]] - unit[et[0]][:, ei[0]]  # [B, E, 2] in [-(N-1), N-1]
        attr = delta.float() / (n - 1)
        if features == "onehot":
            attr = torch.cat([attr, F.one_hot(delta + n - 1, 2 * n - 1).flatten(-2).float()], -1)
        edge_attr[et] = attr
    mask = action_mask_for(positions.long(), grid_size)  # [B, 2, 5]
    return _layout(grid_size if features != "scalar" else None, features).batch(
        x, edge_attr, mask.reshape(B, -1))


@lru_cache(maxsize=None)
def _layout(grid_size: Optional[int], features: str) -> DenseLayout:
    """Units, edges and action table of every Spiders-and-Fly state."""
    schema = _schema(grid_size, features)
    actions = dense_actions(schema, "spider", torch.arange(len(ACTION_NAMES)),
                            torch.ones(2, len(ACTION_NAMES), dtype=torch.bool))
    return DenseLayout(schema, {"spider": 2, "fly": 1}, EDGES, actions)


@dataclass
class SpidersFlyEval(EvalResult):
    """Test episodes of a policy (:meth:`SpidersFlyTask.evaluate`) against the oracle."""

    success_rate: float
    """Fraction of episodes that caught the fly within ``success_steps`` steps."""
    mean_steps: float
    """Mean episode length; a truncated episode counts ``time_limit`` steps."""
    oracle_steps: float
    """The oracle's expected steps to capture from the same starts."""
    steps_gap: float
    """``mean_steps - oracle_steps``."""

    success_metric: ClassVar[str] = "success_rate"
    success_threshold: ClassVar[float] = 1.0
    headline: ClassVar[Tuple[str, ...]] = ("success_rate", "steps_gap")


@dataclass
class SpidersFlyExactEval(EvalResult):
    """Noise-free evaluation of a deterministic policy over every valid start
    (:meth:`SpidersFlyTask.exact_evaluate`)."""

    exact_success_rate: float
    """Mean probability of capture within ``success_steps``."""
    exact_worst_success: float
    """Its minimum over starts: 1.0 means every test episode succeeds, whatever the fly
    does."""
    exact_mean_steps: float
    """Expected episode length, truncated at ``time_limit`` like a test episode."""
    exact_oracle_steps: float
    """The oracle's expected episode length, truncated the same way."""
    exact_steps_gap: float
    """``exact_mean_steps - exact_oracle_steps``."""

    success_metric: ClassVar[str] = "exact_worst_success"
    success_threshold: ClassVar[float] = 1.0
    headline: ClassVar[Tuple[str, ...]] = ("exact_steps_gap",)


class SpidersFlyTask(VecTask, ExactEvaluation):
    """:class:`~acegnn.envs.spiders_fly.SpidersFlyEnv` behind the :class:`VecTask` API,
    with exact evaluation against the oracle (:class:`ExactEvaluation`).

    Args:
        grid_size (int, optional): Grid side ``N``. (default: :obj:`5`)
        num_envs (int, optional): Environments stepped together. (default: :obj:`8`)
        time_limit (int, optional): Episode step limit, ``4 * N`` if :obj:`None`.
        seed (int, optional): Seed of the environments' generator. (default: :obj:`0`)
        success_steps (int, optional): Evaluation success means a capture within this
            many steps. (default: :obj:`10`)
        features (str, optional): Input encoding, ``"scalar"`` (the paper's table) or
            ``"onehot"`` (see the module docstring). (default: :obj:`"scalar"`)
    """

    n_agents = N_AGENTS

    def __init__(self, grid_size: int = 5, num_envs: int = 8, time_limit: Optional[int] = None,
                 seed: int = 0, success_steps: int = 10, features: str = "scalar") -> None:
        self.env = SpidersFlyEnv(grid_size, num_envs, time_limit, seed)
        self.success_steps = success_steps
        self.grid_size, self.num_envs = grid_size, num_envs
        self.time_limit = self.env.time_limit
        self.features = features
        self.schema = spiders_fly_schema(grid_size, features)
        self.obs_spec = {"positions": ((3, 2), torch.int8)}

    def observe(self) -> Dict[str, Tensor]:
        return {"positions": self.env.positions}

    def step(self, actions: Tensor) -> Transition:
        r = self.env.step(actions)
        return Transition(r.reward, r.terminated, r.truncated, {"positions": r.next_positions})

    def graphs(self, obs: Dict[str, Tensor]) -> Batch:
        return self.graphs_at(obs["positions"])

    def graphs_at(self, positions: Tensor) -> Batch:
        """Graph batch of positions ``[B, 3, 2]`` in this task's encoding."""
        return spiders_fly_graphs(positions, self.grid_size, self.features)

    def evaluate(self, act: Policy, episodes: int = 32, seed: int = 0) -> SpidersFlyEval:
        """Greedy test episodes from random valid starts, against the exact oracle.

        Args:
            act (Policy): maps a graph batch to ``[num_agents]`` action ids.
            episodes (int, optional): number of test episodes (the paper uses 32).
                (default: :obj:`32`)
            seed (int, optional): seed of the starts and the fly's moves (same seed,
                same episodes). (default: :obj:`0`)

        Returns:
            SpidersFlyEval: ``success_rate`` (capture within ``success_steps``),
            ``mean_steps`` (a truncated episode counts ``time_limit``), ``oracle_steps``
            (the oracle's expected steps from the same starts) and ``steps_gap`` (their
            difference).
        """
        test = SpidersFlyTask(self.grid_size, episodes, self.time_limit, seed,
                              self.success_steps, self.features)
        ep = first_episodes(test, act, self.time_limit)
        starts, steps, caught = ep.start["positions"], ep.length, ep.terminated
        oracle = oracle_solution(self.grid_size).expected_steps_at(starts).float()
        mean_steps = float(steps.float().mean())
        return SpidersFlyEval(
            success_rate=float((caught & (steps <= self.success_steps)).float().mean()),
            mean_steps=mean_steps, oracle_steps=float(oracle.mean()),
            steps_gap=mean_steps - float(oracle.mean()))

    def policy_table(self, act: Policy, chunk: int = 8192) -> Tensor:
        """The joint action ``a0 * 5 + a1`` that ``act`` takes in every state,
        ``long [N*N, N*N, N*N]`` indexed by the flat cells of (spider 0, spider 1, fly);
        ``0`` where a spider is on the fly (terminal)."""
        n, c = self.grid_size, self.grid_size ** 2
        cells = torch.cartesian_prod(torch.arange(c), torch.arange(c), torch.arange(c))
        table = torch.zeros(c ** 3, dtype=torch.long)
        rows = live_states(n).view(-1).nonzero().view(-1)
        for part in rows.split(chunk):
            a = act(self.graphs_at(cell_coords(cells[part], n))).view(-1, 2).cpu()
            table[part] = a[:, 0] * N_ACTIONS + a[:, 1]
        return table.view(c, c, c)

    def exact_evaluate(self, act: Policy) -> SpidersFlyExactEval:
        """Noise-free evaluation of a deterministic policy over every valid start.

        The policy is tabulated on all states (:meth:`policy_table`) and evaluated
        exactly with the fly's move taken in expectation, as the oracle is. Each valid
        start weighs the same, which is the start distribution of the environment.

        Args:
            act (Policy): maps a graph batch to ``[num_agents]`` action ids.

        Returns:
            SpidersFlyExactEval: ``exact_success_rate`` (mean probability of capture
            within ``success_steps``), ``exact_worst_success`` (its minimum over
            starts: 1.0 means every test episode succeeds, whatever the fly does),
            ``exact_mean_steps`` and ``exact_oracle_steps`` (expected episode length,
            truncated at ``time_limit`` like a test episode) and ``exact_steps_gap``.
        """
        n = self.grid_size
        table = self.policy_table(act)
        start = valid_starts(n)
        s = cell_index(start, n)  # [S, 3] flat cells
        at = lambda t: t[s[:, 0], s[:, 1], s[:, 2]]  # noqa: E731
        success = at(policy_capture(n, table, self.success_steps))
        steps = float(at(policy_steps(n, table, self.time_limit)).mean())
        oracle = float(at(policy_steps(n, oracle_solution(n).policy, self.time_limit)).mean())
        return SpidersFlyExactEval(
            exact_success_rate=float(success.mean()), exact_worst_success=float(success.min()),
            exact_mean_steps=steps, exact_oracle_steps=oracle, exact_steps_gap=steps - oracle)

    def scene(self) -> Scene:
        """The grid: cell ``(row, col)`` is drawn at ``x = col``, ``y = row`` (rows grow
        downwards); the four moves are arrows of one cell."""
        n = self.grid_size
        edges = [k - 0.5 for k in range(n + 1)]
        lines = tuple(((e, -0.5), (e, n - 0.5)) for e in edges) + \
            tuple(((-0.5, e), (n - 0.5, e)) for e in edges)
        moves = tuple((name, (float(d[1]), float(d[0])))
                      for name, d in zip(ACTION_NAMES, MOVES.tolist()) if any(d))
        return Scene(xlim=(-0.5, n - 0.5), ylim=(-0.5, n - 0.5), lines=lines, moves=moves,
                     invert_y=True)

    def unit_positions(self, graphs: Batch) -> Tensor:
        """Each unit at its cell, read back from its node features (``(row, col) /
        (N - 1)`` after the id one-hot)."""
        idx = unit_index(self.schema, graphs, check=False)
        pos = torch.empty(idx.num_units, 2)
        for t in self.schema.node_types:
            rc = graphs[t].x[:, 3:5].cpu() * (self.grid_size - 1)
            pos[idx.flat[t].cpu()] = torch.stack([rc[:, 1], rc[:, 0]], dim=1).round()
        return pos

    def state_dict(self) -> dict:
        return {"cells": self.env.cells, "t": self.env.t.clone(),
                "generator": self.env.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.env.set_state(cell_coords(state["cells"], self.grid_size), state["t"])
        self.env.generator.set_state(state["generator"])

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(grid_size={self.grid_size}, num_envs={self.num_envs})"


@dataclass
class SpidersFlyConfig:
    """Spiders-and-Fly task settings."""

    name: str = "spiders_fly"
    grid_size: int = 5
    """Grid side N (the paper uses 5 and 7)."""
    num_envs: int = 8
    """Environments stepped together while collecting."""
    time_limit: Optional[int] = None
    """Episode step limit (truncation, not termination); 4 * grid_size if null."""
    success_steps: int = 10
    """An evaluation episode succeeds if the fly is caught within this many steps."""
    features: str = "scalar"
    """Input encoding: scalar (the paper's table) | onehot (adds one-hot rows, columns
    and axis distances; see acegnn.envs.spiders_fly.task)."""

    def __post_init__(self) -> None:
        if self.grid_size < 3 or self.num_envs < 1 or self.success_steps < 1:
            raise ValueError(f"env.grid_size must be >= 3, env.num_envs and env.success_steps "
                             f">= 1 (got {self.grid_size}, {self.num_envs}, {self.success_steps})")
        _feature_sizes(self.grid_size, self.features)  # raises on an unknown encoding
        if self.time_limit is not None and self.time_limit < 1:
            raise ValueError(f"env.time_limit must be >= 1 or null (got {self.time_limit})")

    def make(self, seed: int) -> "SpidersFlyTask":
        return SpidersFlyTask(self.grid_size, self.num_envs, self.time_limit, seed,
                              self.success_steps, self.features)

"""The rules of Spiders-and-Fly (ACE, Li et al., AAAI 2023).

Two spiders, controlled by the learner, chase one randomly moving fly on an
``N x N`` grid. Cells are addressed by their flat index ``row * N + col``.

* Each spider picks one of five actions (:data:`ACTION_NAMES`, displacements
  :data:`MOVES`): stay, up (row - 1), down (row + 1), left (col - 1), right
  (col + 1). A move that would leave the grid is unavailable (action mask
  ``False``); stay is always available. Spiders move simultaneously and may share a
  cell.
* The fly is caught when a spider lands on the fly's cell after the spiders' move,
  before the fly moves (:func:`captured`): reward :data:`CATCH_REWARD`
  (:func:`catch_reward`) and the episode ends.
* Otherwise the fly moves uniformly at random to one of its in-grid 4-neighbours at
  Manhattan distance greater than :data:`FLEE_DISTANCE` from both spiders, measured
  against the spiders' *new* cells (:meth:`GridRules.fly_directions`); if there is no
  such cell it stays (:func:`fly_moves`, :func:`fly_move_probs`).
* Episodes start uniformly at random among the positions where the two spiders are on
  distinct cells, both at Manhattan distance greater than ``start_distance`` from the
  fly (:func:`valid_starts`), and are truncated after :func:`default_time_limit` steps.

The sampling environment, the exact oracle and the analysis all read the per-grid
tables of :class:`GridRules` (:func:`grid_rules`).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Tuple

import torch
from torch import Tensor

__all__ = [
    "ACTION_NAMES",
    "MOVES",
    "N_AGENTS",
    "N_ACTIONS",
    "CATCH_REWARD",
    "FLEE_DISTANCE",
    "DEFAULT_START_DISTANCE",
    "FLY_ACTIONS",
    "FLY_STAY",
    "GridRules",
    "grid_rules",
    "action_mask_for",
    "cell_index",
    "cell_coords",
    "captured",
    "live_states",
    "catch_reward",
    "fly_moves",
    "fly_move_probs",
    "valid_starts",
    "default_time_limit",
    "check_grid_size",
]

ACTION_NAMES: Tuple[str, ...] = ("stay", "up", "down", "left", "right")
"""Names of the five per-spider actions, indexed by action id."""

MOVES: Tensor = torch.tensor([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]], dtype=torch.long)
"""``LongTensor [5, 2]`` of ``(drow, dcol)`` displacements, one row per action."""

N_AGENTS: int = 2
"""Number of spiders (the agents)."""

N_ACTIONS: int = len(ACTION_NAMES)
"""Number of actions per spider."""

CATCH_REWARD: float = 10.0
"""Reward given on the step in which the fly is caught."""

FLEE_DISTANCE: int = 1
"""The fly only moves to cells at Manhattan distance strictly greater than this from
both spiders (so never onto or next to a spider)."""

DEFAULT_START_DISTANCE: int = 4
"""Spiders start at Manhattan distance strictly greater than this from the fly."""

FLY_ACTIONS: Tuple[int, ...] = (1, 2, 3, 4, 0)
"""The fly's moves as rows of the move table: its four directions (up, down, left,
right), then staying. The fly's move ``d`` is the spider action ``FLY_ACTIONS[d]``."""

FLY_STAY: int = 4
"""Index of "stay" among the fly's moves."""


def check_grid_size(grid_size: int) -> None:
    """Raise :class:`ValueError` unless ``grid_size`` is an integer ``>= 3``."""
    if isinstance(grid_size, bool) or not isinstance(grid_size, int) or grid_size < 3:
        raise ValueError(f"grid_size must be an integer >= 3 (got {grid_size!r})")


def default_time_limit(grid_size: int) -> int:
    """Episode step limit when none is given: ``4 * grid_size``."""
    return 4 * grid_size


def cell_index(positions: Tensor, grid_size: int) -> Tensor:
    """Flat cell index ``row * grid_size + col`` of ``(row, col)`` coordinates.

    Args:
        positions (Tensor): integer tensor ``[..., 2]``.
        grid_size (int): side length ``N`` of the grid.

    Returns:
        Tensor: ``LongTensor [...]``.
    """
    positions = positions.to(torch.long)
    return positions[..., 0] * grid_size + positions[..., 1]


def cell_coords(index: Tensor, grid_size: int) -> Tensor:
    """Inverse of :func:`cell_index`.

    Args:
        index (Tensor): integer tensor ``[...]`` of flat cell indices.
        grid_size (int): side length ``N`` of the grid.

    Returns:
        Tensor: ``LongTensor [..., 2]`` of ``(row, col)``.
    """
    index = index.to(torch.long)
    return torch.stack([index // grid_size, index % grid_size], dim=-1)


def _move_targets(coords: Tensor, grid_size: int) -> Tuple[Tensor, Tensor]:
    """Where each action leads from ``(row, col)`` ``coords [..., 2]``: the target
    coordinates ``[..., 5, 2]`` and whether they are on the grid ``[..., 5]``."""
    target = coords.unsqueeze(-2) + MOVES.to(coords.device)  # [..., 5, 2]
    return target, ((target >= 0) & (target < grid_size)).all(dim=-1)


def action_mask_for(positions: Tensor, grid_size: int) -> Tensor:
    """Action mask for a batch of positions.

    Args:
        positions (Tensor): ``LongTensor [B, 3, 2]`` of positions.
        grid_size (int): side length ``N`` of the grid.

    Returns:
        Tensor: ``BoolTensor [B, 2, 5]``; ``mask[b, i, a]`` is ``True`` when spider
        ``i`` may take action ``a`` (the move stays on the grid).
    """
    return _move_targets(positions[:, :2, :], grid_size)[1]


def captured(spiders: Tensor, fly: Tensor) -> Tensor:
    """Whether a spider is on the fly's cell (the capture rule, checked after the
    spiders' move and before the fly's).

    Args:
        spiders (Tensor): ``LongTensor [..., 2]`` cells of the two spiders.
        fly (Tensor): ``LongTensor [...]`` cell of the fly (broadcast against
            ``spiders[..., 0]``).

    Returns:
        Tensor: ``BoolTensor [...]``.
    """
    return (spiders == fly.unsqueeze(-1)).any(dim=-1)


def catch_reward(caught: Tensor) -> Tensor:
    """``FloatTensor``: :data:`CATCH_REWARD` where the fly was ``caught``, else ``0``."""
    return caught.to(torch.float32) * CATCH_REWARD


def fly_moves(directions: Tensor) -> Tensor:
    """The fly's possible moves given its valid directions: those, or staying when
    there is none.

    Args:
        directions (Tensor): ``BoolTensor [..., 4]`` valid directions (up, down, left,
            right), from :meth:`GridRules.fly_directions`.

    Returns:
        Tensor: ``BoolTensor [..., 5]`` over the fly's moves (:data:`FLY_ACTIONS`,
        stay last).
    """
    return torch.cat([directions, ~directions.any(dim=-1, keepdim=True)], dim=-1)


def fly_move_probs(directions: Tensor) -> Tensor:
    """Probabilities of the fly's moves: uniform over :func:`fly_moves`.

    Args:
        directions (Tensor): ``BoolTensor [..., 4]`` valid directions.

    Returns:
        Tensor: ``float64 [..., 5]`` over the fly's moves (stay last).
    """
    moves = fly_moves(directions).to(torch.float64)
    return moves / moves.sum(dim=-1, keepdim=True)


class GridRules:
    """The rules of an ``N x N`` grid as lookup tables over flat cells.

    With ``C = N * N`` cells:

    Attributes:
        grid_size (int): side length ``N``.
        num_cells (int): ``C``.
        coords (Tensor): ``LongTensor [C, 2]``, cell -> ``(row, col)``.
        distance (Tensor): ``LongTensor [C, C]``, Manhattan distance between cells.
        action_mask (Tensor): ``BoolTensor [C, 5]``, actions available to a spider on
            the cell.
        move (Tensor): ``LongTensor [C, 5]``, cell after ``(cell, action)``; ``-1``
            where the move leaves the grid.
        fly_dest (Tensor): ``LongTensor [C, 5]``, fly cell after each of its moves
            (:data:`FLY_ACTIONS`; ``-1`` off the grid, the cell itself for stay).
        fly_free (Tensor): ``BoolTensor [C, C, 4]``, ``fly_free[s, f, d]``: direction
            ``d`` of a fly on ``f`` is on the grid and leads farther than
            :data:`FLEE_DISTANCE` from a spider on ``s``.

    Args:
        grid_size (int): side length ``N`` of the grid (``N >= 3``).
    """

    def __init__(self, grid_size: int) -> None:
        check_grid_size(grid_size)
        n = grid_size
        c = n * n
        self.grid_size, self.num_cells = n, c
        self.coords = cell_coords(torch.arange(c), n)  # [C, 2]
        self.distance = (self.coords[:, None, :] - self.coords[None, :, :]).abs().sum(-1)  # [C, C]
        target, self.action_mask = _move_targets(self.coords, n)  # [C, 5, 2], [C, 5]
        self.move = torch.where(self.action_mask, cell_index(target, n), -1)  # [C, 5]
        self.fly_dest = self.move[:, list(FLY_ACTIONS)]  # [C(fly), 5]
        dest = self.fly_dest[:, :FLY_STAY]  # [C(fly), 4]
        far = self.distance[:, dest.clamp(min=0)] > FLEE_DISTANCE  # [C(spider), C(fly), 4]
        self.fly_free = (dest >= 0).unsqueeze(0) & far

    def states(self) -> Tuple[Tensor, Tensor, Tensor]:
        """Cells ``s0 [C, 1, 1]``, ``s1 [1, C, 1]``, ``f [1, 1, C]`` that broadcast to
        every state ``[s0, s1, f]``."""
        cells = torch.arange(self.num_cells)
        return cells[:, None, None], cells[None, :, None], cells[None, None, :]

    def captured_states(self) -> Tensor:
        """``BoolTensor [C, C, C]``: :func:`captured` in every state ``[s0, s1, f]``."""
        s0, s1, f = self.states()
        return captured(torch.stack(torch.broadcast_tensors(s0, s1), dim=-1), f)

    def fly_directions(self, s0: Tensor, s1: Tensor, fly: Tensor) -> Tensor:
        """The fly's valid directions given the spiders' cells (after their move).

        Args:
            s0 (Tensor): ``LongTensor [...]`` cell of spider 0.
            s1 (Tensor): ``LongTensor [...]`` cell of spider 1.
            fly (Tensor): ``LongTensor [...]`` cell of the fly (the three broadcast).

        Returns:
            Tensor: ``BoolTensor [..., 4]`` over (up, down, left, right).
        """
        return self.fly_free[s0, fly] & self.fly_free[s1, fly]

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(grid_size={self.grid_size})"


@lru_cache(maxsize=32)
def grid_rules(grid_size: int) -> GridRules:
    """The :class:`GridRules` of a grid, built once per process (do not modify)."""
    return GridRules(grid_size)


def live_states(grid_size: int) -> Tensor:
    """``bool [N*N, N*N, N*N]``: no spider on the fly, indexed by the flat cells of
    (spider 0, spider 1, fly)."""
    return ~grid_rules(grid_size).captured_states()


@lru_cache(maxsize=32)
def _valid_starts_cached(grid_size: int, start_distance: int) -> Tensor:
    rules = grid_rules(grid_size)
    c, dist = rules.num_cells, rules.distance
    s0, s1, f = torch.meshgrid(torch.arange(c), torch.arange(c), torch.arange(c), indexing="ij")
    ok = (s0 != s1) & (dist[s0, f] > start_distance) & (dist[s1, f] > start_distance)
    idx = ok.nonzero()  # [S, 3], lexicographic in (s0, s1, f)
    return rules.coords[idx]  # [S, 3, 2]


def valid_starts(grid_size: int, start_distance: int = DEFAULT_START_DISTANCE) -> Tensor:
    """All valid episode start positions.

    A start is valid when the two spiders are on distinct cells and both are at
    Manhattan distance strictly greater than ``start_distance`` from the fly.

    Args:
        grid_size (int): side length ``N`` of the grid (``N >= 3``).
        start_distance (int, optional): minimum exclusive spider-fly Manhattan
            distance. (default: ``4``)

    Returns:
        Tensor: ``LongTensor [num_starts, 3, 2]`` sorted lexicographically by the
        flat cell indices ``r * N + c`` of (spider0, spider1, fly). May be empty
        (e.g. on a 3x3 grid with the default ``start_distance``).
    """
    check_grid_size(grid_size)
    if isinstance(start_distance, bool) or not isinstance(start_distance, int) or start_distance < 0:
        raise ValueError(f"start_distance must be a non-negative integer (got {start_distance!r})")
    return _valid_starts_cached(grid_size, start_distance).clone()

"""Vectorised Spiders-and-Fly environment (ACE, Li et al., AAAI 2023).

Two spiders, controlled by the learner, chase one randomly moving fly on an
``N x N`` grid. All ``num_envs`` environments are stepped at once with tensor
operations (no Python loop over environments).

Rules:

* Each spider picks one of five actions (:data:`ACTION_NAMES`): stay, up
  (row - 1), down (row + 1), left (col - 1), right (col + 1). Moves that would
  leave the grid are unavailable (action mask ``False``); stay is always
  available. Spiders move simultaneously and may share a cell.
* The fly is caught when a spider lands on the fly's cell after the spiders'
  move (before the fly moves): reward ``10`` and the episode terminates.
* Otherwise the reward is ``0`` and the fly moves uniformly at random to one of
  its in-grid 4-neighbours that is neither a spider's cell nor adjacent to a
  spider (Manhattan distance ``<= 1`` to either spider, measured against the
  spiders' *new* positions). If there is no such cell the fly stays still.
* Episodes start uniformly at random among all positions where the two spiders
  are on distinct cells and both are at Manhattan distance ``> 4`` from the fly
  (see :func:`valid_starts`).
* Episodes are truncated (``truncated=True``, ``terminated=False``) after
  ``time_limit`` steps, ``4 * grid_size`` by default.

Positions are ``LongTensor`` of shape ``[..., 3, 2]``: rows are spider 0,
spider 1 and the fly, columns are ``(row, col)``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple, Optional

import torch
from torch import Tensor

__all__ = [
    "ACTION_NAMES",
    "MOVES",
    "CATCH_REWARD",
    "DEFAULT_START_DISTANCE",
    "StepResult",
    "SpidersFlyEnv",
    "valid_starts",
    "action_mask_for",
    "cell_index",
    "cell_coords",
]

ACTION_NAMES: tuple[str, ...] = ("stay", "up", "down", "left", "right")
"""Names of the five per-spider actions, indexed by action id."""

MOVES: Tensor = torch.tensor([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]], dtype=torch.long)
"""``LongTensor [5, 2]`` of ``(drow, dcol)`` displacements, one row per action."""

CATCH_REWARD: float = 10.0
"""Reward given on the step in which the fly is caught."""

DEFAULT_START_DISTANCE: int = 4
"""Spiders start at Manhattan distance strictly greater than this from the fly."""

_N_AGENTS = 2
_N_ACTIONS = 5


class StepResult(NamedTuple):
    """Result of :meth:`SpidersFlyEnv.step`.

    Attributes:
        reward: ``FloatTensor [num_envs]``, ``10`` where the fly was caught, else ``0``.
        terminated: ``BoolTensor [num_envs]``, the fly was caught.
        truncated: ``BoolTensor [num_envs]``, the time limit was reached without a capture.
        next_positions: ``LongTensor [num_envs, 3, 2]``, the true post-step positions
            *before* auto-reset (for a caught fly: positions after the spiders' move).
        next_action_mask: ``BoolTensor [num_envs, 2, 5]``, action mask for ``next_positions``.
    """

    reward: Tensor
    terminated: Tensor
    truncated: Tensor
    next_positions: Tensor
    next_action_mask: Tensor


def _check_grid_size(grid_size: int) -> None:
    if isinstance(grid_size, bool) or not isinstance(grid_size, int) or grid_size < 3:
        raise ValueError(f"grid_size must be an integer >= 3 (got {grid_size!r})")


def action_mask_for(positions: Tensor, grid_size: int) -> Tensor:
    """Action mask for a batch of positions.

    Args:
        positions (Tensor): ``LongTensor [B, 3, 2]`` of positions.
        grid_size (int): side length ``N`` of the grid.

    Returns:
        Tensor: ``BoolTensor [B, 2, 5]``; ``mask[b, i, a]`` is ``True`` when spider
        ``i`` may take action ``a`` (the move stays on the grid).
    """
    spiders = positions[:, :2, :]  # [B, 2, 2]
    target = spiders.unsqueeze(2) + MOVES.to(positions.device)  # [B, 2, 5, 2]
    return ((target >= 0) & (target < grid_size)).all(dim=-1)


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


class _Tables:
    """Lookup tables over flat cells that make :meth:`SpidersFlyEnv.step` cheap.

    With ``C = N * N`` cells and the fly's directions ordered (up, down, left,
    right) = bits 0..3:

    * ``coords [C, 2]``: cell -> ``(row, col)``.
    * ``mask [C, 5]``: action mask of a spider standing on the cell.
    * ``move [C * 5]``: cell after ``(cell, action)``; ``-1`` if it leaves the grid.
    * ``fly_ok [C * C]``: bitmask (over the fly's 4 directions) of neighbours of the
      fly cell ``f`` that are on the grid and at Manhattan distance ``> 1`` from a
      spider on cell ``s``, indexed ``s * C + f``. The fly's valid set for two
      spiders is the bitwise AND of the two entries.
    * ``choice [16 * 12]``: for a 4-bit valid pattern and ``j`` in ``[0, 12)``, the
      ``(j mod k)``-th valid direction (``k`` = number of valid directions), or
      ``4`` (stay) when ``k == 0``. Since 12 is divisible by 1, 2, 3 and 4, a
      uniform ``j`` gives a uniform choice among the valid directions.
    * ``fly_dest [C * 5]``: fly cell after direction ``d`` (``d == 4``: stay).
    """

    def __init__(self, grid_size: int) -> None:
        n = grid_size
        c = n * n
        self.coords = cell_coords(torch.arange(c), n)  # [C, 2]
        target = self.coords.unsqueeze(1) + MOVES  # [C, 5, 2]
        self.mask = ((target >= 0) & (target < n)).all(-1)  # [C, 5]
        self.move = torch.where(self.mask, cell_index(target, n), -1).reshape(-1)
        fly_mask = self.mask[:, 1:]  # [C(fly), 4]
        fly_target = target[:, 1:]  # [C(fly), 4, 2]
        dist = (fly_target.unsqueeze(0) - self.coords[:, None, None, :]).abs().sum(-1)  # [C(s), C(f), 4]
        ok = fly_mask.unsqueeze(0) & (dist > 1)
        bits = torch.tensor([1, 2, 4, 8], dtype=torch.long)
        self.fly_ok = (ok.long() * bits).sum(-1).reshape(-1)  # [C * C]
        choice = torch.full((16, 12), 4, dtype=torch.long)
        for pattern in range(16):
            dirs = [d for d in range(4) if pattern >> d & 1]
            if dirs:
                choice[pattern] = torch.tensor([dirs[j % len(dirs)] for j in range(12)])
        self.choice = choice.reshape(-1)
        dest = torch.where(fly_mask, cell_index(fly_target, n), -1)
        self.fly_dest = torch.cat([dest, torch.arange(c).unsqueeze(1)], dim=1).reshape(-1)  # [C * 5]


@lru_cache(maxsize=32)
def _tables(grid_size: int) -> _Tables:
    return _Tables(grid_size)


@lru_cache(maxsize=32)
def _valid_starts_cached(grid_size: int, start_distance: int) -> Tensor:
    n = grid_size
    rows, cols = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    cells = torch.stack([rows.reshape(-1), cols.reshape(-1)], dim=-1)  # [C, 2]
    c = cells.shape[0]
    dist = (cells[:, None, :] - cells[None, :, :]).abs().sum(-1)  # [C, C]
    s0, s1, f = torch.meshgrid(torch.arange(c), torch.arange(c), torch.arange(c), indexing="ij")
    ok = (s0 != s1) & (dist[s0, f] > start_distance) & (dist[s1, f] > start_distance)
    idx = ok.nonzero()  # [S, 3], lexicographic in (s0, s1, f)
    return cells[idx]  # [S, 3, 2]


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
    _check_grid_size(grid_size)
    if isinstance(start_distance, bool) or not isinstance(start_distance, int) or start_distance < 0:
        raise ValueError(f"start_distance must be a non-negative integer (got {start_distance!r})")
    return _valid_starts_cached(grid_size, start_distance).clone()


class SpidersFlyEnv:
    """Batch of ``num_envs`` Spiders-and-Fly environments stepped in lock-step.

    Finished environments (terminated or truncated) are automatically reset to
    new random starts at the end of :meth:`step`; the pre-reset state is
    returned in :attr:`StepResult.next_positions`. Internally the state is kept
    as flat cell indices and stepped through precomputed lookup tables.

    Args:
        grid_size (int, optional): side length ``N`` of the grid, ``N >= 3``.
            (default: ``5``)
        num_envs (int, optional): number of parallel environments. (default: ``8``)
        time_limit (int, optional): maximum episode length in steps; when reached
            without a capture the episode is truncated. ``None`` means
            ``4 * grid_size``. (default: ``None``)
        seed (int, optional): seed of the environment's private
            :class:`torch.Generator`, the only source of randomness. (default: ``0``)
        start_distance (int, optional): spiders start at Manhattan distance
            strictly greater than this from the fly. Only change it for grids too
            small to have valid starts under the default rule (e.g. 3x3).
            (default: ``4``)

    Attributes:
        positions (Tensor): ``LongTensor [num_envs, 3, 2]``, current positions
            (spider0, spider1, fly) as ``(row, col)`` (read-only view; use
            :meth:`set_state` to change it).
        t (Tensor): ``LongTensor [num_envs]``, steps taken in the current episode.
        starts (Tensor): ``LongTensor [num_starts, 3, 2]``, all valid starts.
        n_agents (int): number of spiders, ``2``.
        n_actions (int): number of actions per spider, ``5``.
    """

    n_agents: int = _N_AGENTS
    n_actions: int = _N_ACTIONS

    def __init__(
        self,
        grid_size: int = 5,
        num_envs: int = 8,
        time_limit: Optional[int] = None,
        seed: int = 0,
        start_distance: int = DEFAULT_START_DISTANCE,
    ) -> None:
        _check_grid_size(grid_size)
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer (got {num_envs!r})")
        if time_limit is None:
            time_limit = 4 * grid_size
        if isinstance(time_limit, bool) or not isinstance(time_limit, int) or time_limit < 1:
            raise ValueError(f"time_limit must be a positive integer or None (got {time_limit!r})")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer (got {seed!r})")

        self.grid_size = grid_size
        self.num_envs = num_envs
        self.time_limit = time_limit
        self.seed = seed
        self.start_distance = start_distance
        self.starts = valid_starts(grid_size, start_distance)
        if self.starts.shape[0] == 0:
            raise ValueError(
                f"no valid starts on a {grid_size}x{grid_size} grid with start_distance "
                f"{start_distance}; use a smaller start_distance (got {start_distance})"
            )
        self._start_cells = cell_index(self.starts, grid_size)  # [S, 3]
        self._tab = _tables(grid_size)
        self._n_cells = grid_size * grid_size
        self.generator = torch.Generator().manual_seed(seed)
        self._cells = torch.zeros(num_envs, 3, dtype=torch.long)
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.reset()

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}(grid_size={self.grid_size}, num_envs={self.num_envs}, "
            f"time_limit={self.time_limit}, seed={self.seed})"
        )

    @property
    def positions(self) -> Tensor:
        """``LongTensor [num_envs, 3, 2]``: current (spider0, spider1, fly) positions."""
        return self._tab.coords[self._cells]

    @property
    def cells(self) -> Tensor:
        """``LongTensor [num_envs, 3]``: current flat cell indices ``row * N + col``."""
        return self._cells.clone()

    def _sample_start_index(self, num: int, generator: Optional[torch.Generator]) -> Tensor:
        if isinstance(num, bool) or not isinstance(num, int) or num < 0:
            raise ValueError(f"num must be a non-negative integer (got {num!r})")
        gen = self.generator if generator is None else generator
        return torch.randint(self.starts.shape[0], (num,), generator=gen)

    def sample_starts(self, num: int, generator: Optional[torch.Generator] = None) -> Tensor:
        """Sample start positions uniformly from :attr:`starts`.

        Args:
            num (int): number of starts to sample.
            generator (torch.Generator, optional): source of randomness; ``None``
                uses the environment's own generator. (default: ``None``)

        Returns:
            Tensor: ``LongTensor [num, 3, 2]``.
        """
        return self.starts[self._sample_start_index(num, generator)]

    def reset(self) -> None:
        """Reset every environment to a fresh uniformly random start and ``t = 0``."""
        self._cells = self._start_cells[self._sample_start_index(self.num_envs, None)]
        self.t = torch.zeros(self.num_envs, dtype=torch.long)

    def set_state(self, positions: Tensor, t: Optional[Tensor] = None) -> None:
        """Place every environment in the given (e.g. hand-made) positions.

        Positions need not satisfy the start rule, but must lie on the grid and
        must not have a spider on the fly's cell (that state is already terminal).

        Args:
            positions (Tensor): integer tensor ``[num_envs, 3, 2]``.
            t (Tensor, optional): integer tensor ``[num_envs]`` of elapsed steps,
                each in ``[0, time_limit)``. ``None`` sets all to ``0``. (default: ``None``)
        """
        positions = torch.as_tensor(positions)
        if positions.shape != (self.num_envs, 3, 2):
            raise ValueError(
                f"positions must have shape ({self.num_envs}, 3, 2) (got {tuple(positions.shape)})"
            )
        if positions.dtype.is_floating_point or positions.dtype == torch.bool or positions.is_complex():
            raise ValueError(f"positions must be an integer tensor (got {positions.dtype})")
        positions = positions.to(torch.long).cpu()
        off = ((positions < 0) | (positions >= self.grid_size)).any(dim=-1)  # [E, 3]
        if off.any():
            e, k = off.nonzero()[0].tolist()
            raise ValueError(
                f"positions must lie on the {self.grid_size}x{self.grid_size} grid "
                f"(got {positions[e, k].tolist()} for env {e}, entity {k})"
            )
        on_fly = (positions[:, :2] == positions[:, 2:3]).all(dim=-1).any(dim=-1)
        if on_fly.any():
            e = int(on_fly.nonzero()[0])
            raise ValueError(f"a spider is already on the fly in env {e} (got {positions[e].tolist()})")
        if t is None:
            t_new = torch.zeros(self.num_envs, dtype=torch.long)
        else:
            t_new = torch.as_tensor(t)
            if t_new.shape != (self.num_envs,) or t_new.dtype.is_floating_point or t_new.dtype == torch.bool:
                raise ValueError(
                    f"t must be an integer tensor of shape ({self.num_envs},) "
                    f"(got {t_new.dtype} {tuple(t_new.shape)})"
                )
            t_new = t_new.to(torch.long).cpu()
            if ((t_new < 0) | (t_new >= self.time_limit)).any():
                raise ValueError(f"t must lie in [0, {self.time_limit}) (got {t_new.tolist()})")
        self._cells = cell_index(positions, self.grid_size)
        self.t = t_new.clone()

    def action_mask(self) -> Tensor:
        """Available actions in the current positions.

        Returns:
            Tensor: ``BoolTensor [num_envs, 2, 5]``.
        """
        return self._tab.mask[self._cells[:, :2]]

    def _raise_bad_action(self, actions: Tensor) -> None:
        """Find the first invalid action and raise a descriptive ``ValueError``."""
        out_of_range = (actions < 0) | (actions >= _N_ACTIONS)
        if out_of_range.any():
            e, i = out_of_range.nonzero()[0].tolist()
            raise ValueError(
                f"action out of range [0, {_N_ACTIONS}) for env {e}, agent {i} (got {int(actions[e, i])})"
            )
        allowed = self.action_mask().gather(2, actions.unsqueeze(-1)).squeeze(-1)  # [E, 2]
        e, i = (~allowed).nonzero()[0].tolist()
        a = int(actions[e, i])
        pos = self.positions[e, i].tolist()
        raise ValueError(
            f"masked action for env {e}, agent {i} at {pos}: '{ACTION_NAMES[a]}' leaves the grid (got {a})"
        )

    def step(self, actions: Tensor) -> StepResult:
        """Advance every environment by one step.

        Args:
            actions (Tensor): ``LongTensor [num_envs, 2]`` of per-spider actions in
                ``[0, 5)``; each must be allowed by :meth:`action_mask`.

        Returns:
            StepResult: rewards, termination/truncation flags and the true next
            positions (before auto-reset) with their action mask.
        """
        actions = torch.as_tensor(actions)
        if actions.shape != (self.num_envs, _N_AGENTS):
            raise ValueError(
                f"actions must have shape ({self.num_envs}, {_N_AGENTS}) (got {tuple(actions.shape)})"
            )
        if actions.dtype.is_floating_point or actions.dtype == torch.bool or actions.is_complex():
            raise ValueError(f"actions must be an integer tensor (got {actions.dtype})")
        actions = actions.to(torch.long)
        tab = self._tab
        c = self._n_cells
        cells = self._cells

        # Spiders move (index clamped so that out-of-range actions cannot wrap).
        flat = cells[:, :2] * _N_ACTIONS + actions.clamp(0, _N_ACTIONS - 1)
        spiders = tab.move[flat]  # [E, 2], -1 where the move leaves the grid
        bad = (spiders < 0) | (actions < 0) | (actions >= _N_ACTIONS)
        if bool(bad.any()):
            self._raise_bad_action(actions)
        fly = cells[:, 2]
        caught = (spiders == fly.unsqueeze(1)).any(dim=1)  # [E]

        # Fly: uniform among the valid neighbours (stay if none; no move if caught).
        pattern = tab.fly_ok[spiders[:, 0] * c + fly] & tab.fly_ok[spiders[:, 1] * c + fly]
        j = torch.randint(12, (self.num_envs,), generator=self.generator)
        direction = tab.choice[pattern * 12 + j]
        direction = direction.masked_fill(caught, 4)
        new_fly = tab.fly_dest[fly * 5 + direction]

        next_cells = torch.cat([spiders, new_fly.unsqueeze(1)], dim=1)  # [E, 3]
        t = self.t + 1
        terminated = caught
        truncated = (t >= self.time_limit) & ~terminated
        reward = terminated.to(torch.float32) * CATCH_REWARD
        next_positions = tab.coords[next_cells]
        next_mask = tab.mask[spiders]

        # Auto-reset finished environments.
        done = terminated | truncated
        if bool(done.any()):
            idx = done.nonzero().squeeze(1)
            start = self._start_cells[self._sample_start_index(int(idx.shape[0]), None)]
            next_cells = next_cells.index_put((idx,), start)
            t = t.masked_fill(done, 0)
        self._cells = next_cells
        self.t = t
        return StepResult(reward, terminated, truncated, next_positions, next_mask)

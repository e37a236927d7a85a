"""Vectorised Spiders-and-Fly environment (ACE, Li et al., AAAI 2023).

Two spiders, controlled by the learner, chase one randomly moving fly on an
``N x N`` grid, under the rules of :mod:`acegnn.envs.spiders_fly.rules`. All
``num_envs`` environments are stepped at once with tensor operations (no Python loop
over environments); the fly's move is sampled from the rules' distribution.

Episodes are truncated (``truncated=True``, ``terminated=False``) after
``time_limit`` steps, ``4 * grid_size`` by default.

Positions are ``LongTensor`` of shape ``[..., 3, 2]``: rows are spider 0,
spider 1 and the fly, columns are ``(row, col)``.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor

from acegnn.envs.spiders_fly import rules
from acegnn.envs.spiders_fly.rules import (ACTION_NAMES, DEFAULT_START_DISTANCE, FLY_STAY,
                                           N_ACTIONS, N_AGENTS, cell_index, valid_starts)

__all__ = ["StepResult", "SpidersFlyEnv"]

_SLOTS = 12
"""Uniform draws per fly move: divisible by 1, 2, 3 and 4 valid moves."""

_BITS = torch.tensor([1, 2, 4, 8], dtype=torch.long)
"""Bit of each of the fly's four directions in a direction pattern."""


def _choice_table() -> Tensor:
    """``LongTensor [16 * 12]``: the fly's move for a 4-bit pattern of valid directions
    and a uniform draw ``j`` in ``[0, 12)``, the ``(j mod k)``-th of the ``k``
    possible moves of :func:`~acegnn.envs.spiders_fly.rules.fly_moves` (stay when
    no direction is valid). A uniform ``j`` realises
    :func:`~acegnn.envs.spiders_fly.rules.fly_move_probs` exactly."""
    directions = (torch.arange(16).unsqueeze(1) & _BITS) > 0  # [16, 4]
    moves = rules.fly_moves(directions)  # [16, 5]
    choice = torch.empty(16, _SLOTS, dtype=torch.long)
    for pattern in range(16):
        options = moves[pattern].nonzero().view(-1)
        choice[pattern] = options[torch.arange(_SLOTS) % options.numel()]
    return choice.reshape(-1)


_CHOICE = _choice_table()


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


class SpidersFlyEnv:
    """Batch of ``num_envs`` Spiders-and-Fly environments stepped in lock-step.

    Finished environments (terminated or truncated) are reset to new random starts at
    the end of :meth:`step`; the pre-reset state is :attr:`StepResult.next_positions`.

    Args:
        grid_size (int, optional): side length ``N`` of the grid, ``N >= 3``.
            (default: ``5``)
        num_envs (int, optional): number of parallel environments. (default: ``8``)
        time_limit (int, optional): steps before an episode without a capture is
            truncated; ``None`` means ``4 * grid_size``. (default: ``None``)
        seed (int, optional): seed of the private :class:`torch.Generator`, the only
            source of randomness. (default: ``0``)
        start_distance (int, optional): spiders start at Manhattan distance strictly
            greater than this from the fly; lower it for grids too small for any
            start (e.g. 3x3). (default: ``4``)

    Raises:
        ValueError: an argument is out of range, or no start is valid.

    Attributes:
        positions (Tensor): ``LongTensor [num_envs, 3, 2]``, current positions
            (spider0, spider1, fly) as ``(row, col)`` (read-only view; use
            :meth:`set_state` to change it).
        t (Tensor): ``LongTensor [num_envs]``, steps taken in the current episode.
        starts (Tensor): ``LongTensor [num_starts, 3, 2]``, all valid starts.
        n_agents, n_actions (int): ``2`` spiders, ``5`` actions each.
    """

    n_agents: int = N_AGENTS
    n_actions: int = N_ACTIONS

    def __init__(
        self,
        grid_size: int = 5,
        num_envs: int = 8,
        time_limit: Optional[int] = None,
        seed: int = 0,
        start_distance: int = DEFAULT_START_DISTANCE,
    ) -> None:
        rules.check_grid_size(grid_size)
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer (got {num_envs!r})")
        if time_limit is None:
            time_limit = rules.default_time_limit(grid_size)
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
        self._tab = rules.grid_rules(grid_size)
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
        cells = cell_index(positions, self.grid_size)  # [E, 3]
        on_fly = rules.captured(cells[:, :2], cells[:, 2])
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
        self._cells = cells
        self.t = t_new.clone()

    def action_mask(self) -> Tensor:
        """Available actions in the current positions.

        Returns:
            Tensor: ``BoolTensor [num_envs, 2, 5]``.
        """
        return self._tab.action_mask[self._cells[:, :2]]

    def _raise_bad_action(self, actions: Tensor) -> None:
        """Find the first invalid action and raise a descriptive ``ValueError``."""
        out_of_range = (actions < 0) | (actions >= N_ACTIONS)
        if out_of_range.any():
            e, i = out_of_range.nonzero()[0].tolist()
            raise ValueError(
                f"action out of range [0, {N_ACTIONS}) for env {e}, agent {i} (got {int(actions[e, i])})"
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
        if actions.shape != (self.num_envs, N_AGENTS):
            raise ValueError(
                f"actions must have shape ({self.num_envs}, {N_AGENTS}) (got {tuple(actions.shape)})"
            )
        if actions.dtype.is_floating_point or actions.dtype == torch.bool or actions.is_complex():
            raise ValueError(f"actions must be an integer tensor (got {actions.dtype})")
        actions = actions.to(torch.long)
        tab = self._tab
        cells = self._cells

        # Spiders move (index clamped so that out-of-range actions cannot wrap).
        flat = cells[:, :2] * N_ACTIONS + actions.clamp(0, N_ACTIONS - 1)  # [E, 2]
        spiders = tab.move.view(-1)[flat]  # [E, 2], -1 where the move leaves the grid
        bad = (spiders < 0) | (actions < 0) | (actions >= N_ACTIONS)
        if bool(bad.any()):
            self._raise_bad_action(actions)
        fly = cells[:, 2]
        caught = rules.captured(spiders, fly)  # [E]

        # Fly: uniform among its possible moves (no move if caught).
        directions = tab.fly_directions(spiders[:, 0], spiders[:, 1], fly)  # [E, 4]
        pattern = (directions.long() * _BITS).sum(dim=-1)  # [E] in [0, 16)
        j = torch.randint(_SLOTS, (self.num_envs,), generator=self.generator)
        move = _CHOICE[pattern * _SLOTS + j]
        move = move.masked_fill(caught, FLY_STAY)
        new_fly = tab.fly_dest.view(-1)[fly * len(rules.FLY_ACTIONS) + move]

        next_cells = torch.cat([spiders, new_fly.unsqueeze(1)], dim=1)  # [E, 3]
        t = self.t + 1
        terminated = caught
        truncated = (t >= self.time_limit) & ~terminated
        reward = rules.catch_reward(terminated)
        next_positions = tab.coords[next_cells]
        next_mask = tab.action_mask[spiders]

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

"""The rules of :mod:`acegnn.envs.spiders_fly.rules` with the fly's move in expectation.

:class:`Model` converts the rules' tables to numpy and adds the operators that the
oracle (:mod:`~acegnn.envs.spiders_fly.oracle`, optimal values) and the analysis
(:mod:`~acegnn.envs.spiders_fly.analysis`, exact evaluation of given policies) are
built from. States are triples of flat cells ``[s0, s1, f]``.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

from acegnn.envs.spiders_fly.rules import (FLY_STAY, N_ACTIONS, cell_index, check_grid_size,
                                           fly_move_probs, grid_rules)

__all__ = ["Model", "grid_model", "flat_cells", "check_policy", "check_horizon"]


class Model:
    """Numpy transition tables of the Spiders-and-Fly MDP on an ``N x N`` grid.

    Args:
        grid_size (int): side length ``N`` of the grid (``N >= 3``).

    Attributes:
        n_cells: ``C = N * N``.
        move: ``[C, 5]`` cell after each action, the cell itself where the move
            would leave the grid (those actions are excluded through ``penalty``).
        penalty: ``[C, 5]`` ``0.0`` for allowed actions, ``inf`` otherwise.
        fly_next: ``[C, 4]`` fly's neighbour cells (up, down, left, right), the cell
            itself where off the grid.
        fly_prob: ``[C, C, C, 4]`` probability that the fly at ``f`` moves in
            direction ``d`` given spiders (after their move) at ``(s0, s1)``.
        fly_stays: ``[C, C, C]`` the fly has no valid move and stays.
        caught: ``[C, C, C]`` a spider is on the fly's cell.
    """

    def __init__(self, grid_size: int) -> None:
        check_grid_size(grid_size)
        rules = grid_rules(grid_size)
        c = rules.num_cells
        self.n_cells = c
        here = np.arange(c)[:, None]
        allowed = rules.action_mask.numpy()  # [C, 5]
        self.move = np.where(allowed, rules.move.numpy(), here)
        self.penalty = np.where(allowed, 0.0, np.inf)
        fly_dest = rules.fly_dest[:, :FLY_STAY].numpy()  # [C, 4], -1 off the grid
        self.fly_next = np.where(fly_dest >= 0, fly_dest, here)
        prob = fly_move_probs(rules.fly_directions(*rules.states()))  # [C, C, C, 5]
        self.fly_prob = np.ascontiguousarray(prob[..., :FLY_STAY].numpy())
        self.fly_stays = prob[..., FLY_STAY].numpy() > 0
        self.caught = rules.captured_states().numpy()
        for table in (self.move, self.penalty, self.fly_next, self.fly_prob, self.fly_stays,
                      self.caught):
            table.flags.writeable = False  # shared by every user of grid_model()

    def after_fly(self, value: np.ndarray, caught_value: float) -> np.ndarray:
        """``W[s0', s1', f]``: ``caught_value`` if caught, else E over the fly's move of ``value``."""
        out = np.einsum("ijkd,ijkd->ijk", value[:, :, self.fly_next], self.fly_prob)
        out += np.where(self.fly_stays, value, 0.0)
        out[self.caught] = caught_value
        return out

    def bellman(self, w: np.ndarray) -> np.ndarray:
        """``min_{a0, a1} W[move(s0, a0), move(s1, a1), f]`` over allowed joint actions."""
        m1 = np.full_like(w, np.inf)
        for a in range(N_ACTIONS):
            np.minimum(m1, w[:, self.move[:, a], :] + self.penalty[None, :, a, None], out=m1)
        m0 = np.full_like(w, np.inf)
        for a in range(N_ACTIONS):
            np.minimum(m0, m1[self.move[:, a], :, :] + self.penalty[:, a, None, None], out=m0)
        return m0

    def q_values(self, w: np.ndarray) -> np.ndarray:
        """``[25, C, C, C]`` values ``W[move(s0, a0), move(s1, a1), f]`` (``inf`` if not allowed)."""
        c = self.n_cells
        q = np.empty((N_ACTIONS * N_ACTIONS, c, c, c))
        for a0 in range(N_ACTIONS):
            w0 = w[self.move[:, a0]] + self.penalty[:, a0, None, None]
            for a1 in range(N_ACTIONS):
                q[a0 * N_ACTIONS + a1] = w0[:, self.move[:, a1], :] + self.penalty[None, :, a1, None]
        return q

    def backup(self, policy: np.ndarray, value: np.ndarray, caught_value: float) -> np.ndarray:
        """``value'(s) = W[move(s0, a0), move(s1, a1), f]`` under a deterministic joint policy."""
        idx = np.arange(self.n_cells)
        n0 = self.move[idx[:, None, None], policy // N_ACTIONS]  # [C, C, C]
        n1 = self.move[idx[None, :, None], policy % N_ACTIONS]
        f = np.broadcast_to(idx[None, None, :], n0.shape)
        return self.after_fly(value, caught_value)[n0, n1, f]

    def evaluate(self, policy: np.ndarray, horizon: int, step_cost: float,
                 terminal_value: float) -> np.ndarray:
        """Finite-horizon evaluation of a deterministic joint policy, for all states:
        ``V_h(s) = step_cost + E[V_{h-1}(s') | s, policy(s)]``, ``V = terminal_value`` at
        terminal states and ``V_0 = 0`` elsewhere. With ``(0, 1)`` it is the probability
        of capture within ``h`` steps, with ``(1, 0)`` the expected ``min(T, h)``."""
        value = np.where(self.caught, terminal_value, 0.0)
        for _ in range(horizon):
            value = self.backup(policy, value, terminal_value)
            if step_cost:
                value = step_cost + value
            value[self.caught] = terminal_value
        return value


@lru_cache(maxsize=8)
def grid_model(grid_size: int) -> Model:
    """The (read-only) :class:`Model` of a grid, built once per process."""
    return Model(grid_size)


def flat_cells(positions: Tensor, grid_size: int) -> Tensor:
    """Validate ``[B, 3, 2]`` positions and return ``[B, 3]`` flat cell indices."""
    positions = torch.as_tensor(positions)
    if positions.dim() != 3 or positions.shape[1:] != (3, 2):
        raise ValueError(f"positions must have shape [B, 3, 2] (got {tuple(positions.shape)})")
    if positions.dtype.is_floating_point or positions.dtype == torch.bool or positions.is_complex():
        raise ValueError(f"positions must be an integer tensor (got {positions.dtype})")
    positions = positions.to(torch.long).cpu()
    if ((positions < 0) | (positions >= grid_size)).any():
        bad = ((positions < 0) | (positions >= grid_size)).any(-1).nonzero()[0].tolist()
        raise ValueError(
            f"positions must lie on the {grid_size}x{grid_size} grid "
            f"(got {positions[bad[0], bad[1]].tolist()} at index {bad[0]}, entity {bad[1]})"
        )
    return cell_index(positions, grid_size)


def check_policy(policy: Tensor, grid_size: int) -> np.ndarray:
    """Validate a joint policy table ``[N*N, N*N, N*N]``; return it as a numpy array."""
    c = grid_size * grid_size
    policy = torch.as_tensor(policy)
    if policy.shape != (c, c, c) or policy.dtype.is_floating_point:
        raise ValueError(f"policy must be an integer tensor of shape {(c, c, c)} "
                         f"(got {policy.dtype} {tuple(policy.shape)})")
    if bool(((policy < 0) | (policy >= N_ACTIONS * N_ACTIONS)).any()):
        raise ValueError(f"policy entries must be joint actions a0 * 5 + a1 in [0, 25) "
                         f"(got values in [{int(policy.min())}, {int(policy.max())}])")
    return policy.cpu().numpy()


def check_horizon(horizon: int) -> None:
    """Raise :class:`ValueError` unless ``horizon`` is a non-negative integer."""
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 0:
        raise ValueError(f"horizon must be a non-negative integer (got {horizon!r})")

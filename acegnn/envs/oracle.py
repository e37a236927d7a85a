"""Exact optimal joint policy for Spiders-and-Fly by value iteration.

The state is the triple of flat cell indices ``(s0, s1, f)`` (``r * N + c``) of
spider 0, spider 1 and the fly; there are ``(N * N) ** 3`` states, and states
with a spider on the fly are terminal (value ``0``). For a non-terminal state
and a joint action ``(a0, a1)`` the spiders move to ``(s0', s1')``; if one of
them lands on ``f`` the step costs ``1`` and ends the episode, otherwise it costs
``1`` plus the expected value after the fly's uniformly random move (with the
exact environment rule of :mod:`acegnn.envs.spiders_fly`). Value iteration
minimises the expected number of steps to capture:

.. math::
    V(s_0, s_1, f) = 1 + \\min_{a_0, a_1} W(s_0', s_1', f), \\qquad
    W(s_0', s_1', f) = [\\text{not caught}] \\; \\mathbb{E}_{f'} V(s_0', s_1', f').

The minimum over the 25 joint actions is separable (``min_a0 min_a1``), which is
what makes a 7x7 grid (117,649 states) solve in a few seconds with numpy. The
solver does not use the episode start rule; it solves every state.

Run ``python -m acegnn.envs.oracle --grid 5`` to print :func:`summary`.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from acegnn.envs.spiders_fly import valid_starts

__all__ = ["OracleSolution", "solve", "capture_within", "policy_capture", "policy_steps",
           "optimal_steps_q", "optimal_discounted_q", "visitation", "summary", "main"]

_N_ACTIONS = 5
_TIE_TOL = 1e-9
# (drow, dcol) per action: stay, up, down, left, right (same order as spiders_fly.MOVES).
_MOVES = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]], dtype=np.int64)


class _Model:
    """Numpy transition tables of the Spiders-and-Fly MDP on an ``N x N`` grid.

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
        n = grid_size
        c = n * n
        self.n_cells = c
        rc = np.stack(np.divmod(np.arange(c), n), axis=-1)  # [C, 2]
        target = rc[:, None, :] + _MOVES[None, :, :]  # [C, 5, 2]
        allowed = ((target >= 0) & (target < n)).all(-1)  # [C, 5]
        flat = target[..., 0] * n + target[..., 1]
        self_idx = np.broadcast_to(np.arange(c)[:, None], (c, _N_ACTIONS))
        self.move = np.where(allowed, flat, self_idx)
        self.penalty = np.where(allowed, 0.0, np.inf)
        self.fly_next = self.move[:, 1:].copy()  # [C, 4]
        fly_in = allowed[:, 1:]  # [C, 4]
        dist = np.abs(rc[:, None, :] - rc[None, :, :]).sum(-1)  # [C, C]
        far = dist[:, self.fly_next] > 1  # [C(spider), C(fly), 4]
        ok = fly_in[None, None] & far[:, None, :, :] & far[None, :, :, :]  # [C, C, C, 4]
        k = ok.sum(-1)
        self.fly_prob = ok / np.maximum(k, 1)[..., None]
        self.fly_stays = k == 0
        ar = np.arange(c)
        self.caught = (ar[:, None, None] == ar[None, None, :]) | (ar[None, :, None] == ar[None, None, :])

    def after_fly(self, value: np.ndarray, caught_value: float) -> np.ndarray:
        """``W[s0', s1', f]``: ``caught_value`` if caught, else E over the fly's move of ``value``."""
        out = np.einsum("ijkd,ijkd->ijk", value[:, :, self.fly_next], self.fly_prob)
        out += np.where(self.fly_stays, value, 0.0)
        out[self.caught] = caught_value
        return out

    def bellman(self, w: np.ndarray) -> np.ndarray:
        """``min_{a0, a1} W[move(s0, a0), move(s1, a1), f]`` over allowed joint actions."""
        m1 = np.full_like(w, np.inf)
        for a in range(_N_ACTIONS):
            np.minimum(m1, w[:, self.move[:, a], :] + self.penalty[None, :, a, None], out=m1)
        m0 = np.full_like(w, np.inf)
        for a in range(_N_ACTIONS):
            np.minimum(m0, m1[self.move[:, a], :, :] + self.penalty[:, a, None, None], out=m0)
        return m0

    def q_values(self, w: np.ndarray) -> np.ndarray:
        """``[25, C, C, C]`` values ``W[move(s0, a0), move(s1, a1), f]`` (``inf`` if not allowed)."""
        c = self.n_cells
        q = np.empty((_N_ACTIONS * _N_ACTIONS, c, c, c))
        for a0 in range(_N_ACTIONS):
            w0 = w[self.move[:, a0]] + self.penalty[:, a0, None, None]
            for a1 in range(_N_ACTIONS):
                q[a0 * _N_ACTIONS + a1] = w0[:, self.move[:, a1], :] + self.penalty[None, :, a1, None]
        return q


def _check_grid_size(grid_size: int) -> None:
    if isinstance(grid_size, bool) or not isinstance(grid_size, int) or grid_size < 3:
        raise ValueError(f"grid_size must be an integer >= 3 (got {grid_size!r})")


def _flat_cells(positions: Tensor, grid_size: int) -> Tensor:
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
    return positions[..., 0] * grid_size + positions[..., 1]


@dataclass
class OracleSolution:
    """Optimal values and joint policy for every state of an ``N x N`` grid.

    Tensors are indexed ``[s0, s1, f]`` by the flat cell index ``r * N + c`` of
    spider 0, spider 1 and the fly.

    Args:
        grid_size (int): side length ``N`` of the grid.
        expected_steps (Tensor): ``float64 [N*N, N*N, N*N]`` minimal expected
            number of steps to capture; ``0`` where a spider is on the fly.
        policy (Tensor): ``long [N*N, N*N, N*N]`` optimal joint action
            ``a0 * 5 + a1`` (lowest index among ties within ``1e-9``; ``0`` in
            terminal states).
        iterations (int, optional): value-iteration sweeps used. (default: ``0``)
        solve_seconds (float, optional): wall-clock time of :func:`solve`.
            (default: ``0.0``)
    """

    grid_size: int
    expected_steps: Tensor
    policy: Tensor
    iterations: int = 0
    solve_seconds: float = 0.0

    def expected_steps_at(self, positions: Tensor) -> Tensor:
        """Optimal expected steps to capture from each position.

        Args:
            positions (Tensor): ``LongTensor [B, 3, 2]`` of (spider0, spider1, fly).

        Returns:
            Tensor: ``float64 [B]``.
        """
        cells = _flat_cells(positions, self.grid_size)
        return self.expected_steps[cells[:, 0], cells[:, 1], cells[:, 2]]

    def act(self, positions: Tensor) -> Tensor:
        """Optimal joint action for each position.

        Args:
            positions (Tensor): ``LongTensor [B, 3, 2]`` of (spider0, spider1, fly).

        Returns:
            Tensor: ``LongTensor [B, 2]`` of per-spider actions ``(a0, a1)``.
        """
        cells = _flat_cells(positions, self.grid_size)
        joint = self.policy[cells[:, 0], cells[:, 1], cells[:, 2]]
        return torch.stack([joint // _N_ACTIONS, joint % _N_ACTIONS], dim=-1)


def _value_iteration(sweep, value: np.ndarray, tol: float, max_iters: int):
    """Apply ``sweep`` until the largest change is below ``tol``; (value, sweeps)."""
    if not (isinstance(tol, (int, float)) and not isinstance(tol, bool) and tol > 0):
        raise ValueError(f"tol must be a positive number (got {tol!r})")
    if isinstance(max_iters, bool) or not isinstance(max_iters, int) or max_iters < 1:
        raise ValueError(f"max_iters must be a positive integer (got {max_iters!r})")
    delta = math.inf
    for iterations in range(1, max_iters + 1):
        new_value = sweep(value)
        delta = float(np.abs(new_value - value).max())
        value = new_value
        if delta < tol:
            return value, iterations
    raise RuntimeError(
        f"value iteration did not converge within max_iters={max_iters} (last change {delta:.3e})"
    )


def solve(grid_size: int, tol: float = 1e-10, max_iters: int = 10_000) -> OracleSolution:
    """Solve Spiders-and-Fly exactly by value iteration over all states.

    Args:
        grid_size (int): side length ``N`` of the grid (``N >= 3``).
        tol (float, optional): stop when the largest change of the value function
            in one sweep is below ``tol``. (default: ``1e-10``)
        max_iters (int, optional): maximum number of sweeps. (default: ``10000``)

    Returns:
        OracleSolution: values and the deterministic optimal joint policy.

    Raises:
        ValueError: on invalid arguments.
        RuntimeError: if value iteration did not converge within ``max_iters``.
    """
    _check_grid_size(grid_size)
    t0 = time.perf_counter()
    model = _Model(grid_size)

    def sweep(value: np.ndarray) -> np.ndarray:
        new_value = 1.0 + model.bellman(model.after_fly(value, 0.0))
        new_value[model.caught] = 0.0
        return new_value

    value, iterations = _value_iteration(sweep, np.zeros((model.n_cells,) * 3), tol, max_iters)

    q = model.q_values(model.after_fly(value, 0.0))
    q_min = q.min(axis=0)
    policy = np.argmax(q <= q_min + _TIE_TOL, axis=0)
    policy[model.caught] = 0
    return OracleSolution(
        grid_size=grid_size,
        expected_steps=torch.from_numpy(value),
        policy=torch.from_numpy(policy.astype(np.int64)),
        iterations=iterations,
        solve_seconds=time.perf_counter() - t0,
    )


def _check_policy(policy: Tensor, grid_size: int) -> np.ndarray:
    c = grid_size * grid_size
    policy = torch.as_tensor(policy)
    if policy.shape != (c, c, c) or policy.dtype.is_floating_point:
        raise ValueError(f"policy must be an integer tensor of shape {(c, c, c)} "
                         f"(got {policy.dtype} {tuple(policy.shape)})")
    if bool(((policy < 0) | (policy >= _N_ACTIONS * _N_ACTIONS)).any()):
        raise ValueError("policy entries must be joint actions a0 * 5 + a1 in [0, 25)")
    return policy.cpu().numpy()


def _backup(model: _Model, policy: np.ndarray, value: np.ndarray, caught_value: float) -> np.ndarray:
    """``value'(s) = W[move(s0, a0), move(s1, a1), f]`` under a deterministic joint policy."""
    idx = np.arange(model.n_cells)
    n0 = model.move[idx[:, None, None], policy // _N_ACTIONS]  # [C, C, C]
    n1 = model.move[idx[None, :, None], policy % _N_ACTIONS]
    f = np.broadcast_to(idx[None, None, :], n0.shape)
    return model.after_fly(value, caught_value)[n0, n1, f]


def policy_capture(grid_size: int, policy: Tensor, horizon: int = 10) -> Tensor:
    """Exact probability that a joint policy catches the fly within ``horizon`` steps.

    The state distribution is propagated exactly; by linearity this is done
    backwards, ``P_h(s) = E[P_{h-1}(s') | s, policy(s)]`` with ``P_0`` the indicator
    of terminal states, for all states at once.

    Args:
        grid_size (int): side length ``N`` of the grid.
        policy (Tensor): ``long [N*N, N*N, N*N]`` joint action ``a0 * 5 + a1`` per
            state ``[s0, s1, f]`` (ignored at terminal states).
        horizon (int, optional): number of steps. (default: ``10``)

    Returns:
        Tensor: ``float64 [N*N, N*N, N*N]`` capture probabilities.
    """
    _check_grid_size(grid_size)
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 0:
        raise ValueError(f"horizon must be a non-negative integer (got {horizon!r})")
    model, pol = _Model(grid_size), _check_policy(policy, grid_size)
    prob = model.caught.astype(np.float64)
    for _ in range(horizon):
        prob = _backup(model, pol, prob, 1.0)
        prob[model.caught] = 1.0
    return torch.from_numpy(np.ascontiguousarray(prob))


def policy_steps(grid_size: int, policy: Tensor, horizon: int) -> Tensor:
    """Exact expected episode length ``E[min(T, horizon)]`` of a joint policy.

    ``T`` is the step of capture; an episode not ended by ``horizon`` counts
    ``horizon`` steps, as a truncated test episode does. Policy evaluation,
    ``L_h(s) = 1 + E[L_{h-1}(s') | s, policy(s)]`` (``0`` at terminal states).

    Args:
        grid_size (int): side length ``N`` of the grid.
        policy (Tensor): ``long [N*N, N*N, N*N]`` joint actions, as in
            :func:`policy_capture`.
        horizon (int): the episode step limit.

    Returns:
        Tensor: ``float64 [N*N, N*N, N*N]``.
    """
    _check_grid_size(grid_size)
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 0:
        raise ValueError(f"horizon must be a non-negative integer (got {horizon!r})")
    model, pol = _Model(grid_size), _check_policy(policy, grid_size)
    steps = np.zeros((model.n_cells,) * 3)
    for _ in range(horizon):
        steps = 1.0 + _backup(model, pol, steps, 0.0)
        steps[model.caught] = 0.0
    return torch.from_numpy(np.ascontiguousarray(steps))


def optimal_steps_q(solution: OracleSolution) -> Tensor:
    """Expected steps to capture after each joint action, the oracle acting after it.

    ``Q[a0 * 5 + a1, s0, s1, f] = 1 + W(s0', s1', f)`` with ``W`` the expected optimal
    steps after the fly's move (``0`` if the action catches it); ``inf`` where the
    action leaves the grid, ``0`` at terminal states. ``Q[a] - expected_steps`` is the
    regret of ``a`` in steps.

    Returns:
        Tensor: ``float64 [25, N*N, N*N, N*N]``.
    """
    model = _Model(solution.grid_size)
    q = 1.0 + model.q_values(model.after_fly(solution.expected_steps.numpy(), 0.0))
    q[:, model.caught] = np.where(np.isfinite(q[:, model.caught]), 0.0, np.inf)
    return torch.from_numpy(q)


def optimal_discounted_q(grid_size: int, gamma: float, reward: float = 10.0,
                         tol: float = 1e-10, max_iters: int = 10_000) -> Tensor:
    r"""Optimal discounted values of every joint action, the return a Q-learner fits.

    .. math::
        Q(s, a) = \begin{cases} r & \text{a spider lands on the fly} \\
        \gamma\, \mathbb{E}_{f'} \max_{a'} Q(s', a') & \text{otherwise} \end{cases}

    ACE-DQN with ``intermediate_discount`` discounts once per SE-state, so the value of
    its last SE-state :math:`V(s, a_1, \ldots, a_n)` fits this with
    :math:`\gamma^n` per environment step.

    Args:
        grid_size (int): side length ``N`` of the grid.
        gamma (float): discount per environment step, in ``(0, 1)``.
        reward (float, optional): capture reward. (default: ``10.0``)

    Returns:
        Tensor: ``float64 [25, N*N, N*N, N*N]``, ``-inf`` where the action leaves the
        grid, ``0`` at terminal states.
    """
    _check_grid_size(grid_size)
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0 < gamma < 1:
        raise ValueError(f"gamma must be a number in (0, 1) (got {gamma!r})")
    model = _Model(grid_size)

    def sweep(value: np.ndarray) -> np.ndarray:
        new_value = -model.bellman(-model.after_fly(gamma * value, reward))
        new_value[model.caught] = 0.0
        return new_value

    value, _ = _value_iteration(sweep, np.zeros((model.n_cells,) * 3), tol, max_iters)
    q = -model.q_values(-model.after_fly(gamma * value, reward))
    q[:, model.caught] = np.where(np.isfinite(q[:, model.caught]), 0.0, -np.inf)
    return torch.from_numpy(q)


def visitation(grid_size: int, policy: Tensor, horizon: int,
               starts: Optional[Tensor] = None) -> Tensor:
    """Expected visits to every state in an episode of a joint policy.

    ``d(s) = sum_{t < horizon} P(s_t = s)`` with ``s_0`` uniform over ``starts`` and
    the fly's moves in expectation; terminal states are not counted, so ``d`` sums
    to the expected episode length ``E[min(T, horizon)]``. With it the steps gap of a
    policy splits over states (performance difference): ``sum_s d(s) (Q(s, policy(s))
    - V(s))``, with :func:`optimal_steps_q` and ``V`` the oracle's expected steps,
    equals the gap of the truncated episode plus ``E[V(s_horizon)]`` of the episodes
    still running, so exactly the gap once the policy has caught the fly by then.

    Args:
        grid_size (int): side length ``N`` of the grid.
        policy (Tensor): ``long [N*N, N*N, N*N]`` joint actions, as in
            :func:`policy_capture`.
        horizon (int): number of steps.
        starts (Tensor, optional): ``LongTensor [S, 3, 2]`` start positions.
            (default: every valid start)

    Returns:
        Tensor: ``float64 [N*N, N*N, N*N]``.
    """
    _check_grid_size(grid_size)
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 0:
        raise ValueError(f"horizon must be a non-negative integer (got {horizon!r})")
    model, pol = _Model(grid_size), _check_policy(policy, grid_size).reshape(-1)
    c = model.n_cells
    starts = valid_starts(grid_size) if starts is None else starts
    cells = _flat_cells(starts, grid_size).numpy()
    s0, s1, f = np.unravel_index(np.arange(c ** 3), (c, c, c))
    n0, n1 = model.move[s0, pol // _N_ACTIONS], model.move[s1, pol % _N_ACTIONS]
    live = ~model.caught[n0, n1, f]  # the fly survives the spiders' move
    # successors: the fly's four moves and staying, with their probabilities
    succ = np.concatenate([model.fly_next[f], f[:, None]], axis=1)  # [C^3, 5]
    prob = np.concatenate([model.fly_prob[n0, n1, f], model.fly_stays[n0, n1, f][:, None]], axis=1)
    dest = ((n0 * c + n1) * c)[:, None] + succ
    prob = prob * live[:, None]
    p = np.bincount(np.ravel_multi_index(cells.T, (c, c, c)), minlength=c ** 3) / max(len(cells), 1)
    d = np.zeros(c ** 3)
    caught = model.caught.reshape(-1)
    for _ in range(horizon):
        p = np.where(caught, 0.0, p)
        d += p
        p = np.bincount(dest.reshape(-1), weights=(p[:, None] * prob).reshape(-1), minlength=c ** 3)
    return torch.from_numpy(d.reshape(c, c, c))


def capture_within(solution: OracleSolution, starts: Tensor, horizon: int = 10) -> Tensor:
    """Exact probability that the oracle policy catches the fly within ``horizon``
    steps from each of ``starts`` (``LongTensor [S, 3, 2]``); ``float64 [S]``.
    See :func:`policy_capture`."""
    cells = _flat_cells(starts, solution.grid_size)
    prob = policy_capture(solution.grid_size, solution.policy, horizon)
    return prob[cells[:, 0], cells[:, 1], cells[:, 2]]


def summary(grid_size: int, horizon: int = 10) -> dict:
    """Solve a grid and summarise the oracle over all valid episode starts.

    Args:
        grid_size (int): side length ``N`` of the grid.
        horizon (int, optional): horizon of the capture probability. (default: ``10``)

    Returns:
        dict: ``{"grid", "num_starts", "mean_expected_steps", "capture_within_10",
        "solve_seconds"}`` (the capture key is named after ``horizon``). Means are
        ``nan`` when the grid has no valid start.
    """
    sol = solve(grid_size)
    starts = valid_starts(grid_size)
    if starts.shape[0] > 0:
        mean_steps = float(sol.expected_steps_at(starts).mean())
        capture = float(capture_within(sol, starts, horizon).mean())
    else:
        mean_steps = capture = float("nan")
    return {
        "grid": grid_size,
        "num_starts": int(starts.shape[0]),
        "mean_expected_steps": mean_steps,
        f"capture_within_{horizon}": capture,
        "solve_seconds": sol.solve_seconds,
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line entry point: print :func:`summary` as JSON.

    Args:
        argv (Sequence[str], optional): arguments; ``None`` reads ``sys.argv``.
            (default: ``None``)

    Returns:
        int: exit status ``0``.
    """
    parser = argparse.ArgumentParser(
        prog="acegnn oracle", description="Exact optimal Spiders-and-Fly policy by value iteration."
    )
    parser.add_argument("--grid", type=int, default=5, help="grid side length N (default: 5)")
    parser.add_argument("--horizon", type=int, default=10, help="capture horizon in steps (default: 10)")
    args = parser.parse_args(argv)
    try:
        result = summary(args.grid, args.horizon)
    except ValueError as err:
        parser.error(str(err))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

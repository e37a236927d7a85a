"""Exact optimal joint policy for Spiders-and-Fly by value iteration.

The state is the triple of flat cell indices ``(s0, s1, f)`` (``r * N + c``) of
spider 0, spider 1 and the fly; there are ``(N * N) ** 3`` states, and states
with a spider on the fly are terminal (value ``0``). For a non-terminal state
and a joint action ``(a0, a1)`` the spiders move to ``(s0', s1')``; if one of
them lands on ``f`` the step costs ``1`` and ends the episode, otherwise it costs
``1`` plus the expected value after the fly's uniformly random move (with the
rules of :mod:`acegnn.envs.spiders_fly.rules`, as the environment). Value iteration
minimises the expected number of steps to capture:

.. math::
    V(s_0, s_1, f) = 1 + \\min_{a_0, a_1} W(s_0', s_1', f), \\qquad
    W(s_0', s_1', f) = [\\text{not caught}] \\; \\mathbb{E}_{f'} V(s_0', s_1', f').

The minimum over the 25 joint actions is computed as ``min_a0 min_a1``. The solver
does not use the episode start rule; it solves every state.

:func:`optimal_steps_q` and :func:`optimal_discounted_q` give the optimal value of
every joint action (for regrets, and for the discounted return a Q-learner fits); the
exact evaluation of other policies is in :mod:`acegnn.envs.spiders_fly.analysis`.

Run ``python -m acegnn.envs.spiders_fly.oracle --grid 5`` to print :func:`summary`.
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

from acegnn.envs.spiders_fly._model import check_horizon, flat_cells, grid_model
from acegnn.envs.spiders_fly.rules import CATCH_REWARD, N_ACTIONS, check_grid_size, valid_starts

__all__ = ["OracleSolution", "solve", "optimal_steps_q", "optimal_discounted_q", "capture_within",
           "summary", "main"]

_TIE_TOL = 1e-9


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
        cells = flat_cells(positions, self.grid_size)
        return self.expected_steps[cells[:, 0], cells[:, 1], cells[:, 2]]

    def act(self, positions: Tensor) -> Tensor:
        """Optimal joint action for each position.

        Args:
            positions (Tensor): ``LongTensor [B, 3, 2]`` of (spider0, spider1, fly).

        Returns:
            Tensor: ``LongTensor [B, 2]`` of per-spider actions ``(a0, a1)``.
        """
        cells = flat_cells(positions, self.grid_size)
        joint = self.policy[cells[:, 0], cells[:, 1], cells[:, 2]]
        return torch.stack([joint // N_ACTIONS, joint % N_ACTIONS], dim=-1)


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
    check_grid_size(grid_size)
    t0 = time.perf_counter()
    model = grid_model(grid_size)

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


def optimal_steps_q(solution: OracleSolution) -> Tensor:
    """Expected steps to capture after each joint action, the oracle acting after it.

    ``Q[a0 * 5 + a1, s0, s1, f] = 1 + W(s0', s1', f)`` with ``W`` the expected optimal
    steps after the fly's move (``0`` if the action catches it); ``inf`` where the
    action leaves the grid, ``0`` at terminal states. ``Q[a] - expected_steps`` is the
    regret of ``a`` in steps.

    Returns:
        Tensor: ``float64 [25, N*N, N*N, N*N]``.
    """
    model = grid_model(solution.grid_size)
    q = 1.0 + model.q_values(model.after_fly(solution.expected_steps.numpy(), 0.0))
    q[:, model.caught] = np.where(np.isfinite(q[:, model.caught]), 0.0, np.inf)
    return torch.from_numpy(q)


def optimal_discounted_q(grid_size: int, gamma: float, reward: float = CATCH_REWARD,
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
        reward (float, optional): capture reward. (default: :data:`CATCH_REWARD`,
            ``10.0``)

    Returns:
        Tensor: ``float64 [25, N*N, N*N, N*N]``, ``-inf`` where the action leaves the
        grid, ``0`` at terminal states.
    """
    check_grid_size(grid_size)
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0 < gamma < 1:
        raise ValueError(f"gamma must be a number in (0, 1) (got {gamma!r})")
    model = grid_model(grid_size)

    def sweep(value: np.ndarray) -> np.ndarray:
        new_value = -model.bellman(-model.after_fly(gamma * value, reward))
        new_value[model.caught] = 0.0
        return new_value

    value, _ = _value_iteration(sweep, np.zeros((model.n_cells,) * 3), tol, max_iters)
    q = -model.q_values(-model.after_fly(gamma * value, reward))
    q[:, model.caught] = np.where(np.isfinite(q[:, model.caught]), 0.0, -np.inf)
    return torch.from_numpy(q)


def capture_within(solution: OracleSolution, starts: Tensor, horizon: int = 10) -> Tensor:
    """Exact probability that the oracle policy catches the fly within ``horizon``
    steps from each of ``starts`` (``LongTensor [S, 3, 2]``); ``float64 [S]``.
    See :func:`~acegnn.envs.spiders_fly.analysis.policy_capture`."""
    cells = flat_cells(starts, solution.grid_size)
    check_horizon(horizon)
    prob = grid_model(solution.grid_size).evaluate(solution.policy.numpy(), horizon, 0.0, 1.0)
    return torch.from_numpy(prob)[cells[:, 0], cells[:, 1], cells[:, 2]]


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

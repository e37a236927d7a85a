"""Exact evaluation of given Spiders-and-Fly joint policies, and where their steps go.

A joint policy is a table ``long [N*N, N*N, N*N]`` of joint actions ``a0 * 5 + a1``
indexed by the flat cells ``[s0, s1, f]`` of spider 0, spider 1 and the fly (as
:meth:`~acegnn.envs.spiders_fly.SpidersFlyTask.policy_table` makes from a network).
Every function here takes the fly's move in expectation, with the same rules
(:mod:`acegnn.envs.spiders_fly.rules`) as the environment and the oracle, so its
numbers are free of sampling noise:

* :func:`policy_capture`, :func:`policy_steps`: probability of capture within a
  horizon and expected (truncated) episode length, from every state;
* :func:`visitation`: expected visits to every state from the valid starts;
* :func:`policy_regret`, :func:`gap_anatomy`: the steps lost in each state against
  the oracle, and how the steps gap splits over the states a policy visits.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from acegnn.envs.spiders_fly._model import check_horizon, check_policy, flat_cells, grid_model
from acegnn.envs.spiders_fly.oracle import OracleSolution, optimal_steps_q
from acegnn.envs.spiders_fly.rules import N_ACTIONS, check_grid_size, live_states, valid_starts

__all__ = ["policy_capture", "policy_steps", "visitation", "policy_regret", "gap_anatomy"]


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
    check_grid_size(grid_size)
    check_horizon(horizon)
    model, pol = grid_model(grid_size), check_policy(policy, grid_size)
    return torch.from_numpy(np.ascontiguousarray(model.evaluate(pol, horizon, 0.0, 1.0)))


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
    check_grid_size(grid_size)
    check_horizon(horizon)
    model, pol = grid_model(grid_size), check_policy(policy, grid_size)
    return torch.from_numpy(np.ascontiguousarray(model.evaluate(pol, horizon, 1.0, 0.0)))


def visitation(grid_size: int, policy: Tensor, horizon: int,
               starts: Optional[Tensor] = None) -> Tensor:
    r"""Expected visits to every state in an episode of a joint policy.

    :math:`d(s) = \sum_{t < H} P(s_t = s)` with :math:`H` = ``horizon``, :math:`s_0`
    uniform over ``starts`` and the fly's moves in expectation. Terminal states are not
    counted, so :math:`d` sums to :math:`\mathbb{E}[\min(T, H)]`, :math:`T` the step of
    capture. The steps gap splits over states (performance difference):

    .. math::
        \sum_s d(s)\, \rho(s) = \mathbb{E}[\min(T, H)] - \mathbb{E}[V^*(s_0)]
            + \mathbb{E}[V^*(s_H);\ T > H]

    with :math:`\rho` the regret (:func:`policy_regret`) and :math:`V^*` the oracle's
    expected steps.

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
    check_grid_size(grid_size)
    check_horizon(horizon)
    model, pol = grid_model(grid_size), check_policy(policy, grid_size).reshape(-1)
    c = model.n_cells
    starts = valid_starts(grid_size) if starts is None else starts
    cells = flat_cells(starts, grid_size).numpy()
    s0, s1, f = np.unravel_index(np.arange(c ** 3), (c, c, c))
    n0, n1 = model.move[s0, pol // N_ACTIONS], model.move[s1, pol % N_ACTIONS]
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


def policy_regret(solution: OracleSolution, policy: Tensor) -> Tensor:
    """Steps a joint policy loses in each state against the oracle.

    ``Q(s, policy(s)) - V(s)``, with ``Q`` of
    :func:`~acegnn.envs.spiders_fly.oracle.optimal_steps_q` (the oracle acting after
    the policy's action) and ``V`` the oracle's expected steps; ``0`` at terminal
    states.

    Args:
        solution (OracleSolution): the oracle of the grid.
        policy (Tensor): ``long [N*N, N*N, N*N]`` joint actions, as in
            :func:`policy_capture`.

    Returns:
        Tensor: ``float64 [N*N, N*N, N*N]``.
    """
    n = solution.grid_size
    policy = torch.from_numpy(check_policy(policy, n)).long()
    regret = optimal_steps_q(solution).gather(0, policy.unsqueeze(0)).squeeze(0) - solution.expected_steps
    return torch.where(live_states(n), regret, torch.zeros_like(regret))


def gap_anatomy(solution: OracleSolution, policy: Tensor,
                horizon: int) -> Tuple[Dict[str, float], Tensor]:
    r"""Where the steps gap of a joint policy comes from.

    ``gap_from_regret`` is :math:`\sum_s d(s)\, \rho(s)` of :func:`visitation`'s identity
    from the valid starts, and ``uncaught_at_horizon`` is :math:`P(T > H)`. Where the
    latter is 0, the former is the untruncated steps gap. Choose ``horizon`` well beyond
    the time limit (e.g. ten times).

    Args:
        solution (OracleSolution): the oracle of the grid.
        policy (Tensor): ``long [N*N, N*N, N*N]`` joint actions, as in
            :func:`policy_capture`.
        horizon (int): number of steps of the episodes.

    Returns:
        (dict, Tensor): the metrics ``visited_states``, ``live_states``,
        ``gap_from_regret``, ``uncaught_at_horizon`` and, for regret thresholds ``0``
        and ``0.5`` steps, ``regret_over_<thr>_states`` (visited states with more
        regret), ``..._visits`` (their expected visits) and ``..._gap`` (their share
        of ``gap_from_regret``); and the ``bool [N*N, N*N, N*N]`` live states the
        policy visits.
    """
    n = solution.grid_size
    visits = visitation(n, policy, horizon)
    regret = policy_regret(solution, policy)
    live = live_states(n)
    visited = (visits > 1e-12) & live
    out = {"visited_states": int(visited.sum()), "live_states": int(live.sum()),
           "gap_from_regret": float((visits * regret).sum()),
           "uncaught_at_horizon": float((visitation(n, policy, horizon + 1) - visits).sum())}
    for thr in (0.0, 0.5):
        bad = visited & (regret > thr + 1e-9)
        out[f"regret_over_{thr:g}_states"] = int(bad.sum())
        out[f"regret_over_{thr:g}_visits"] = float(visits[bad].sum())
        out[f"regret_over_{thr:g}_gap"] = float((visits * regret)[bad].sum())
    return out, visited

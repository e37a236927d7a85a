"""Tests for the exact oracle of Spiders-and-Fly and the exact analysis of given policies."""

from __future__ import annotations

import itertools
import json

import pytest
import torch

from acegnn.envs.spiders_fly import SpidersFlyEnv, action_mask_for, valid_starts
from acegnn.envs.spiders_fly.analysis import (gap_anatomy, policy_capture, policy_regret,
                                              policy_steps, visitation)
from acegnn.envs.spiders_fly.oracle import (OracleSolution, capture_within, main,
                                            optimal_discounted_q, optimal_steps_q, solve, summary)

STAY, UP, DOWN, LEFT, RIGHT = range(5)
DELTAS = [(0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)]


# ------------------------------------------------------- plain-Python reference
def _dist(a, b) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


class BruteForce:
    """Plain-Python (no vectorisation) model and value iteration on a small grid."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.cells = list(itertools.product(range(n), range(n)))
        self.states = list(itertools.product(self.cells, repeat=3))

    def inside(self, p) -> bool:
        return 0 <= p[0] < self.n and 0 <= p[1] < self.n

    def step_spider(self, p, a):
        q = (p[0] + DELTAS[a][0], p[1] + DELTAS[a][1])
        return q if self.inside(q) else None

    def fly_dist(self, s0, s1, f):
        options = []
        for d in DELTAS[1:]:
            q = (f[0] + d[0], f[1] + d[1])
            if self.inside(q) and _dist(q, s0) > 1 and _dist(q, s1) > 1:
                options.append(q)
        if not options:
            return [(f, 1.0)]
        return [(q, 1.0 / len(options)) for q in options]

    def terminal(self, state) -> bool:
        s0, s1, f = state
        return s0 == f or s1 == f

    def q(self, value, state, a0, a1, caught_value=0.0):
        """1-step look-ahead: None if not allowed, else (caught?, expectation)."""
        s0, s1, f = state
        n0, n1 = self.step_spider(s0, a0), self.step_spider(s1, a1)
        if n0 is None or n1 is None:
            return None
        if n0 == f or n1 == f:
            return caught_value
        return sum(p * value[(n0, n1, g)] for g, p in self.fly_dist(n0, n1, f))

    def value_iteration(self, tol: float = 1e-13):
        value = {s: 0.0 for s in self.states}
        while True:
            new = {}
            for s in self.states:
                if self.terminal(s):
                    new[s] = 0.0
                    continue
                best = float("inf")
                for a0 in range(5):
                    for a1 in range(5):
                        w = self.q(value, s, a0, a1)
                        if w is not None:
                            best = min(best, 1.0 + w)
                new[s] = best
            diff = max(abs(new[s] - value[s]) for s in self.states)
            value = new
            if diff < tol:
                return value

    def capture_prob(self, policy, horizon: int):
        """P(capture within h steps) under a fixed joint policy, by forward recursion."""
        prob = {s: 1.0 if self.terminal(s) else 0.0 for s in self.states}
        for _ in range(horizon):
            new = {}
            for s in self.states:
                if self.terminal(s):
                    new[s] = 1.0
                else:
                    a0, a1 = policy[s]
                    new[s] = self.q(prob, s, a0, a1, caught_value=1.0)
            prob = new
        return prob

    def truncated_length(self, policy, horizon: int):
        """E[min(T, horizon)] under a fixed joint policy, by forward recursion."""
        length = {s: 0.0 for s in self.states}
        for _ in range(horizon):
            length = {s: 0.0 if self.terminal(s) else 1.0 + self.q(length, s, *policy[s])
                      for s in self.states}
        return length


def flat(p, n: int) -> int:
    return p[0] * n + p[1]


def index_of(state, n: int):
    return tuple(flat(p, n) for p in state)


@pytest.fixture(scope="module")
def sol5() -> OracleSolution:
    return solve(5)


@pytest.fixture(scope="module")
def sol7() -> OracleSolution:
    return solve(7)


# ----------------------------------------------------------------- brute force
@pytest.mark.parametrize("n", [3, 4])
def test_matches_brute_force_value_iteration(n):
    bf = BruteForce(n)
    ref = bf.value_iteration()
    sol = solve(n)
    assert sol.expected_steps.shape == (n * n,) * 3
    assert sol.expected_steps.dtype == torch.float64
    assert sol.policy.shape == (n * n,) * 3 and sol.policy.dtype == torch.long
    values = sol.expected_steps
    for s in bf.states:
        assert abs(values[index_of(s, n)].item() - ref[s]) < 1e-8, s
    # The policy is greedy w.r.t. the values, with the lowest-index tie break.
    for s in bf.states[:: 7 if n == 4 else 1]:
        if bf.terminal(s):
            continue
        q = [bf.q(ref, s, a // 5, a % 5) for a in range(25)]
        q = [float("inf") if w is None else 1.0 + w for w in q]
        best = min(q)
        expected = min(a for a in range(25) if q[a] <= best + 1e-9)
        assert sol.policy[index_of(s, n)].item() == expected, s


def test_capture_within_matches_brute_force_3x3():
    n = 3
    bf = BruteForce(n)
    sol = solve(n)
    policy = {}
    for s in bf.states:
        j = sol.policy[index_of(s, n)].item()
        policy[s] = (j // 5, j % 5)
    starts = torch.tensor([list(map(list, s)) for s in bf.states])
    for horizon in (0, 1, 2, 3, 5):
        ref = bf.capture_prob(policy, horizon)
        got = capture_within(sol, starts, horizon)
        for i, s in enumerate(bf.states):
            assert abs(got[i].item() - ref[s]) < 1e-10, (horizon, s)


@pytest.mark.parametrize("policy_kind", ["oracle", "random"])
def test_policy_evaluation_matches_brute_force_3x3(policy_kind):
    """Exact capture probability and truncated length of any fixed joint policy."""
    n = 3
    bf = BruteForce(n)
    sol = solve(n)
    g = torch.Generator().manual_seed(0)
    table = sol.policy.clone()
    policy = {}
    for s in bf.states:
        if policy_kind == "random":  # a random allowed joint action per state
            allowed = [(a0, a1) for a0 in range(5) for a1 in range(5)
                       if bf.step_spider(s[0], a0) and bf.step_spider(s[1], a1)]
            a0, a1 = allowed[int(torch.randint(len(allowed), (1,), generator=g))]
            table[index_of(s, n)] = a0 * 5 + a1
        j = int(table[index_of(s, n)])
        policy[s] = (j // 5, j % 5)
    for horizon in (0, 1, 4, 12):
        prob, length = policy_capture(n, table, horizon), policy_steps(n, table, horizon)
        ref_p, ref_l = bf.capture_prob(policy, horizon), bf.truncated_length(policy, horizon)
        for s in bf.states:
            assert abs(prob[index_of(s, n)].item() - ref_p[s]) < 1e-10, (horizon, s)
            assert abs(length[index_of(s, n)].item() - ref_l[s]) < 1e-10, (horizon, s)


def test_policy_steps_of_oracle_converge_to_its_values(sol5):
    long_run = policy_steps(5, sol5.policy, 400)
    assert torch.allclose(long_run, sol5.expected_steps, atol=1e-6)
    # staying put never catches a fly that keeps away: every episode is truncated
    stay = torch.zeros_like(sol5.policy)
    starts = valid_starts(5)
    cells = starts[..., 0] * 5 + starts[..., 1]
    at = lambda t: t[cells[:, 0], cells[:, 1], cells[:, 2]]  # noqa: E731
    assert torch.allclose(at(policy_steps(5, stay, 20)), torch.tensor(20.0, dtype=torch.float64))
    assert bool((at(policy_capture(5, stay, 10)) == 0).all())
    with pytest.raises(ValueError, match="policy must be"):
        policy_steps(5, stay.float(), 20)
    with pytest.raises(ValueError, match="policy entries"):
        policy_steps(5, stay + 25, 20)


# ---------------------------------------------------------------- hand checks
def test_adjacent_spider_means_one_step(sol5):
    n = 5
    cells = list(itertools.product(range(n), range(n)))
    for s0, s1, f in itertools.product(cells, repeat=3):
        v = sol5.expected_steps[flat(s0, n), flat(s1, n), flat(f, n)].item()
        d = min(_dist(s0, f), _dist(s1, f))
        if d == 0:
            assert v == 0.0
        elif d == 1:
            assert v == 1.0
        else:
            assert v >= 2.0


def test_hand_cases(sol5):
    positions = torch.tensor(
        [
            [[2, 2], [0, 0], [2, 3]],  # spider 0 adjacent: 1 step
            [[0, 0], [4, 4], [4, 3]],  # spider 1 adjacent: 1 step
            [[0, 2], [2, 0], [0, 0]],  # fly cornered: block, then catch: 2 steps
            [[1, 1], [3, 3], [1, 1]],  # terminal: 0
        ]
    )
    assert sol5.expected_steps_at(positions).tolist() == [1.0, 1.0, 2.0, 0.0]
    acts = sol5.act(positions[:2])
    assert acts.tolist() == [[RIGHT, STAY], [STAY, LEFT]]  # lowest joint index catching
    p1 = capture_within(sol5, positions, horizon=1)
    p2 = capture_within(sol5, positions, horizon=2)
    assert p1.tolist() == [1.0, 1.0, 0.0, 1.0]
    assert p2.tolist() == [1.0, 1.0, 1.0, 1.0]
    assert capture_within(sol5, positions[:3], horizon=0).tolist() == [0.0, 0.0, 0.0]


def test_policy_only_uses_available_actions(sol5):
    n = 5
    idx = torch.arange(n**3 * n**3)
    cells = torch.stack([idx // (n**4), (idx // n**2) % n**2, idx % n**2], dim=-1)
    positions = torch.stack([cells // n, cells % n], dim=-1)
    nonterminal = (positions[:, :2] != positions[:, 2:3]).any(-1).all(-1)
    positions = positions[nonterminal]
    acts = sol5.act(positions)
    mask = action_mask_for(positions, n)
    assert mask.gather(2, acts.unsqueeze(-1)).all()


def test_expected_steps_equal_sum_of_tail_probabilities(sol5):
    """E[T] = sum_{h>=0} P(T > h); the oracle catches every fly within a bounded time."""
    n = 5
    starts = valid_starts(n)
    total = torch.zeros(starts.shape[0], dtype=torch.float64)
    for h in range(25):
        total += 1.0 - capture_within(sol5, starts, h)
    assert torch.allclose(total, sol5.expected_steps_at(starts), atol=1e-9)
    assert torch.allclose(capture_within(sol5, starts, 25), torch.ones(starts.shape[0], dtype=torch.float64))


# ------------------------------------------------------------- Monte Carlo
def test_capture_within_matches_rollouts(sol7):
    n, horizon, reps = 7, 10, 1500
    starts = valid_starts(n)
    exact_all = capture_within(sol7, starts, horizon)
    # A few starts with non-trivial capture probabilities (deterministic choice).
    candidates = ((exact_all > 0.2) & (exact_all < 0.9)).nonzero().squeeze(1)
    assert candidates.numel() >= 3
    chosen = candidates[torch.linspace(0, candidates.numel() - 1, 3).long()]
    chosen = torch.cat([chosen, torch.tensor([0])])  # plus one easy start
    env = SpidersFlyEnv(grid_size=n, num_envs=reps * chosen.numel(), seed=2024)
    env.set_state(starts[chosen].repeat_interleave(reps, dim=0))
    caught = torch.zeros(env.num_envs, dtype=torch.bool)
    done = torch.zeros(env.num_envs, dtype=torch.bool)
    for _ in range(horizon):
        res = env.step(sol7.act(env.positions))
        caught |= res.terminated & ~done
        done |= res.terminated | res.truncated
    mc = caught.double().reshape(chosen.numel(), reps).mean(1)
    exact = exact_all[chosen]
    assert torch.allclose(mc, exact, atol=0.05), (mc, exact)


def test_oracle_episodes_in_env_match_expected_steps(sol5):
    n, reps = 5, 400
    starts = valid_starts(n)[torch.tensor([0, 100, 400, 800])]
    env = SpidersFlyEnv(grid_size=n, num_envs=reps * 4, seed=5)
    env.set_state(starts.repeat_interleave(reps, dim=0))
    length = torch.zeros(env.num_envs)
    done = torch.zeros(env.num_envs, dtype=torch.bool)
    for step in range(1, env.time_limit + 1):
        res = env.step(sol5.act(env.positions))
        length = torch.where(res.terminated & ~done, torch.full_like(length, step), length)
        assert not (res.truncated & ~done).any()  # the oracle always catches in time
        done |= res.terminated
    assert done.all()
    mc = length.reshape(4, reps).mean(1).double()
    assert torch.allclose(mc, sol5.expected_steps_at(starts), atol=0.25)


# ------------------------------------------------------------------ API bits
def test_solve_argument_validation():
    with pytest.raises(ValueError, match="got"):
        solve(2)
    with pytest.raises(ValueError, match="got"):
        solve(4, tol=0.0)
    with pytest.raises(ValueError, match="got"):
        solve(4, max_iters=0)
    with pytest.raises(RuntimeError, match="converge"):
        solve(4, max_iters=1)


def test_position_validation(sol5):
    with pytest.raises(ValueError, match="shape"):
        sol5.act(torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="grid"):
        sol5.expected_steps_at(torch.tensor([[[0, 0], [0, 5], [2, 2]]]))
    with pytest.raises(ValueError, match="horizon"):
        capture_within(sol5, valid_starts(5)[:2], horizon=-1)


def test_summary_and_main(capsys):
    result = summary(4)
    assert set(result) == {"grid", "num_starts", "mean_expected_steps", "capture_within_10", "solve_seconds"}
    assert result["grid"] == 4 and result["num_starts"] == valid_starts(4).shape[0] == 24
    assert result["mean_expected_steps"] >= 2.0
    assert 0.0 <= result["capture_within_10"] <= 1.0
    assert main(["--grid", "4"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["grid"] == 4 and printed["num_starts"] == 24


def _positions_of(graphs, n: int) -> torch.Tensor:
    """(spider 0, spider 1, fly) positions back from the task's node features."""
    x = torch.cat([graphs["spider"].x.view(-1, 2, 5), graphs["fly"].x.view(-1, 1, 5)], 1)
    return (x[..., 3:] * (n - 1)).round().long()


def test_exact_task_evaluation_of_oracle_and_of_a_worse_policy(sol5):
    from acegnn.envs.spiders_fly import SpidersFlyTask

    task = SpidersFlyTask(5)
    oracle_act = lambda g: sol5.act(_positions_of(g, 5)).view(-1)  # noqa: E731
    table = task.policy_table(oracle_act)
    c = torch.arange(25)
    live = (c[:, None, None] != c[None, None, :]) & (c[None, :, None] != c[None, None, :])
    assert torch.equal(table[live], sol5.policy[live])
    exact = task.exact_evaluate(oracle_act)
    assert exact.exact_steps_gap == 0.0 and exact.exact_worst_success == 1.0
    assert exact.succeeded
    assert abs(exact.exact_mean_steps - 5.5358) < 1e-3

    def lazy(g):  # spider 1 never moves: a worse policy with a positive gap
        a = sol5.act(_positions_of(g, 5))
        a[:, 1] = 0
        return a.view(-1)

    exact = task.exact_evaluate(lazy)
    sampled = task.evaluate(lazy, episodes=4096, seed=3)
    assert exact.exact_steps_gap > 1.0
    # the sampled mean is an unbiased estimate of the exact one (std of the mean < 0.1)
    assert abs(sampled.mean_steps - exact.exact_mean_steps) < 0.3
    assert abs(sampled.success_rate - exact.exact_success_rate) < 0.05


# ------------------------------------------- gap anatomy: regret, visits, discounted values
def _perturbed(sol, frac: float, seed: int = 0) -> torch.Tensor:
    """The oracle policy with a random allowed joint action at ``frac`` of the states."""
    q = optimal_steps_q(sol)
    g = torch.Generator().manual_seed(seed)
    noisy = (q + 3 * torch.rand(q.shape, generator=g, dtype=q.dtype)).argmin(0)
    policy = sol.policy.clone()
    swap = torch.rand(policy.shape, generator=g) < frac
    policy[swap] = noisy[swap]
    return policy


def test_optimal_steps_q_matches_brute_force_3x3():
    n = 3
    bf = BruteForce(n)
    value = bf.value_iteration()
    q = optimal_steps_q(solve(n))
    for s in bf.states:
        for a0, a1 in itertools.product(range(5), repeat=2):
            w = bf.q(value, s, a0, a1)
            got = float(q[a0 * 5 + a1][index_of(s, n)])
            if w is None:
                assert got == float("inf"), (s, a0, a1)
            else:
                assert abs(got - (0.0 if bf.terminal(s) else 1.0 + w)) < 1e-9, (s, a0, a1)


def test_oracle_has_no_regret(sol5):
    q = optimal_steps_q(sol5)
    taken = q.gather(0, sol5.policy.unsqueeze(0)).squeeze(0)
    assert torch.allclose(taken, sol5.expected_steps, atol=1e-9)
    assert torch.allclose(q.min(0).values, sol5.expected_steps, atol=1e-9)


@pytest.mark.parametrize("gamma", [0.9, 0.99 ** 2])
def test_optimal_discounted_q_matches_brute_force_3x3(gamma):
    n = 3
    bf = BruteForce(n)
    value = {s: 0.0 for s in bf.states}
    while True:  # discounted value iteration, plain Python
        scaled = {s: gamma * v for s, v in value.items()}
        new = {s: 0.0 if bf.terminal(s) else
               max(w for a0 in range(5) for a1 in range(5)
                   if (w := bf.q(scaled, s, a0, a1, caught_value=10.0)) is not None)
               for s in bf.states}
        done = max(abs(new[s] - value[s]) for s in bf.states) < 1e-12
        value = new
        if done:
            break
    scaled = {s: gamma * v for s, v in value.items()}
    q = optimal_discounted_q(n, gamma)
    for s in bf.states:
        for a0, a1 in itertools.product(range(5), repeat=2):
            w = bf.q(scaled, s, a0, a1, caught_value=10.0)
            got = float(q[a0 * 5 + a1][index_of(s, n)])
            if w is None:
                assert got == float("-inf")
            else:
                assert abs(got - (0.0 if bf.terminal(s) else w)) < 1e-8, (s, a0, a1)
    with pytest.raises(ValueError, match="gamma"):
        optimal_discounted_q(n, 1.0)


def test_visitation_matches_brute_force_3x3():
    """Forward propagation of the state distribution, plain Python, from given starts."""
    n = 3
    bf = BruteForce(n)
    policy = _perturbed(solve(n), 0.3)
    starts = torch.tensor([[[0, 0], [2, 2], [1, 1]], [[0, 2], [0, 1], [2, 0]]])
    dist = {}
    for st in starts.tolist():
        s = tuple(tuple(p) for p in st)
        dist[s] = dist.get(s, 0.0) + 0.5
    ref = {}
    for _ in range(6):
        nxt = {}
        for s, p in dist.items():
            if bf.terminal(s):
                continue
            ref[s] = ref.get(s, 0.0) + p
            j = int(policy[index_of(s, n)])
            n0, n1 = bf.step_spider(s[0], j // 5), bf.step_spider(s[1], j % 5)
            if n0 == s[2] or n1 == s[2]:
                continue
            for f, q in bf.fly_dist(n0, n1, s[2]):
                nxt[(n0, n1, f)] = nxt.get((n0, n1, f), 0.0) + p * q
        dist = nxt
    d = visitation(n, policy, 6, starts)
    assert abs(float(d.sum()) - sum(ref.values())) < 1e-12
    for s in bf.states:
        assert abs(float(d[index_of(s, n)]) - ref.get(s, 0.0)) < 1e-12, s


def test_visitation_splits_the_steps_gap(sol5):
    """Performance difference: visits x regret = gap + the oracle's value left at the horizon."""
    n, horizon = 5, 30
    policy = _perturbed(sol5, 0.1)
    starts = valid_starts(n)
    s = starts[..., 0] * n + starts[..., 1]
    d = visitation(n, policy, horizon)
    steps = policy_steps(n, policy, horizon)[s[:, 0], s[:, 1], s[:, 2]].mean()
    assert abs(float(d.sum()) - float(steps)) < 1e-9
    gap = steps - sol5.expected_steps[s[:, 0], s[:, 1], s[:, 2]].mean()
    regret = optimal_steps_q(sol5).gather(0, policy.unsqueeze(0)).squeeze(0) - sol5.expected_steps
    at_horizon = visitation(n, policy, horizon + 1) - d
    tail = (at_horizon * sol5.expected_steps).sum()
    assert float(gap) > 0.1  # the perturbation costs steps ...
    assert abs(float((d * regret).sum()) - float(gap + tail)) < 1e-9  # ... and this is where


def test_gap_anatomy_of_the_oracle_and_of_a_perturbed_policy(sol5):
    n, horizon = 5, 200
    out, visited = gap_anatomy(sol5, sol5.policy, horizon)
    assert abs(out["gap_from_regret"]) < 1e-9 and out["regret_over_0_states"] == 0
    assert out["uncaught_at_horizon"] < 1e-12 and out["live_states"] == 25 * 24 * 24
    assert bool(policy_regret(sol5, sol5.policy).abs().max() < 1e-9)

    policy = _perturbed(sol5, 0.1)
    out, visited = gap_anatomy(sol5, policy, horizon)
    regret, visits = policy_regret(sol5, policy), visitation(n, policy, horizon)
    assert bool((regret > -1e-9).all())  # no action beats the oracle
    assert torch.equal(visited, (visits > 1e-12) & live_of(n))
    assert out["visited_states"] == int(visited.sum()) > 0
    assert out["gap_from_regret"] == float((visits * regret).sum())
    assert abs(out["regret_over_0_gap"] - out["gap_from_regret"]) < 1e-9
    assert 0 < out["regret_over_0.5_states"] <= out["regret_over_0_states"]
    # the untruncated steps gap, as the perturbed policy always catches the fly by then
    s = valid_starts(n)
    s = s[..., 0] * n + s[..., 1]
    at = lambda t: t[s[:, 0], s[:, 1], s[:, 2]]  # noqa: E731
    gap = at(policy_steps(n, policy, horizon)).mean() - at(sol5.expected_steps).mean()
    assert out["uncaught_at_horizon"] < 1e-9
    assert abs(out["gap_from_regret"] - float(gap)) < 1e-6


def live_of(n: int) -> torch.Tensor:
    c = torch.arange(n * n)
    return (c[:, None, None] != c[None, None, :]) & (c[None, :, None] != c[None, None, :])

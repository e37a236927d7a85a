"""Tests for the rules of Spiders-and-Fly, the vectorised environment and the task."""

from __future__ import annotations

import dataclasses
import importlib
import itertools

import pytest
import torch

from reference import config_leaves

from acegnn.envs import ENVS, EvalResult, ExactEvaluation, VecTask
from acegnn.envs.spiders_fly import (
    ACTION_NAMES,
    MOVES,
    SpidersFlyConfig,
    SpidersFlyEnv,
    SpidersFlyEval,
    SpidersFlyExactEval,
    SpidersFlyTask,
    StepResult,
    action_mask_for,
    cell_coords,
    cell_index,
    grid_rules,
    live_states,
    valid_starts,
)
from acegnn.envs.spiders_fly import _model, env as env_module, rules

STAY, UP, DOWN, LEFT, RIGHT = range(5)


def manhattan(a, b) -> int:
    return abs(int(a[0]) - int(b[0])) + abs(int(a[1]) - int(b[1]))


def fly_options(spiders, fly, n: int) -> list[tuple[int, int]]:
    """Plain-Python fly rule: in-grid 4-neighbours at distance > 1 from both spiders."""
    out = []
    for dr, dc in [(-1, 0), (1, 0), (0, -1), (0, 1)]:
        cell = (int(fly[0]) + dr, int(fly[1]) + dc)
        if 0 <= cell[0] < n and 0 <= cell[1] < n and all(manhattan(cell, s) > 1 for s in spiders):
            out.append(cell)
    return out


def make_env(positions, grid_size: int = 5, **kwargs) -> SpidersFlyEnv:
    positions = torch.as_tensor(positions, dtype=torch.long)
    if positions.dim() == 2:
        positions = positions.unsqueeze(0)
    env = SpidersFlyEnv(grid_size=grid_size, num_envs=positions.shape[0], **kwargs)
    env.set_state(positions)
    return env


def random_valid_actions(mask: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    e = mask.shape[0]
    return torch.multinomial(mask.reshape(-1, 5).float(), 1, generator=gen).reshape(e, 2)


# --------------------------------------------------------------------------- basics
def test_constants_and_attributes():
    assert ACTION_NAMES == ("stay", "up", "down", "left", "right")
    assert MOVES.dtype == torch.long and MOVES.shape == (5, 2)
    assert MOVES.tolist() == [[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]]
    env = SpidersFlyEnv(grid_size=5, num_envs=3, seed=1)
    assert env.n_agents == 2 and env.n_actions == 5
    assert env.time_limit == 20  # default 4 * N
    assert SpidersFlyEnv(grid_size=7, num_envs=1).time_limit == 28
    assert SpidersFlyEnv(grid_size=5, num_envs=1, time_limit=7).time_limit == 7
    assert env.positions.shape == (3, 3, 2) and env.positions.dtype == torch.long
    assert env.t.tolist() == [0, 0, 0]
    assert env.action_mask().shape == (3, 2, 5) and env.action_mask().dtype == torch.bool


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(grid_size=2),
        dict(grid_size=5.0),
        dict(num_envs=0),
        dict(time_limit=0),
        dict(grid_size=3),  # no valid starts under the default rule
    ],
)
def test_bad_constructor_args(kwargs):
    with pytest.raises(ValueError, match="got"):
        SpidersFlyEnv(**kwargs)


def test_cell_index_roundtrip():
    pos = torch.tensor([[0, 0], [2, 3], [4, 4]])
    idx = cell_index(pos, 5)
    assert idx.tolist() == [0, 13, 24]
    assert torch.equal(cell_coords(idx, 5), pos)


def test_step_result_shapes():
    env = SpidersFlyEnv(grid_size=5, num_envs=4, seed=0)
    res = env.step(torch.zeros(4, 2, dtype=torch.long))
    assert isinstance(res, StepResult)
    assert res.reward.shape == (4,) and res.reward.dtype == torch.float32
    assert res.terminated.dtype == torch.bool and res.truncated.dtype == torch.bool
    assert res.next_positions.shape == (4, 3, 2) and res.next_positions.dtype == torch.long
    assert res.next_action_mask.shape == (4, 2, 5) and res.next_action_mask.dtype == torch.bool


# ---------------------------------------------------------------------------- masks
def test_masks_corners_edges_center():
    positions = torch.tensor(
        [
            [[0, 0], [4, 4], [2, 2]],  # top-left / bottom-right corners
            [[0, 4], [4, 0], [2, 2]],  # top-right / bottom-left corners
            [[0, 2], [2, 0], [4, 4]],  # top edge / left edge
            [[4, 2], [2, 4], [0, 0]],  # bottom edge / right edge
            [[2, 2], [1, 3], [4, 0]],  # interior
        ]
    )
    env = make_env(positions)
    T, F = True, False
    expected = [
        [[T, F, T, F, T], [T, T, F, T, F]],
        [[T, F, T, T, F], [T, T, F, F, T]],
        [[T, F, T, T, T], [T, T, T, F, T]],
        [[T, T, F, T, T], [T, T, T, T, F]],
        [[T, T, T, T, T], [T, T, T, T, T]],
    ]
    assert env.action_mask().tolist() == expected
    assert action_mask_for(positions, 5).tolist() == expected


def test_next_action_mask_matches_next_positions():
    env = SpidersFlyEnv(grid_size=5, num_envs=64, seed=3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(30):
        res = env.step(random_valid_actions(env.action_mask(), gen))
        assert torch.equal(res.next_action_mask, action_mask_for(res.next_positions, 5))
        assert torch.equal(env.action_mask(), action_mask_for(env.positions, 5))


# ------------------------------------------------------------------ invalid actions
def test_invalid_actions_raise():
    env = make_env([[[0, 0], [4, 4], [2, 2]], [[1, 1], [3, 3], [2, 0]]])
    before = env.positions.clone()
    with pytest.raises(ValueError, match=r"env 1, agent 0.*got 5"):
        env.step(torch.tensor([[0, 0], [5, 0]]))
    with pytest.raises(ValueError, match=r"env 0, agent 1.*got -1"):
        env.step(torch.tensor([[0, -1], [0, 0]]))
    with pytest.raises(ValueError, match=r"env 0, agent 0.*'up'.*got 1"):
        env.step(torch.tensor([[UP, 0], [0, 0]]))
    with pytest.raises(ValueError, match=r"env 0, agent 1.*'right'.*got 4"):
        env.step(torch.tensor([[DOWN, RIGHT], [0, 0]]))
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        env.step(torch.zeros(2, 2))
    # A rejected step does not change the state.
    assert torch.equal(env.positions, before)
    assert env.t.tolist() == [0, 0]


def test_set_state_validation():
    env = SpidersFlyEnv(grid_size=5, num_envs=1)
    with pytest.raises(ValueError, match="shape"):
        env.set_state(torch.zeros(2, 3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="grid"):
        env.set_state(torch.tensor([[[0, 0], [5, 1], [2, 2]]]))
    with pytest.raises(ValueError, match="already on the fly"):
        env.set_state(torch.tensor([[[2, 2], [0, 1], [2, 2]]]))
    with pytest.raises(ValueError, match="t must"):
        env.set_state(torch.tensor([[[0, 0], [4, 4], [2, 2]]]), t=torch.tensor([20]))
    env.set_state(torch.tensor([[[0, 0], [4, 4], [2, 2]]]), t=torch.tensor([5]))
    assert env.positions.tolist() == [[[0, 0], [4, 4], [2, 2]]]
    assert env.t.tolist() == [5]


# -------------------------------------------------------------------------- capture
def test_capture_rewards_and_terminates():
    positions = torch.tensor(
        [
            [[2, 2], [0, 0], [2, 3]],  # spider 0 moves right onto the fly
            [[0, 0], [3, 3], [4, 3]],  # spider 1 moves down onto the fly
            [[1, 2], [3, 2], [2, 2]],  # both land on the fly
            [[0, 0], [4, 4], [2, 2]],  # no capture
        ]
    )
    env = make_env(positions)
    actions = torch.tensor([[RIGHT, STAY], [STAY, DOWN], [DOWN, UP], [STAY, STAY]])
    res = env.step(actions)
    assert res.reward.tolist() == [10.0, 10.0, 10.0, 0.0]
    assert res.terminated.tolist() == [True, True, True, False]
    assert res.truncated.tolist() == [False, False, False, False]
    # True next state: spiders moved, caught fly did not move.
    assert res.next_positions[0].tolist() == [[2, 3], [0, 0], [2, 3]]
    assert res.next_positions[1].tolist() == [[0, 0], [4, 3], [4, 3]]
    assert res.next_positions[2].tolist() == [[2, 2], [2, 2], [2, 2]]
    # Finished envs were auto-reset to valid starts, the other one was not.
    starts = {tuple(map(tuple, s.tolist())) for s in valid_starts(5)}
    for e in range(3):
        assert tuple(map(tuple, env.positions[e].tolist())) in starts
    assert torch.equal(env.positions[3], res.next_positions[3])
    assert env.t.tolist() == [0, 0, 0, 1]


def test_no_capture_when_fly_only_adjacent_after_move():
    # The spider moves next to (not onto) the fly: no reward; the fly flees.
    env = make_env([[[2, 0], [4, 4], [2, 2]]])
    res = env.step(torch.tensor([[RIGHT, STAY]]))
    assert res.reward.tolist() == [0.0] and not res.terminated.item()
    fly = res.next_positions[0, 2]
    assert manhattan(fly, (2, 1)) > 1 and manhattan(fly, (4, 4)) > 1


# ----------------------------------------------------------------------- fly rule
def test_fly_rule_on_random_rollouts():
    """Every fly move follows the rule exactly (checked against plain Python)."""
    n = 5
    env = SpidersFlyEnv(grid_size=n, num_envs=128, seed=11)
    gen = torch.Generator().manual_seed(5)
    checked_moves = checked_stays = 0
    for _ in range(60):
        before = env.positions.clone()
        actions = random_valid_actions(env.action_mask(), gen)
        res = env.step(actions)
        spiders = before[:, :2] + MOVES[actions]
        assert torch.equal(res.next_positions[:, :2], spiders)
        for e in range(env.num_envs):
            fly, new_fly = before[e, 2].tolist(), res.next_positions[e, 2].tolist()
            caught = any(s.tolist() == fly for s in spiders[e])
            assert res.terminated[e].item() == caught
            if caught:
                assert new_fly == fly
                continue
            options = fly_options(spiders[e].tolist(), fly, n)
            if options:
                assert tuple(new_fly) in options
                for s in spiders[e].tolist():
                    assert manhattan(new_fly, s) > 1  # never onto / next to a spider
                checked_moves += 1
            else:
                assert new_fly == fly
                checked_stays += 1
    assert checked_moves > 1000 and checked_stays > 0


def test_fly_stays_when_cornered():
    # Fly in the corner, both neighbours adjacent to a spider (after the spiders' move).
    env = make_env([[[0, 2], [2, 0], [0, 0]]] * 50, seed=4)
    for _ in range(5):
        res = env.step(torch.zeros(50, 2, dtype=torch.long))
        assert (res.next_positions[:, 2] == torch.tensor([0, 0])).all()
        assert not res.terminated.any()
    # Spiders moving in to block: (0, 1) and (1, 0) are spider cells -> fly stays.
    env = make_env([[[0, 2], [2, 0], [0, 0]]] * 50, seed=4)
    res = env.step(torch.tensor([[LEFT, UP]] * 50))
    assert (res.next_positions[:, 2] == torch.tensor([0, 0])).all()
    assert res.reward.sum() == 0
    # Next step the spider catches it.
    res = env.step(torch.tensor([[LEFT, STAY]] * 50))
    assert res.terminated.all() and (res.reward == 10).all()


def test_fly_uses_new_spider_positions():
    # Before the move (0, 3) is far from spider (2, 3); after the spider moves up to
    # (1, 3) the cell (0, 3) is adjacent, and (1, 4) too; the fly at (0, 4) must stay.
    env = make_env([[[2, 3], [4, 0], [0, 4]]] * 20)
    res = env.step(torch.tensor([[UP, STAY]] * 20))
    assert (res.next_positions[:, 2] == torch.tensor([0, 4])).all()


@pytest.mark.parametrize(
    "spiders, expected_cells",
    [
        ([[0, 0], [4, 4]], [(1, 2), (3, 2), (2, 1), (2, 3)]),  # 4 valid cells
        ([[0, 2], [4, 4]], [(3, 2), (2, 1), (2, 3)]),  # (1, 2) next to spider 0
        ([[0, 2], [4, 2]], [(2, 1), (2, 3)]),  # 2 valid cells
    ],
)
def test_fly_move_is_uniform(spiders, expected_cells):
    num = 6000
    positions = torch.tensor([spiders + [[2, 2]]] * num)
    env = make_env(positions, seed=123)
    res = env.step(torch.zeros(num, 2, dtype=torch.long))
    flies = [tuple(p) for p in res.next_positions[:, 2].tolist()]
    assert set(flies) == set(expected_cells)
    for cell in expected_cells:
        frac = flies.count(cell) / num
        assert abs(frac - 1 / len(expected_cells)) < 0.03, (cell, frac)


# ---------------------------------------------------------------------- truncation
def test_truncation_at_time_limit():
    env = make_env([[[0, 0], [0, 1], [4, 4]]] * 2, time_limit=3, seed=2)
    zeros = torch.zeros(2, 2, dtype=torch.long)
    for step in range(1, 4):
        pre = env.positions.clone()
        res = env.step(zeros)
        assert not res.terminated.any()
        assert res.reward.sum() == 0
        if step < 3:
            assert not res.truncated.any()
            assert env.t.tolist() == [step, step]
        else:
            assert res.truncated.all()
            assert env.t.tolist() == [0, 0]
            assert torch.equal(res.next_positions[:, :2], pre[:, :2])  # pre-reset state
            starts = valid_starts(5)
            for e in range(2):
                assert (starts == env.positions[e]).all(-1).all(-1).any()


def test_capture_on_last_step_is_terminated_not_truncated():
    env = make_env([[[2, 2], [0, 0], [2, 3]], [[0, 0], [0, 1], [4, 4]]], time_limit=5)
    env.set_state(env.positions, t=torch.tensor([4, 4]))
    res = env.step(torch.tensor([[RIGHT, STAY], [STAY, STAY]]))
    assert res.terminated.tolist() == [True, False]
    assert res.truncated.tolist() == [False, True]
    assert env.t.tolist() == [0, 0]


def test_default_time_limit_truncates_episode():
    env = make_env([[[0, 0], [0, 1], [4, 4]]])
    zero = torch.zeros(1, 2, dtype=torch.long)
    flags = [bool(env.step(zero).truncated) for _ in range(20)]
    assert flags == [False] * 19 + [True]


# -------------------------------------------------------------------------- starts
@pytest.mark.parametrize("n", [4, 5, 7])
def test_valid_starts_rule_and_completeness(n):
    starts = valid_starts(n)
    assert starts.dtype == torch.long and starts.dim() == 3 and starts.shape[1:] == (3, 2)
    cells = list(itertools.product(range(n), range(n)))
    expected = {
        (s0, s1, f)
        for s0 in cells
        for s1 in cells
        for f in cells
        if s0 != s1 and manhattan(s0, f) > 4 and manhattan(s1, f) > 4
    }
    got = [tuple(map(tuple, s.tolist())) for s in starts]
    assert len(got) == len(set(got)) == len(expected)
    assert set(got) == expected


def test_starts_small_grids_and_relaxed_rule():
    assert valid_starts(3).shape == (0, 3, 2)
    env = SpidersFlyEnv(grid_size=3, num_envs=16, start_distance=2, seed=0)
    p = env.positions
    assert ((p[:, 0] - p[:, 2]).abs().sum(-1) > 2).all()
    assert ((p[:, 1] - p[:, 2]).abs().sum(-1) > 2).all()
    assert (p[:, 0] != p[:, 1]).any(-1).all()


def test_reset_and_auto_reset_sample_valid_starts():
    env = SpidersFlyEnv(grid_size=5, num_envs=256, seed=9, time_limit=2)

    def check(p):
        d0 = (p[:, 0] - p[:, 2]).abs().sum(-1)
        d1 = (p[:, 1] - p[:, 2]).abs().sum(-1)
        assert (d0 > 4).all() and (d1 > 4).all()
        assert (p[:, 0] != p[:, 1]).any(-1).all()

    check(env.positions)
    env.reset()
    check(env.positions)
    gen = torch.Generator().manual_seed(1)
    seen = set()
    for _ in range(20):
        res = env.step(random_valid_actions(env.action_mask(), gen))
        done = res.terminated | res.truncated
        check(env.positions[done])
        seen.update(tuple(map(tuple, s.tolist())) for s in env.positions[done])
    assert len(seen) > 100  # many distinct starts are drawn
    s = env.sample_starts(10, torch.Generator().manual_seed(0))
    assert s.shape == (10, 3, 2)
    check(s)


# --------------------------------------------------------------------- determinism
def _trajectory(seed: int, steps: int = 50):
    env = SpidersFlyEnv(grid_size=5, num_envs=32, seed=seed, time_limit=8)
    gen = torch.Generator().manual_seed(0)
    out = [env.positions.clone()]
    for _ in range(steps):
        res = env.step(random_valid_actions(env.action_mask(), gen))
        out += [res.next_positions, res.reward, res.terminated, res.truncated, env.positions.clone()]
    return out


def test_determinism():
    a, b, c = _trajectory(7), _trajectory(7), _trajectory(8)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))


def test_reset_is_deterministic_given_seed():
    e1 = SpidersFlyEnv(grid_size=7, num_envs=16, seed=42)
    e2 = SpidersFlyEnv(grid_size=7, num_envs=16, seed=42)
    assert torch.equal(e1.positions, e2.positions)
    e1.reset()
    e2.reset()
    assert torch.equal(e1.positions, e2.positions)


# --------------------------------------------------------------------------- rules
@pytest.mark.parametrize("n", [3, 4, 5])
def test_rule_tables_match_plain_python(n):
    tab = grid_rules(n)
    cells = list(itertools.product(range(n), range(n)))
    assert tab.coords.tolist() == [list(c) for c in cells]
    for i, p in enumerate(cells):
        for a, (dr, dc) in enumerate(MOVES.tolist()):
            q = (p[0] + dr, p[1] + dc)
            inside = 0 <= q[0] < n and 0 <= q[1] < n
            assert bool(tab.action_mask[i, a]) == inside
            assert int(tab.move[i, a]) == (q[0] * n + q[1] if inside else -1)
    # the fly's directions for two spiders (after their move) are the plain rule
    for s0, s1, f in itertools.product(range(n * n), repeat=3):
        directions = tab.fly_directions(torch.tensor(s0), torch.tensor(s1), torch.tensor(f))
        expected = fly_options([cells[s0], cells[s1]], cells[f], n)
        got = [tuple(cells[int(tab.fly_dest[f, d])]) for d in range(4) if directions[d]]
        assert got == expected, (s0, s1, f)
    assert torch.equal(action_mask_for(valid_starts(n, 1), n),
                       tab.action_mask[cell_index(valid_starts(n, 1)[:, :2], n)])


def test_capture_reward_and_fly_move_rules():
    assert rules.captured(torch.tensor([[3, 5], [5, 5], [4, 6]]), torch.tensor([5, 5, 5])).tolist() == [
        True, True, False]
    assert rules.catch_reward(torch.tensor([True, False])).tolist() == [10.0, 0.0]
    none, two = torch.tensor([False] * 4), torch.tensor([True, False, False, True])
    assert rules.fly_moves(none).tolist() == [False] * 4 + [True]  # stays when cornered
    assert rules.fly_moves(two).tolist() == [True, False, False, True, False]
    assert rules.fly_move_probs(two).tolist() == [0.5, 0.0, 0.0, 0.5, 0.0]
    assert rules.FLY_ACTIONS[rules.FLY_STAY] == ACTION_NAMES.index("stay")
    live = live_states(4)
    assert int(live.sum()) == 16 * 15 * 15  # no spider on the fly
    assert rules.default_time_limit(7) == 28
    with pytest.raises(ValueError, match="got 2"):
        grid_rules(2)


def test_fly_sampler_realises_the_rule_probabilities_exactly():
    """The env draws j uniform in [0, 12) per fly move: the share of draws that lead to
    each move must be the rules' probability, for every pattern of valid directions."""
    choice = env_module._CHOICE.view(16, 12)
    for pattern in range(16):
        directions = torch.tensor([bool(pattern >> d & 1) for d in range(4)])
        share = torch.bincount(choice[pattern], minlength=5).double() / 12
        assert torch.equal(share, rules.fly_move_probs(directions)), pattern


@pytest.fixture
def fresh_rule_tables():
    """Clear the per-grid caches before and after a test that changes a rule."""
    rules.grid_rules.cache_clear()
    _model.grid_model.cache_clear()
    yield
    rules.grid_rules.cache_clear()
    _model.grid_model.cache_clear()


@pytest.mark.parametrize("flee", [0, 1, 2])
def test_env_and_oracle_read_one_rule_table(monkeypatch, fresh_rule_tables, flee):
    """Change nothing but the fly's rule: the sampling env and the oracle's model in
    expectation both follow it, so each fly move the env makes has the oracle's support."""
    n, reps = 4, 96
    default = grid_rules(n).fly_free.clone()
    monkeypatch.setattr(rules, "FLEE_DISTANCE", flee)
    rules.grid_rules.cache_clear()
    assert torch.equal(grid_rules(n).fly_free, default) == (flee == 1)
    model = _model.grid_model(n)
    c = n * n
    states = live_states(n).nonzero()  # [S, 3] flat cells (spider 0, spider 1, fly)
    env = SpidersFlyEnv(grid_size=n, num_envs=states.shape[0] * reps, seed=1)
    env.set_state(cell_coords(states.repeat_interleave(reps, dim=0), n))
    res = env.step(torch.zeros(env.num_envs, 2, dtype=torch.long))  # spiders stay: no capture
    assert not res.terminated.any()
    fly = cell_index(res.next_positions[:, 2], n).view(-1, reps)  # [S, reps]
    seen = torch.zeros(states.shape[0], c, dtype=torch.bool)
    seen.scatter_(1, fly, True)
    s0, s1, f = states.unbind(1)
    prob = torch.zeros(states.shape[0], c, dtype=torch.float64)
    prob.scatter_add_(1, torch.from_numpy(model.fly_next[f.numpy()]),
                      torch.from_numpy(model.fly_prob[s0.numpy(), s1.numpy(), f.numpy()]))
    prob[torch.arange(states.shape[0]), f] += torch.from_numpy(
        model.fly_stays[s0.numpy(), s1.numpy(), f.numpy()]).double()
    assert torch.equal(seen, prob > 0)
    share = torch.zeros(states.shape[0], c, dtype=torch.float64).scatter_add_(
        1, fly, torch.ones(fly.shape, dtype=torch.float64)) / reps
    assert (share - prob).abs().max() < 0.25  # and roughly its frequencies


# ---------------------------------------------------------------------------- task
def test_task_contract_and_registry():
    assert ENVS.get("spiders_fly") is SpidersFlyConfig
    task = SpidersFlyConfig(grid_size=5, num_envs=4).make(3)
    assert isinstance(task, SpidersFlyTask) and isinstance(task, VecTask)
    assert isinstance(task, ExactEvaluation)
    assert str(task) == "SpidersFlyTask(grid_size=5, num_envs=4)"
    assert [f.name for f in dataclasses.fields(SpidersFlyEval)] == [
        "success_rate", "mean_steps", "oracle_steps", "steps_gap"]
    assert (SpidersFlyEval.success_metric, SpidersFlyEval.success_threshold,
            SpidersFlyEval.headline) == ("success_rate", 1.0, ("success_rate", "steps_gap"))
    assert [f.name for f in dataclasses.fields(SpidersFlyExactEval)] == [
        "exact_success_rate", "exact_worst_success", "exact_mean_steps", "exact_oracle_steps",
        "exact_steps_gap"]
    assert (SpidersFlyExactEval.success_metric, SpidersFlyExactEval.headline) == (
        "exact_worst_success", ("exact_steps_gap",))
    stay = lambda g: torch.zeros(g.num_graphs * 2, dtype=torch.long)  # noqa: E731
    result = task.evaluate(stay, episodes=8, seed=0)
    assert isinstance(result, SpidersFlyEval) and isinstance(result, EvalResult)
    assert result.success_rate == 0.0 and result.mean_steps == 20.0 and not result.succeeded
    assert list(result.metrics()) == ["success_rate", "mean_steps", "oracle_steps", "steps_gap"]
    assert result.steps_gap == result.mean_steps - result.oracle_steps
    assert task.evaluate(stay, episodes=8, seed=0) == result  # same seed, same episodes


def test_task_snapshot_continues_the_same_episodes():
    task, gen = SpidersFlyTask(5, num_envs=6, seed=2), torch.Generator().manual_seed(0)
    for _ in range(7):
        task.step(random_valid_actions(task.env.action_mask(), gen))
    snap = task.state_dict()
    twin = SpidersFlyTask(5, num_envs=6, seed=99)
    twin.load_state_dict(snap)
    for _ in range(30):
        actions = random_valid_actions(task.env.action_mask(), gen)
        a, b = task.step(actions), twin.step(actions)
        assert torch.equal(a.next_obs["positions"], b.next_obs["positions"])
        assert torch.equal(a.reward, b.reward) and torch.equal(a.truncated, b.truncated)


def test_package_exports_every_public_name():
    import acegnn.envs.spiders_fly as package

    for name in package.__all__:
        homes = [m for m in package._SUBMODULES
                 if name in importlib.import_module(f"acegnn.envs.spiders_fly.{m}").__all__]
        assert homes, name
        module = importlib.import_module(f"acegnn.envs.spiders_fly.{homes[0]}")
        assert getattr(package, name) is getattr(module, name), name
    with pytest.raises(AttributeError, match="no attribute"):
        package.not_a_name


# The paper's Appendix table "Hyper-parameter Settings of ACE and baselines on Spiders and
# Fly" and its Method section's architecture, written out by hand from the paper.
PAPER_TABLE = {
    "env.num_envs": 8, "train.samples_per_collect": 1024, "train.buffer_size": 1_000_000,
    "train.updates_per_collect": 10, "train.batch_size": 256, "algo.weight_decay": 0.0,
    "algo.lr": 0.0005, "algo.target_theta": 0.02, "algo.gamma": 0.99, "algo.optimizer": "adam",
    "model.hidden": 128, "train.eps_start": 1.0, "train.eps_end": 0.05, "train.eps_decay": 150_000,
    "model.layers": 1, "algo.nstep": 1, "algo.target": "eq1", "algo.aux_weight": 0.0,
    "algo.double_q": False, "algo.intermediate_discount": True, "model.conv": "ace",
    "model.passive": True, "env.features": "scalar",
}
# What the tuned configs' headers say they change, with the paper's value beside.
TUNED = {"model.layers": 3, "model.init": "he", "algo.target_theta": 0.05, "train.updates_per_collect": 40}


def _get(cfg, dotted):
    section, key = dotted.split(".")
    return getattr(getattr(cfg, section), key)




@pytest.mark.parametrize("grid", [5, 7])
def test_the_paper_configs_hold_the_appendix_table(grid):
    from acegnn.config import load_config

    cfg = load_config(f"configs/spiders_fly_{grid}x{grid}_paper.yaml")
    assert cfg.env.grid_size == grid and cfg.algo.name == "ace_dqn"
    for key, value in PAPER_TABLE.items():
        assert _get(cfg, key) == value, key


@pytest.mark.parametrize("grid", [5, 7])
def test_the_tuned_configs_depart_from_the_paper_in_the_keys_their_headers_list(grid):
    """Every leaf of the tuned config equals the _paper config's except the four keys of
    its header; the budget is the benchmark's in both."""
    from acegnn.config import load_config

    paper = config_leaves(load_config(f"configs/spiders_fly_{grid}x{grid}_paper.yaml"))
    tuned = config_leaves(load_config(f"configs/spiders_fly_{grid}x{grid}.yaml"))
    differ = {k: tuned[k] for k in tuned if tuned[k] != paper[k]}
    assert differ == TUNED
    header = open(f"configs/spiders_fly_{grid}x{grid}.yaml").read().split("\nbase:")[0]
    for key in TUNED:
        assert key in header, key


def test_the_official_options_config_is_the_tuned_one_plus_the_official_choices():
    from acegnn.config import load_config

    tuned = config_leaves(load_config("configs/spiders_fly_5x5.yaml"))
    official = config_leaves(load_config("configs/spiders_fly_5x5_official.yaml"))
    differ = {k: official[k] for k in official if official[k] != tuned[k]}
    assert differ == {"algo.target": "last_agent", "algo.double_q": True, "algo.nstep": 3,
                      "model.pool": "mean_max", "algo.aux_weight": 10.0}

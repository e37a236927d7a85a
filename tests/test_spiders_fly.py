"""Tests for the vectorised Spiders-and-Fly environment."""

from __future__ import annotations

import itertools

import pytest
import torch

from acegnn.envs.spiders_fly import (
    ACTION_NAMES,
    MOVES,
    SpidersFlyEnv,
    StepResult,
    action_mask_for,
    cell_coords,
    cell_index,
    valid_starts,
)

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

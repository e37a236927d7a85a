"""Eq. 1 targets against hand computations, and the learner's update."""
import pytest
import torch

from acegnn.algos.ace_dqn import ACEDQN, ACEDQNConfig
from acegnn.envs.spiders_fly import spiders_fly_graphs, spiders_fly_schema
from acegnn.nn import ModelConfig

import reference as R

GRID = 5
# (spider0, spider1, fly) positions of two states and their successors
S = torch.tensor([[[0, 0], [4, 4], [2, 2]], [[1, 0], [0, 3], [4, 2]]])
S_NEXT = torch.tensor([[[1, 2], [4, 4], [2, 2]], [[1, 1], [0, 2], [4, 1]]])
ACTIONS = torch.tensor([2, 0, 4, 3])  # [down, stay], [right, left]: agents graph-major
REWARD = torch.tensor([10.0, 0.0])
TERMINATED = torch.tensor([True, False])


def learner(**algo):
    torch.manual_seed(0)
    return ACEDQN(spiders_fly_schema(), ACEDQNConfig(**algo), ModelConfig(hidden=16))


def constant_target(lrn, c):
    """Make the target network's V the constant c."""
    out = lrn.target_net.value_head.out[-1]
    with torch.no_grad():
        out.weight.zero_()
        out.bias.fill_(c)


def test_targets_by_hand_with_constant_value():
    lrn = learner(gamma=0.9)
    constant_target(lrn, 2.0)
    td = lrn.td_targets(spiders_fly_graphs(S, GRID), ACTIONS, REWARD, TERMINATED,
                        spiders_fly_graphs(S_NEXT, GRID))
    # agent 0: gamma * 2; agent 1 (last): r + gamma * (1 - d) * 2
    assert torch.allclose(td.target, torch.tensor([1.8, 10.0, 1.8, 0.0 + 0.9 * 2.0]))
    lrn = learner(gamma=0.9, intermediate_discount=False)
    constant_target(lrn, 2.0)
    td = lrn.td_targets(spiders_fly_graphs(S, GRID), ACTIONS, REWARD, TERMINATED,
                        spiders_fly_graphs(S_NEXT, GRID))
    assert torch.allclose(td.target, torch.tensor([2.0, 10.0, 2.0, 1.8]))


def reference_targets(online, target, gamma, double_q):
    """Eq. 1 from naive per-candidate values of single graphs."""
    out = []
    for b in range(2):
        s = spiders_fly_graphs(S[b:b + 1], GRID)
        s2 = spiders_fly_graphs(S_NEXT[b:b + 1], GRID)
        chosen = ACTIONS[2 * b: 2 * b + 2].tolist()
        t_steps = R.reference_candidates(target, s, [0, 1], chosen)
        t_next = R.reference_candidates(target, s2, [0], [0, 0])[0]
        if double_q:
            o_steps = R.reference_candidates(online, s, [0, 1], chosen)
            o_next = R.reference_candidates(online, s2, [0], [0, 0])[0]
            inner = t_steps[1][max(o_steps[1], key=lambda a: o_steps[1][a])]
            boot = t_next[max(o_next, key=lambda a: o_next[a])]
        else:
            inner = max(t_steps[1].values())
            boot = max(t_next.values())
        out += [gamma * float(inner),
                float(REWARD[b]) + gamma * (0.0 if TERMINATED[b] else 1.0) * float(boot)]
    return torch.tensor(out)


@pytest.mark.parametrize("double_q", [False, True])
def test_targets_match_naive_reference(double_q):
    lrn = learner(gamma=0.97, double_q=double_q)
    for p in lrn.target_net.parameters():  # a target network that differs from the online one
        p.data.add_(0.3 * torch.randn_like(p))
    td = lrn.td_targets(spiders_fly_graphs(S, GRID), ACTIONS, REWARD, TERMINATED,
                        spiders_fly_graphs(S_NEXT, GRID))
    ref = reference_targets(lrn.net, lrn.target_net, 0.97, double_q)
    assert torch.allclose(td.target, ref, atol=1e-5)
    # the online values are those of the replayed SE-states
    for b in range(2):
        s = spiders_fly_graphs(S[b:b + 1], GRID)
        steps = R.reference_candidates(lrn.net, s, [0, 1], ACTIONS[2 * b:2 * b + 2].tolist())
        for i in range(2):
            assert abs(td.value[2 * b + i].item() - float(steps[i][int(ACTIONS[2 * b + i])])) < 1e-5


def test_update_reduces_loss_and_moves_target_by_theta():
    lrn = learner(target_theta=0.5, lr=1e-2)
    g, g2 = spiders_fly_graphs(S, GRID), spiders_fly_graphs(S_NEXT, GRID)
    before = [p.clone() for p in lrn.target_net.parameters()]
    losses = [lrn.update(g, ACTIONS, REWARD, TERMINATED, g2)["td_loss"] for _ in range(30)]
    assert losses[-1] < losses[0]
    lrn2 = learner(target_theta=0.5, lr=1e-2)
    lrn2.update(g, ACTIONS, REWARD, TERMINATED, g2)
    for p0, p, tp in zip(before, lrn2.net.parameters(), lrn2.target_net.parameters()):
        assert torch.allclose(tp, 0.5 * p0 + 0.5 * p, atol=1e-6)


def test_nan_loss_raises():
    lrn = learner()
    with torch.no_grad():
        lrn.net.value_head.out[-1].bias.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="TD loss"):
        lrn.update(spiders_fly_graphs(S, GRID), ACTIONS, REWARD, TERMINATED,
                   spiders_fly_graphs(S_NEXT, GRID))


def test_cosine_learning_rate_schedule_and_its_checkpoint():
    import math

    lrn = learner(lr=1e-3, lr_schedule="cosine", lr_min=1e-4, lr_decay_updates=4)
    batch = (spiders_fly_graphs(S, GRID), ACTIONS, REWARD, TERMINATED,
             spiders_fly_graphs(S_NEXT, GRID))
    used = [lrn.update(*batch)["lr"] for _ in range(3)]
    # lr_k = lr_min + (lr - lr_min) (1 + cos(pi k / 4)) / 2, by hand: 1e-3, 8.682e-4, 5.5e-4
    assert used == pytest.approx([1e-3, 1e-4 + 4.5e-4 * (1 + math.cos(math.pi / 4)), 5.5e-4])
    assert lrn.optimizer.param_groups[0]["lr"] == pytest.approx(5.5e-4)
    resumed = learner(lr=1e-3, lr_schedule="cosine", lr_min=1e-4, lr_decay_updates=4)
    resumed.load_state_dict(lrn.state_dict())
    assert [resumed.update(*batch)["lr"] for _ in range(3)] == pytest.approx([
        1e-4 + 4.5e-4 * (1 + math.cos(3 * math.pi / 4)), 1e-4, 1e-4])  # then stays at lr_min
    assert learner().update(*batch)["lr"] == 5e-4  # constant by default


def test_bad_algo_config():
    with pytest.raises(ValueError, match="algo.optimizer"):
        ACEDQNConfig(optimizer="sgd9")
    with pytest.raises(ValueError, match="algo.gamma"):
        ACEDQNConfig(gamma=1.5)
    with pytest.raises(ValueError, match="algo.order"):
        ACEDQNConfig(order="alphabetical")
    with pytest.raises(ValueError, match="algo.lr_schedule"):
        ACEDQNConfig(lr_schedule="step")
    with pytest.raises(ValueError, match="lr_decay_updates > 0"):
        ACEDQNConfig(lr_schedule="cosine")


def test_mismatched_checkpoint():
    a = learner()
    b = ACEDQN(spiders_fly_schema(), ACEDQNConfig(), ModelConfig(hidden=32))
    with pytest.raises(ValueError, match="does not match"):
        b.load_state_dict(a.state_dict())


def test_next_state_without_agents_bootstraps_from_its_bare_value():
    from acegnn.envs.synthetic import random_state, smac_like_schema
    from acegnn.graph import collate

    schema = smac_like_schema()
    g = torch.Generator().manual_seed(0)
    s = collate([random_state(schema, 2, 2, g), random_state(schema, 3, 2, g)])
    s2 = collate([random_state(schema, 0, 2, g), random_state(schema, 3, 2, g)])
    torch.manual_seed(0)
    lrn = ACEDQN(schema, ACEDQNConfig(gamma=0.5), ModelConfig(hidden=8))
    actions = torch.zeros(5, dtype=torch.long)
    td = lrn.td_targets(s, actions, torch.tensor([1.0, 2.0]), torch.tensor([False, False]), s2)
    assert torch.isfinite(td.target).all()
    bare = lrn.target_net.value(lrn.target_net.encode(s2).units, lrn.target_net.encode(s2))
    assert torch.allclose(td.target[1], 1.0 + 0.5 * bare[0])  # last agent of graph 0


def test_batches_go_to_the_learners_device_only_when_elsewhere(monkeypatch):
    from acegnn.algos.base import QLearner, QLearningConfig

    graphs = spiders_fly_graphs(torch.tensor([[[0, 0], [4, 4], [2, 2]]]), 5)
    cpu = QLearner(torch.nn.Linear(2, 2), QLearningConfig(), "cpu")
    with monkeypatch.context() as m:
        m.setattr(type(graphs), "to", lambda *a, **k: pytest.fail("moved a batch already there"))
        assert cpu.on_device(graphs) is graphs
    meta = QLearner(torch.nn.Linear(2, 2), QLearningConfig(), "meta")
    moved = meta.on_device(graphs)
    tensors = [v for s in moved.stores for v in s.values() if isinstance(v, torch.Tensor)]
    assert len(tensors) > 5 and all(v.device.type == "meta" for v in tensors)

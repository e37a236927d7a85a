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


def test_polyak_update_weights_online_by_theta_and_target_by_one_minus_theta():
    """theta = 0.1: target' = 0.1 online' + 0.9 target, by hand on every parameter (the
    two weights swapped would give 0.9 online' + 0.1 target)."""
    lrn = learner(target_theta=0.1, lr=1e-2)
    with torch.no_grad():  # a target network away from the online one
        for tp in lrn.target_net.parameters():
            tp.add_(torch.randn_like(tp))
    before = [tp.clone() for tp in lrn.target_net.parameters()]
    lrn.update(spiders_fly_graphs(S, GRID), ACTIONS, REWARD, TERMINATED,
               spiders_fly_graphs(S_NEXT, GRID))
    names = [n for n, _ in lrn.net.named_parameters()]
    assert names == [n for n, _ in lrn.target_net.named_parameters()]
    for name, t0, p, tp in zip(names, before, lrn.net.parameters(), lrn.target_net.parameters()):
        assert torch.allclose(tp, 0.1 * p + 0.9 * t0, atol=1e-6), name
        if not torch.allclose(p, t0):  # the swapped weights differ here
            assert not torch.allclose(tp, 0.9 * p + 0.1 * t0, atol=1e-6), name


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


@pytest.mark.parametrize("optimizer", ["rmsprop", "adam"])
def test_the_compiled_optimizer_steps_as_the_eager_one_through_a_schedule(optimizer):
    """``train.compile_optimizer``: five updates under a cosine rate give the eager
    optimiser's weights to float rounding, with one compilation for every rate; the
    checkpoint keeps the rate as a float and resumes in an eager learner."""
    from torch._dynamo.utils import counters

    algo = dict(optimizer=optimizer, lr=1e-2, weight_decay=1e-3, lr_schedule="cosine",
                lr_min=1e-3, lr_decay_updates=4, grad_clip=1.0)
    batch = (spiders_fly_graphs(S, GRID), ACTIONS, REWARD, TERMINATED,
             spiders_fly_graphs(S_NEXT, GRID))
    eager, compiled = learner(**algo), learner(**algo)
    compiled.compile_optimizer()
    torch._dynamo.reset()
    counters.clear()
    rates = []
    for _ in range(5):
        rates.append(eager.update(*batch)["lr"])
        assert compiled.update(*batch)["lr"] == rates[-1]
    assert len(set(rates)) == 5  # 1e-2, three on the way down, then 1e-3
    assert counters["stats"]["unique_graphs"] == 1  # the rate changes without a recompile
    moved = 0.0
    for e, c, p0 in zip(eager.net.parameters(), compiled.net.parameters(),
                        learner(**algo).net.parameters()):
        assert torch.allclose(c, e, rtol=1e-5, atol=1e-6)
        moved = max(moved, (e - p0).abs().max().item())
    assert moved > 1e-3  # the updates did move the weights
    for group in compiled.optimizer.param_groups:  # what torch.compile leaves on a CUDA optimiser
        group["capturable"] = True
    state = compiled.state_dict()
    assert all(type(g["lr"]) is float and g["capturable"] is False
               for g in state["optimizer"]["param_groups"])  # eager's, to step on any device
    resumed = learner(**algo)
    resumed.load_state_dict(state)
    assert resumed.update(*batch)["lr"] == pytest.approx(1e-3)


def test_the_first_compiled_optimizer_step_is_checked_against_an_eager_copy(monkeypatch):
    """The first step of ``train.compile_optimizer`` is compared with one eager step of a
    copy of the optimiser (its state and gradients): a step that moves a weight by 1e-3
    more raises, naming the switch, and a right one is checked once, not every update."""
    batch = (spiders_fly_graphs(S, GRID), ACTIONS, REWARD, TERMINATED,
             spiders_fly_graphs(S_NEXT, GRID))
    algo = dict(optimizer="rmsprop", lr=1e-2, weight_decay=1e-3)
    right = learner(**algo)
    right.compile_optimizer()
    copies = []
    eager_copy = right._eager_step_of_copies
    monkeypatch.setattr(right, "_eager_step_of_copies",
                        lambda lr: copies.append(lr) or eager_copy(lr))
    for _ in range(3):
        right.update(*batch)
    assert copies == [1e-2]

    wrong = learner(**algo)
    wrong.compile_optimizer()
    first = next(wrong.net.parameters())

    def off_step():
        wrong.optimizer.step()
        with torch.no_grad():
            first.view(-1)[0] += 1e-3

    wrong._compiled_step = off_step
    with pytest.raises(RuntimeError, match=r"compiled optimiser step disagrees.*largest "
                                           r"difference 0\.001.*train\.compile_optimizer=false"):
        wrong.update(*batch)


@pytest.mark.parametrize("eps", [1e-8, 1e-5])
def test_optimizer_eps_sets_how_fast_weight_decay_shrinks_a_weight_without_gradient(eps):
    # One RMSprop step with no gradient from the loss: g = wd w, v = (1 - 0.99) g^2,
    # w' = w - lr g / (sqrt(v) + eps), by hand. At eps 1e-8 that is about lr * 10 * sign(w)
    # (the decay normalised away); at 1e-5 about lr * w / (0.1 |w| + 1).
    lr, wd = 0.002, 1e-5
    lrn = learner(optimizer="rmsprop", lr=lr, weight_decay=wd, optimizer_eps=eps)
    before = [p.detach().clone() for p in lrn.net.parameters()]
    for p in lrn.net.parameters():
        p.grad = torch.zeros_like(p)
    lrn.optimizer.step()
    for w, p in zip(before, lrn.net.parameters()):
        g = wd * w.double()
        expected = w.double() - lr * g / ((0.01 * g * g).sqrt() + eps)
        assert torch.allclose(p.detach().double(), expected, rtol=1e-5, atol=1e-9)
    w = torch.cat([b.flatten() for b in before]).double()
    after = torch.cat([p.detach().flatten() for p in lrn.net.parameters()]).double()
    shrink = (w.abs() - after.abs())[w.abs() > 0.2]
    assert len(shrink) > 0
    if eps == 1e-8:  # each large weight loses 5-10 lr, whatever its size
        assert (shrink > 5 * lr).all()
    else:  # each loses less than lr |w|
        assert (shrink < lr * w.abs()[w.abs() > 0.2]).all()


def test_zero_fraction_counts_entries_at_most_the_tolerance_by_hand():
    from acegnn.algos.base import zero_fraction

    layer = torch.nn.Linear(3, 2)  # 6 weights and 2 biases
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[0.0, 1e-7, -1e-6], [2e-6, -0.3, 0.5]]))
        layer.bias.copy_(torch.tensor([0.0, 1.0]))
    assert zero_fraction(layer) == 4 / 8  # 0, 1e-7, -1e-6 and the bias 0
    assert zero_fraction(layer, tol=1e-5) == 5 / 8


def test_bad_algo_config():
    with pytest.raises(ValueError, match="algo.optimizer"):
        ACEDQNConfig(optimizer="sgd9")
    with pytest.raises(ValueError, match="algo.gamma"):
        ACEDQNConfig(gamma=1.5)
    with pytest.raises(ValueError, match="algo.optimizer_eps"):
        ACEDQNConfig(optimizer_eps=0.0)
    with pytest.raises(ValueError, match="algo.order"):
        ACEDQNConfig(order="alphabetical")
    with pytest.raises(ValueError, match="algo.lr_schedule"):
        ACEDQNConfig(lr_schedule="step")
    with pytest.raises(ValueError, match="lr_decay_updates > 0"):
        ACEDQNConfig(lr_schedule="cosine")
    with pytest.raises(ValueError, match="algo.target"):
        ACEDQNConfig(target="n_step")
    with pytest.raises(ValueError, match="algo.aux_weight"):
        ACEDQNConfig(aux_weight=-1.0)
    with pytest.raises(ValueError, match="algo.aux_weight"):
        ACEDQNConfig(aux_weight=float("nan"))


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


# The target network follows the online rollout's order ------------------------------
def random_order_batch(seed=0):
    from acegnn.envs.synthetic import random_state, smac_like_schema

    g = torch.Generator().manual_seed(seed)
    schema = smac_like_schema(heal=True)  # attacks and heals: passive targets too
    sizes = [(3, 2), (4, 3), (2, 2), (3, 3)]
    s = [random_state(schema, na, ne, g, mask_prob=0.3) for na, ne in sizes]
    s2 = [random_state(schema, na, ne, g, mask_prob=0.3) for na, ne in sizes]
    return schema, s, s2


def greedy_slot(values: dict) -> int:
    return max(values, key=lambda a: values[a])


def eq1_reference(online, target, s, s2, actions, rank, first_next, reward, terminated,
                  gamma, double_q):
    """Eq. 1 per agent (batch order) from naive values, agents of graph b deciding in the
    order ``rank`` gives them; s' starts with agent ``first_next[b]`` (local index)."""
    out, start = [], 0
    for b, (d, d2) in enumerate(zip(s, s2)):
        n = d["ally"].x.size(0)
        chosen = actions[start:start + n].tolist()
        order = sorted(range(n), key=lambda i: int(rank[start + i]))
        t_steps = R.reference_candidates(target, d, order, chosen)
        o_steps = R.reference_candidates(online, d, order, chosen) if double_q else None
        t_next = R.reference_candidates(target, d2, [first_next[b]], [0] * d2["ally"].x.size(0))[0]
        if double_q:
            o_next = R.reference_candidates(online, d2, [first_next[b]], [0] * d2["ally"].x.size(0))[0]
            boot = t_next[greedy_slot(o_next)]
        else:
            boot = max(t_next.values())
        per_agent = [0.0] * n
        for k, agent in enumerate(order):
            if k + 1 < n:
                nxt = t_steps[k + 1]
                inner = nxt[greedy_slot(o_steps[k + 1])] if double_q else max(nxt.values())
                per_agent[agent] = gamma * float(inner)
            else:
                per_agent[agent] = float(reward[b]) + gamma * (0.0 if terminated[b] else 1.0) * float(boot)
        out += per_agent
        start += n
    return torch.tensor(out)


def spy_rollouts(net):
    """Record every rollout of ``net`` (its keyword arguments and its result)."""
    calls, rollout = [], net.rollout

    def spy(data, **kwargs):
        out = rollout(data, **kwargs)
        calls.append((kwargs, out))
        return out

    net.rollout = spy
    return calls


@pytest.mark.parametrize("double_q", [False, True])
def test_random_order_targets_follow_the_online_order(double_q):
    """With ``order=random`` the target network's rollout of s must follow the online
    rollout's order: Eq. 1 by hand in the order the online rollout used matches; the
    same targets in another order do not, nor does a target rollout that draws a fresh
    order."""
    from acegnn.graph import collate

    schema, s, s2 = random_order_batch()
    torch.manual_seed(0)
    lrn = ACEDQN(schema, ACEDQNConfig(gamma=0.9, order="random", double_q=double_q),
                 ModelConfig(hidden=16, pool="mean_max"))
    with torch.no_grad():
        for p in lrn.target_net.parameters():
            p.add_(0.3 * torch.randn_like(p))
    g, g2 = collate(s), collate(s2)
    actions = lrn.act(g, epsilon=1.0, generator=torch.Generator().manual_seed(1))
    reward, terminated = torch.tensor([1.0, 2.0, -1.0, 0.5]), torch.tensor([False, True, False, False])
    calls = spy_rollouts(lrn.target_net)
    td = lrn.td_targets(g, actions, reward, terminated, g2, torch.Generator().manual_seed(2))
    rank = td.online.rank
    assert not torch.equal(rank, lrn.net.rollout(g).rank)  # a non-default order was drawn
    (_, on_s), (_, on_s2) = calls[0], calls[1]
    assert torch.equal(on_s.rank, rank)
    ptr = on_s2.encoded.index.agent_ptr
    first_next = (on_s2.first_agent - ptr[:-1]).tolist()
    ref = eq1_reference(lrn.net, lrn.target_net, s, s2, actions, rank, first_next, reward,
                        terminated, 0.9, double_q)
    assert torch.allclose(td.target, ref, atol=1e-5)
    # the test has power: another order of s gives other targets ...
    idx = td.online.encoded.index
    n = idx.agent_ptr[1:] - idx.agent_ptr[:-1]
    reversed_rank = (n[idx.agent_batch] - 1) - rank
    other = eq1_reference(lrn.net, lrn.target_net, s, s2, actions, reversed_rank, first_next,
                          reward, terminated, 0.9, double_q)
    assert (other - ref).abs().max() > 1e-3
    # ... and so does a target rollout of s that draws a fresh random order
    rollout = type(lrn.target_net).rollout

    def fresh_order(data, order="default", **kwargs):
        if isinstance(order, torch.Tensor):  # the order given: the online one
            order, kwargs["generator"] = "random", torch.Generator().manual_seed(5)
        return rollout(lrn.target_net, data, order=order, **kwargs)

    lrn.target_net.rollout = fresh_order
    fresh = lrn.td_targets(g, actions, reward, terminated, g2, torch.Generator().manual_seed(2))
    assert torch.equal(fresh.online.rank, rank)
    assert not torch.allclose(fresh.target, ref, atol=1e-5, equal_nan=False)


# The official code's target and auxiliary loss ----------------------------------------
def test_last_agent_targets_by_hand_with_constant_value():
    """Every SE-state of a step regresses to r + gamma (1 - d) V'(s'): no discount inside
    the step, the same target for both agents."""
    lrn = learner(gamma=0.9, target="last_agent")
    constant_target(lrn, 2.0)
    td = lrn.td_targets(spiders_fly_graphs(S, GRID), ACTIONS, REWARD, TERMINATED,
                        spiders_fly_graphs(S_NEXT, GRID))
    assert torch.allclose(td.target, torch.tensor([10.0, 10.0, 0.9 * 2.0, 0.9 * 2.0]))


@pytest.mark.parametrize("double_q", [False, True])
def test_last_agent_targets_match_naive_reference(double_q):
    """r + gamma (1 - d) V'(s'_{a'_1:n}), a' the greedy sequential decision at s' of the
    online network (double_q, the official code) or of the target network, valued by
    the target network at the final SE-state; by hand from naive candidate values."""
    lrn = learner(gamma=0.97, double_q=double_q, target="last_agent")
    with torch.no_grad():
        for p in lrn.target_net.parameters():
            p.add_(0.3 * torch.randn_like(p))
    td = lrn.td_targets(spiders_fly_graphs(S, GRID), ACTIONS, REWARD, TERMINATED,
                        spiders_fly_graphs(S_NEXT, GRID))
    chooser = lrn.net if double_q else lrn.target_net
    ref = []
    for b in range(2):
        s2 = spiders_fly_graphs(S_NEXT[b:b + 1], GRID)
        a0 = greedy_slot(R.reference_candidates(chooser, s2, [0, 1], [0, 0])[0])
        a1 = greedy_slot(R.reference_candidates(chooser, s2, [0, 1], [a0, 0])[1])
        final = R.reference_candidates(lrn.target_net, s2, [0, 1], [a0, a1])[1][a1]
        y = float(REWARD[b]) + 0.97 * (0.0 if TERMINATED[b] else 1.0) * float(final)
        ref += [y, y]
    assert torch.allclose(td.target, torch.tensor(ref), atol=1e-5)
    # the online values are still those of the replayed SE-states
    for b in range(2):
        s = spiders_fly_graphs(S[b:b + 1], GRID)
        steps = R.reference_candidates(lrn.net, s, [0, 1], ACTIONS[2 * b:2 * b + 2].tolist())
        for i in range(2):
            assert abs(td.value[2 * b + i].item() - float(steps[i][int(ACTIONS[2 * b + i])])) < 1e-5
    # with the other network choosing at s', the target differs (the choice matters here)
    other = learner(gamma=0.97, double_q=not double_q, target="last_agent")
    other.net.load_state_dict(lrn.net.state_dict())
    other.target_net.load_state_dict(lrn.target_net.state_dict())
    td2 = other.td_targets(spiders_fly_graphs(S, GRID), ACTIONS, REWARD, TERMINATED,
                           spiders_fly_graphs(S_NEXT, GRID))
    assert not torch.allclose(td2.target, td.target, atol=1e-5)


def test_last_agent_target_of_a_next_state_without_agents_is_its_bare_value():
    from acegnn.envs.synthetic import random_state, smac_like_schema
    from acegnn.graph import collate

    schema = smac_like_schema()
    g = torch.Generator().manual_seed(0)
    s = collate([random_state(schema, 2, 2, g), random_state(schema, 3, 2, g)])
    s2 = collate([random_state(schema, 0, 2, g), random_state(schema, 3, 2, g)])
    torch.manual_seed(0)
    lrn = ACEDQN(schema, ACEDQNConfig(gamma=0.5, target="last_agent"), ModelConfig(hidden=8))
    td = lrn.td_targets(s, torch.zeros(5, dtype=torch.long), torch.tensor([1.0, 2.0]),
                        torch.tensor([False, False]), s2)
    enc = lrn.target_net.encode(s2)
    bare = lrn.target_net.value(enc.units, enc)
    assert torch.allclose(td.target[:2], 1.0 + 0.5 * bare[0].expand(2))


def final_units_by_hand(net, d, slots):
    """Unit embeddings of the final SE-state of one Spiders-and-Fly graph (both spiders
    acted, in the default order), from scratch."""
    from acegnn.graph import ACTION

    store = d[ACTION]
    units = R.encode_units(net, d)
    for agent, slot in enumerate(slots):
        row = next(a for a in range(store.kind.numel())
                   if int(store.actor[a]) == agent and int(store.slot[a]) == slot)
        units = R.add_action(net, d, units, row)
    return units


def test_aux_loss_by_hand():
    """The head predicts every unit's feature change x' - x from the final SE-state; the
    loss is the mean squared error over all units and features; the update steps on
    td_loss + aux_weight * aux_loss and trains the head."""
    lrn = learner(aux_weight=2.5)
    g, g2 = spiders_fly_graphs(S, GRID), spiders_fly_graphs(S_NEXT, GRID)
    td = lrn.td_targets(g, ACTIONS, REWARD, TERMINATED, g2)
    squared, count = 0.0, 0
    heads = lrn.net.aux_head.heads
    for b in range(2):
        d, d2 = spiders_fly_graphs(S[b:b + 1], GRID), spiders_fly_graphs(S_NEXT[b:b + 1], GRID)
        units = final_units_by_hand(lrn.net, d, ACTIONS[2 * b:2 * b + 2].tolist())
        for t, rows in (("spider", slice(0, 2)), ("fly", slice(2, 3))):
            pred = R.seq(heads[t], units[rows])
            label = d2[t].x - d[t].x  # the spiders' moves; the fly's; ids do not change
            squared += float(((pred - label) ** 2).sum())
            count += label.numel()
    by_hand = squared / count
    assert count == 2 * 3 * 5
    assert abs(lrn.aux_loss(td.online, g, g2).item() - by_hand) < 1e-6
    losses = []
    step = lrn.step
    lrn.step = lambda loss: (losses.append(loss.item()), step(loss))[1]
    head_before = [p.clone() for p in heads.parameters()]
    logs = lrn.update(g, ACTIONS, REWARD, TERMINATED, g2)
    assert logs["aux_loss"] == pytest.approx(by_hand, abs=1e-6)
    assert losses == [pytest.approx(logs["td_loss"] + 2.5 * logs["aux_loss"], rel=1e-6)]
    assert all(not torch.equal(a, b) for a, b in zip(head_before, heads.parameters()))
    # the head is saved with the network
    assert any(k.startswith("aux_head.") for k in lrn.state_dict()["net"])


def test_zero_aux_weight_changes_nothing():
    """aux_weight=0 builds no head and takes exactly the TD step, bit for bit; with a
    positive weight the value network starts from the same parameters (the head is
    built after it)."""
    batch = (spiders_fly_graphs(S, GRID), ACTIONS, REWARD, TERMINATED,
             spiders_fly_graphs(S_NEXT, GRID))
    zero, plain = learner(aux_weight=0.0), learner()
    assert not hasattr(zero.net, "aux_head")
    assert list(zero.state_dict()["net"]) == list(plain.state_dict()["net"])
    logs = [zero.update(*batch) for _ in range(3)]
    for _ in range(3):  # the update without the option: TD loss, then the gradient step
        td = plain.td_targets(*batch)
        plain.step(plain.td_loss(td.value, td.target))
    for a, b in zip(zero.state_dict()["net"].values(), plain.state_dict()["net"].values()):
        assert torch.equal(a, b)
    for a, b in zip(zero.target_net.parameters(), plain.target_net.parameters()):
        assert torch.equal(a, b)
    assert all("aux_loss" not in m for m in logs)
    with_aux = learner(aux_weight=1.0)
    for name, p in learner().net.state_dict().items():
        assert torch.equal(with_aux.net.state_dict()[name], p)


@pytest.mark.parametrize("norm, balance", [(True, False), (False, True), (True, True)])
def test_aux_loss_label_norm_and_class_balance_by_hand(norm, balance):
    """The official code's options: labels divided per state, node type and feature by
    their largest magnitude over the units; squared errors averaged apart over the zero
    and non-zero labels of each feature, then the two means. By hand over graphs of
    different sizes, with zero labels (an unchanged column, an unchanged unit)."""
    from acegnn.envs.synthetic import random_state, smac_like_schema
    from acegnn.graph import collate

    schema = smac_like_schema()
    g = torch.Generator().manual_seed(3)
    before = [random_state(schema, 3, 2, g), random_state(schema, 2, 4, g)]
    after = [random_state(schema, 3, 2, g), random_state(schema, 2, 4, g)]
    for d0, d1 in zip(before, after):
        d1["ally"].x[:, 1] = d0["ally"].x[:, 1]  # a feature that does not change
        d1["enemy"].x[0] = d0["enemy"].x[0]  # a unit that does not change
    s, s2 = collate(before), collate(after)
    torch.manual_seed(0)
    lrn = ACEDQN(schema, ACEDQNConfig(aux_weight=1.0, aux_label_norm=norm,
                                      aux_class_balance=balance), ModelConfig(hidden=8))
    td = lrn.td_targets(s, torch.zeros(5, dtype=torch.long), torch.tensor([1.0, 2.0]),
                        torch.tensor([False, False]), s2)
    pred = lrn.net.aux_head(td.online.final_units, td.online.encoded.index)
    pos, neg, squared, count = [], [], 0.0, 0
    for t in ("ally", "enemy"):
        p = pred[t].detach().tolist()
        units = [(b, j) for b, d in enumerate(before) for j in range(d[t].x.size(0))]
        label = [[float(after[b][t].x[j, f] - before[b][t].x[j, f])
                  for f in range(schema.node_types[t])] for b, j in units]
        if norm:
            for f in range(schema.node_types[t]):
                for b in range(2):
                    rows = [r for r, (bb, _) in enumerate(units) if bb == b]
                    top = max(abs(label[r][f]) for r in rows)
                    for r in rows:
                        label[r][f] /= top + 1e-9
        for f in range(schema.node_types[t]):
            err = [(p[r][f] - label[r][f]) ** 2 for r in range(len(units))]
            nz = [e for e, y in zip(err, label) if abs(y[f]) >= 1e-5]
            z = [e for e, y in zip(err, label) if abs(y[f]) < 1e-5]
            pos.append(sum(nz) / max(len(nz), 1))
            neg.append(sum(z) / max(len(z), 1))
            squared += sum(err)
            count += len(err)
    if balance:
        by_hand = (sum(pos) / len(pos) + sum(neg) / len(neg)) / 2
    else:
        by_hand = squared / count
    assert abs(lrn.aux_loss(td.online, s, s2).item() - by_hand) < 1e-6
    lrn.cfg = ACEDQNConfig(aux_weight=1.0)  # without the options the loss differs
    assert abs(lrn.aux_loss(td.online, s, s2).item() - by_hand) > 1e-3


def test_aux_loss_needs_the_same_units_in_both_states():
    from acegnn.envs.synthetic import random_state, smac_like_schema
    from acegnn.graph import collate

    schema = smac_like_schema()
    g = torch.Generator().manual_seed(0)
    s = collate([random_state(schema, 2, 2, g), random_state(schema, 3, 2, g)])
    s2 = collate([random_state(schema, 2, 3, g), random_state(schema, 3, 1, g)])  # same total
    torch.manual_seed(0)
    lrn = ACEDQN(schema, ACEDQNConfig(aux_weight=1.0), ModelConfig(hidden=8))
    with pytest.raises(ValueError, match="same units"):
        lrn.update(s, torch.zeros(5, dtype=torch.long), torch.tensor([1.0, 2.0]),
                   torch.tensor([False, False]), s2)


def test_official_options_together_learn():
    """The official code's choices at once (last agent's target, online selection,
    random order, auxiliary loss, mean + max pooling, 2-layer MLPs) give finite updates
    that lower the loss on a fixed batch."""
    torch.manual_seed(0)
    lrn = ACEDQN(spiders_fly_schema(),
                 ACEDQNConfig(target="last_agent", double_q=True, order="random", aux_weight=10.0,
                              lr=1e-3),
                 ModelConfig(hidden=16, pool="mean_max", layers=2))
    batch = (spiders_fly_graphs(S, GRID), ACTIONS, REWARD, TERMINATED,
             spiders_fly_graphs(S_NEXT, GRID))
    gen = torch.Generator().manual_seed(0)
    logs = [lrn.update(*batch, generator=gen) for _ in range(20)]
    assert all(set(m) >= {"td_loss", "aux_loss", "grad_norm"} for m in logs)
    first, last = logs[0], logs[-1]
    assert last["td_loss"] + 10 * last["aux_loss"] < first["td_loss"] + 10 * first["aux_loss"]

"""Value-factorisation baselines: mixers, targets and QTRAN's losses by hand."""
import pytest
import torch

from acegnn.algos.value_decomposition import ValueDecomposition, ValueDecompositionConfig
from acegnn.envs.synthetic import random_state, smac_like_schema
from acegnn.envs.spiders_fly import spiders_fly_graphs, spiders_fly_schema
from acegnn.graph import collate
from acegnn.graph.flat import flat_inputs
from acegnn.nn import ModelConfig
from acegnn.nn.mixers import QMixer, VDNMixer

GRID = 5
S = torch.tensor([[[0, 0], [4, 4], [2, 2]], [[1, 0], [0, 3], [4, 2]]])
S_NEXT = torch.tensor([[[0, 1], [4, 4], [2, 2]], [[1, 1], [0, 4], [4, 1]]])
ACTIONS = torch.tensor([2, 0, 4, 3])
REWARD = torch.tensor([10.0, 0.0])
TERMINATED = torch.tensor([True, False])
GAMMA = 0.9


def learner(name, **kw):
    torch.manual_seed(0)
    g = spiders_fly_graphs(S, GRID)
    return ValueDecomposition(spiders_fly_schema(), ValueDecompositionConfig(name=name, gamma=GAMMA, **kw),
                              ModelConfig(hidden=16), example=g)


def batch():
    return spiders_fly_graphs(S, GRID), ACTIONS, REWARD, TERMINATED, spiders_fly_graphs(S_NEXT, GRID)


def test_flat_inputs_are_id_position_and_distances():
    fi = flat_inputs(spiders_fly_schema(), spiders_fly_graphs(S[:1], GRID))
    # spider 0 at (0,0): id (1,0,0), pos (0,0); to spider 1 at (4,4): (1,1); to fly (2,2): (.5,.5)
    assert torch.allclose(fi.agent_obs[0, 0], torch.tensor([1, 0, 0, 0, 0, 1, 1, 0.5, 0.5]))
    assert fi.state.shape == (1, 15)
    assert fi.available[0, 0].tolist() == [True, False, True, False, True]


def test_vdn_is_the_sum():
    q = torch.randn(7, 3)
    assert torch.allclose(VDNMixer()(q, torch.randn(7, 4)), q.sum(1))


def test_qmix_is_monotonic():
    torch.manual_seed(0)
    mixer = QMixer(n_agents=3, state_dim=6)
    q = torch.randn(64, 3, requires_grad=True)
    q_tot = mixer(q, torch.randn(64, 6))
    (grad,) = torch.autograd.grad(q_tot.sum(), q)
    assert (grad >= 0).all() and (grad > 0).any()


def constant_target_q(lrn):
    """Q'_i(o, a) = a for every agent and observation."""
    head = lrn.target_net["agent"].head
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.arange(5.0))


# best available action id at S_NEXT per agent (stay up down left right):
# env 0: spider (0,1) -> right (4); spider (4,4) -> left (3)
# env 1: spider (1,1) -> right (4); spider (0,4) -> left (3)
BEST_NEXT = torch.tensor([[4.0, 3.0], [4.0, 3.0]])


def test_iql_targets_by_hand():
    lrn = learner("iql")
    constant_target_q(lrn)
    out = lrn.losses(*batch())
    expected = torch.tensor([[10.0, 10.0], [0.9 * 4, 0.9 * 3]])
    assert torch.allclose(out.target, expected)


def test_vdn_targets_by_hand():
    lrn = learner("vdn")
    constant_target_q(lrn)
    out = lrn.losses(*batch())
    assert torch.allclose(out.target, torch.tensor([10.0, 0.9 * 7.0]))
    fi = flat_inputs(spiders_fly_schema(), spiders_fly_graphs(S, GRID))
    q = lrn.net["agent"](fi.agent_obs).gather(2, ACTIONS.view(2, 2, 1)).squeeze(-1)
    assert torch.allclose(out.value, q.sum(1))


def test_qmix_targets_by_hand():
    lrn = learner("qmix")
    constant_target_q(lrn)
    out = lrn.losses(*batch())
    mixer = lrn.target_net["mixer"]
    s2 = flat_inputs(spiders_fly_schema(), spiders_fly_graphs(S_NEXT, GRID)).state
    with torch.no_grad():  # the QMIX formula written out for env 1
        w1 = mixer.hyper_w1(s2[1]).abs().view(2, 32)
        b1 = mixer.hyper_b1(s2[1])
        hidden = torch.nn.functional.elu(BEST_NEXT[1] @ w1 + b1)
        w2 = mixer.hyper_w2(s2[1]).abs()
        q_tot = hidden @ w2 + mixer.hyper_b2(s2[1]).squeeze()
    assert torch.allclose(out.target, torch.stack([torch.tensor(10.0), 0.9 * q_tot]), atol=1e-5)


def perturb_online_agents(lrn):
    """Make the online agent network differ from the target one (a fresh learner has
    them equal), so that choosing with one or the other can be told apart."""
    with torch.no_grad():
        for p in lrn.net["agent"].parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * 0.5)


def masked_q(net, fi):
    return net(fi.agent_obs).masked_fill(~fi.available, float("-inf"))


@pytest.mark.parametrize("double_q", [False, True])
@pytest.mark.parametrize("name", ["iql", "vdn", "qmix", "qtran"])
def test_targets_value_the_next_states_greedy_actions(name, double_q):
    """Written out with the networks' own outputs at s' (which depend on s', unlike the
    constant heads above): the greedy next actions are the target agents' (the online
    agents' with double Q-learning) and the target networks value them."""
    lrn = learner(name, double_q=double_q)
    perturb_online_agents(lrn)
    fi2 = flat_inputs(spiders_fly_schema(), spiders_fly_graphs(S_NEXT, GRID))
    with torch.no_grad():
        q2_target = masked_q(lrn.target_net["agent"], fi2)
        q2_online = masked_q(lrn.net["agent"], fi2)
        assert (q2_target.argmax(-1) != q2_online.argmax(-1)).any()  # the choice matters here
        u2 = (q2_online if double_q else q2_target).argmax(-1)
        q2 = q2_target.gather(2, u2.unsqueeze(-1)).squeeze(-1)  # [B, n]
        bootstrap = {"iql": lambda: q2, "vdn": lambda: q2.sum(1),
                     "qmix": lambda: lrn.target_net["mixer"](q2, fi2.state),
                     "qtran": lambda: lrn.target_net["qtran"].joint_q(fi2.state, u2)}[name]()
        not_done = torch.tensor([0.0, 1.0])
        if name == "iql":
            expected = REWARD[:, None] + GAMMA * not_done[:, None] * bootstrap
        else:
            expected = REWARD + GAMMA * not_done * bootstrap
        # the same agents on s instead of s' give another target: the check can fail
        fi = flat_inputs(spiders_fly_schema(), spiders_fly_graphs(S, GRID))
        assert not torch.allclose(masked_q(lrn.target_net["agent"], fi), q2_target)
    out = lrn.losses(*batch())
    assert torch.allclose(out.target, expected, atol=1e-6)


def test_double_q_selects_with_the_online_network():
    lrn = learner("iql", double_q=True)
    constant_target_q(lrn)
    fi2 = flat_inputs(spiders_fly_schema(), spiders_fly_graphs(S_NEXT, GRID))
    q2 = lrn.net["agent"](fi2.agent_obs).masked_fill(~fi2.available, float("-inf"))
    chosen = q2.argmax(-1).float()  # Q' = a, so the target reveals the online choice
    out = lrn.losses(*batch())
    assert torch.allclose(out.target[1], 0.9 * chosen[1])


def qtran_learner():
    """A QTRAN learner whose online and target agents disagree on the greedy next
    actions, and whose L_nopt term is active (negative before the clamp) in one sample
    only, with unequal loss weights."""
    lrn = learner("qtran", lambda_opt=0.7, lambda_nopt=0.3)
    perturb_online_agents(lrn)
    with torch.no_grad():
        lrn.net["qtran"].v[-1].bias.add_(2.8)
    return lrn


def test_qtran_losses_by_hand():
    lrn = qtran_learner()
    out = lrn.losses(*batch())
    fi = flat_inputs(spiders_fly_schema(), spiders_fly_graphs(S, GRID))
    fi2 = flat_inputs(spiders_fly_schema(), spiders_fly_graphs(S_NEXT, GRID))
    qt, qt_t = lrn.net["qtran"], lrn.target_net["qtran"]
    with torch.no_grad():
        q = lrn.net["agent"](fi.agent_obs)
        q2_target = masked_q(lrn.target_net["agent"], fi2)  # the paper: u' of the target agents
        l_td = l_opt = l_nopt = 0.0
        nopt_before_clamp = []
        for b in range(2):
            u = ACTIONS.view(2, 2)[b]
            q_jt = qt.joint_q(fi.state[b:b + 1], u.view(1, 2))[0]
            y = REWARD[b] + 0.9 * (0.0 if TERMINATED[b] else 1.0) * qt_t.joint_q(
                fi2.state[b:b + 1], q2_target[b].argmax(-1).view(1, 2))[0]
            l_td += (q_jt - y) ** 2 / 2
            greedy = q[b].masked_fill(~fi.available[b], float("-inf")).argmax(-1)
            v = qt.value(fi.state[b:b + 1])[0]
            opt = q[b][torch.arange(2), greedy].sum() - qt.joint_q(fi.state[b:b + 1], greedy.view(1, 2))[0] + v
            l_opt += opt ** 2 / 2
            nopt = q[b][torch.arange(2), u].sum() - q_jt + v
            nopt_before_clamp.append(float(nopt))
            l_nopt += min(float(nopt), 0.0) ** 2 / 2
    assert min(nopt_before_clamp) < 0 < max(nopt_before_clamp)  # the clamp acts in one sample
    assert torch.allclose(out.parts["td_loss"], torch.tensor(float(l_td)), atol=1e-5)
    assert torch.allclose(out.parts["opt_loss"], torch.tensor(float(l_opt)), atol=1e-5)
    assert torch.allclose(out.parts["nopt_loss"], torch.tensor(float(l_nopt)), atol=1e-5)
    assert l_nopt > 0
    assert torch.allclose(out.loss, torch.tensor(float(l_td + 0.7 * l_opt + 0.3 * l_nopt)), atol=1e-5)


def test_qtran_gradients_go_where_the_paper_sends_them():
    """L_td trains Q_jt only (the agents do not see it); L_opt and L_nopt train the agents
    and V, with Q_jt held fixed in them."""
    lrn = qtran_learner()
    out = lrn.losses(*batch())
    groups = {"agents": list(lrn.net["agent"].parameters()),
              "q_jt": list(lrn.net["qtran"].q_jt.parameters()),
              "v": list(lrn.net["qtran"].v.parameters())}

    def reached(loss):
        names = list(groups)
        grads = torch.autograd.grad(loss, [p for k in names for p in groups[k]],
                                    retain_graph=True, allow_unused=True)
        out, i = {}, 0
        for k in names:
            g = grads[i:i + len(groups[k])]
            i += len(groups[k])
            out[k] = any(x is not None and bool(x.abs().sum() > 0) for x in g)
        return out

    assert reached(out.parts["td_loss"]) == {"agents": False, "q_jt": True, "v": False}
    assert reached(out.parts["opt_loss"]) == {"agents": True, "q_jt": False, "v": True}
    assert reached(out.parts["nopt_loss"]) == {"agents": True, "q_jt": False, "v": True}


def test_states_that_do_not_fit_the_networks_are_refused():
    schema, g = smac_like_schema(), torch.Generator().manual_seed(0)
    lrn = ValueDecomposition(schema, ValueDecompositionConfig(name="qmix"), ModelConfig(hidden=8),
                             example=collate([random_state(schema, 2, 3, g)]))
    lrn.act(collate([random_state(schema, 2, 3, g)]))  # 2 allies against 3 enemies fit
    with pytest.raises(ValueError, match=r"sized for: agent input size 14 \(got 16\), state size 27 "
                                         r"\(got 32\), action slots per agent 10 \(got 11\)"):
        lrn.act(collate([random_state(schema, 2, 4, g)]))
    with pytest.raises(ValueError, match=r"agents per state 2 \(got 3\)"):
        lrn.act(collate([random_state(schema, 3, 3, g)]))
    for key, value in (("lambda_opt", -1.0), ("lambda_nopt", float("nan"))):
        with pytest.raises(ValueError, match=f"algo.{key} must be non-negative"):
            ValueDecompositionConfig(name="qtran", **{key: value})


@pytest.mark.parametrize("name", ["iql", "vdn", "qmix", "qtran"])
def test_update_and_act(name):
    lrn = learner(name, lr=1e-2)
    losses = [lrn.update(*batch())["td_loss"] for _ in range(20)]
    assert losses[-1] < losses[0]
    acts = lrn.act(spiders_fly_graphs(S, GRID), epsilon=1.0, generator=torch.Generator().manual_seed(0))
    fi = flat_inputs(spiders_fly_schema(), spiders_fly_graphs(S, GRID))
    assert fi.available.view(4, 5)[torch.arange(4), acts].all()


@pytest.mark.parametrize("name", ["iql", "vdn", "qmix", "qtran"])
def test_update_and_act_on_smac_like_states(name):
    """Attack/heal slots and masked actions, as the SMAC family has (random states)."""
    schema, g = smac_like_schema(), torch.Generator().manual_seed(1)

    def states():
        return collate([random_state(schema, 2, 3, g, mask_prob=0.5) for _ in range(4)])

    torch.manual_seed(0)
    s, s_next = states(), states()
    lrn = ValueDecomposition(schema, ValueDecompositionConfig(name=name, lr=1e-2, gamma=GAMMA),
                             ModelConfig(hidden=16), example=s)
    avail = flat_inputs(schema, s).available.view(8, 10)
    assert not avail.all() and avail[:, 5:].any()  # masked slots, attacks and heals
    acts = lrn.act(s, epsilon=1.0, generator=torch.Generator().manual_seed(0))
    assert avail[torch.arange(8), acts].all() and (acts >= 5).any()
    reward, done = torch.tensor([1.0, 0.0, -1.0, 2.0]), torch.tensor([False, True, False, False])
    losses = [lrn.update(s, acts, reward, done, s_next)["td_loss"] for _ in range(30)]
    assert losses[-1] < losses[0] and all(l == l for l in losses)
    greedy = lrn.act(s)
    assert avail[torch.arange(8), greedy].all()


def test_bad_method_name():
    with pytest.raises(ValueError, match="algo.name"):
        ValueDecompositionConfig(name="coma")


def test_qtran_joint_network_depth():
    """``qtran_layers`` deepens Q_jt only; the default keeps the parameter names that
    earlier checkpoints were saved with."""
    default = learner("qtran").net["qtran"]
    assert sorted(default.state_dict()) == ["q_jt.0.bias", "q_jt.0.weight", "q_jt.2.bias",
                                            "q_jt.2.weight", "q_jt.4.bias", "q_jt.4.weight",
                                            "v.0.bias", "v.0.weight", "v.2.bias", "v.2.weight"]
    deep = learner("qtran", qtran_layers=4, qtran_hidden=8).net["qtran"]
    fcs = [m for m in deep.q_jt if isinstance(m, torch.nn.Linear)]
    assert len(fcs) == 5 and all(m.out_features == 8 for m in fcs[:-1])
    assert sum(isinstance(m, torch.nn.Linear) for m in deep.v) == 2
    out = deep.joint_q(torch.randn(3, 15), torch.tensor([[0, 1], [2, 3], [4, 4]]))
    assert out.shape == (3,)
    for key in ("qtran_layers", "qtran_hidden", "mixer_embed", "hyper_hidden"):
        with pytest.raises(ValueError, match=f"algo.{key}"):
            ValueDecompositionConfig(name="qtran", **{key: 0})


def test_shared_inputs_see_every_unit():
    """QMIX-SHARED: the agents' inputs add every unit's node features (the global state);
    without it an enemy's own features (beyond the relative position in the edges) are
    invisible to the agents."""
    from acegnn.algos.value_decomposition import AgentModelConfig

    schema = smac_like_schema()
    s = collate([random_state(schema, 2, 3, torch.Generator().manual_seed(3)) for _ in range(2)])
    q = {}
    for shared in (False, True):
        torch.manual_seed(0)
        lrn = ValueDecomposition(schema, ValueDecompositionConfig(name="qmix"),
                                 AgentModelConfig(hidden=16, shared=shared), example=s)
        fi = lrn.inputs(s)
        plain = flat_inputs(schema, s)
        width = plain.agent_obs.size(2) + (plain.state.size(1) if shared else 0)
        assert fi.agent_obs.shape == (2, 2, width)
        if shared:
            assert torch.equal(fi.agent_obs[:, :, plain.agent_obs.size(2):],
                               plain.state.unsqueeze(1).expand(-1, 2, -1))
        s2 = s.clone()
        s2["enemy"].x[:, 2:] += 1.0  # enemy features that no edge carries
        q[shared] = (lrn.net["agent"](fi.agent_obs), lrn.net["agent"](lrn.inputs(s2).agent_obs))
    assert torch.equal(*q[False]) and not torch.allclose(*q[True])

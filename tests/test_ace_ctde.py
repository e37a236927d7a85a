"""ACE-CTDE: the individual value Q(o_i, a_i) and its counterfactual targets against naive
per-agent computations, what an agent's Q depends on (perturbations), real battle
observations against sight ranges by hand, the decentralised policy, config errors and
the CLI reporting both policies."""
import json
import math
import os

import pytest
import torch

from acegnn.algos import ACECTDE, ACECTDEConfig
from acegnn.cli import main
from acegnn.config import load_config
from acegnn.envs.spiders_fly import spiders_fly_graphs, spiders_fly_schema
from acegnn.envs.synthetic import random_state, smac_like_schema
from acegnn.graph import ACTION, build_state, collate
from acegnn.graph.index import observed_units, unit_index
from acegnn.nn import ACENetwork, Forced, ModelConfig
from acegnn.nn.individual import IndividualQ, agent_views, counterfactual_values, greedy_actions

import reference as R
from test_alive import with_dead

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "spiders_fly_5x5_ctde.yaml")
SIZES = [(3, 4), (4, 3), (2, 5)]  # (allies, enemies): 7 units in every state


def battle_like_states(seed=0, observe=True):
    """Random SMAC-like states with dead units; with ``observe``, random observations
    (``observes`` on the ally store, by position in the graph)."""
    g = torch.Generator().manual_seed(seed)
    schema = smac_like_schema(heal=True)
    states = []
    for na, ne in SIZES:
        d = with_dead(schema, random_state(schema, na, ne, g, mask_prob=0.2), [1], [0])
        if observe:
            d["ally"].observes = torch.rand(na, na + ne, generator=g) < 0.6
        states.append(d)
    return schema, states


def view_of(schema, d, agent):
    """Agent ``agent``'s view by hand: ``(units kept per type, its own actions' rows)``.
    It keeps itself and the live units it observes (all with no ``observes``); a dead
    agent observes nothing."""
    na = d["ally"].x.size(0)
    seen = d["ally"].observes[agent] if "observes" in d["ally"] else \
        torch.ones(na + d["enemy"].x.size(0), dtype=torch.bool)
    seen = seen & d["ally"].alive[agent]
    keep = {"ally": seen[:na] & d["ally"].alive, "enemy": seen[na:] & d["enemy"].alive}
    keep["ally"][agent] = True
    rows = [a for a in range(d[ACTION].kind.numel()) if int(d[ACTION].actor[a]) == agent]
    return keep, rows


def naive_q(ind, schema, d, agent):
    """Q(o_i, a) of every available action of agent ``agent``: its view rebuilt as a graph
    of the kept units and the edges among them, its own action added alone."""
    keep, rows = view_of(schema, d, agent)
    new, x, ei, ea = R.kept_units(schema, d, keep)
    sub = build_state(schema, x, ei, ea, {k: d[ACTION][k] for k in
                                          ("kind", "actor_type", "actor", "target_type",
                                           "target", "slot", "available")})
    for t in schema.node_types:
        sub[t].alive = d[t].alive[keep[t]]
    names = schema.node_type_names
    me = int(new["ally"][agent])
    out = {}
    with torch.no_grad():
        base = R.encode_units(ind, sub)
        alive = R.alive_units(ind, sub)
        for a in rows:
            if not bool(d[ACTION].available[a]):
                continue
            kind, target = int(d[ACTION].kind[a]), int(d[ACTION].target[a])
            units = base.clone()
            units[me] += ind.action_encoder.active[kind]  # only its own action's embedding
            if target >= 0:
                t = names[int(d[ACTION].target_type[a])]
                if bool(keep[t][target]):  # a target it does not observe gets nothing
                    out_p = R.seq(ind.action_encoder.passive_encoders["ally"], d["ally"].x[agent])
                    col = list(schema.targeted_kinds).index(kind)
                    row = R.unit_row(ind, sub, names.index(t), int(new[t][target]))
                    units[row] += out_p.view(len(schema.targeted_kinds), -1)[col]
            out[int(d[ACTION].slot[a])] = float(R.value(ind, units, alive))
    return out


def q_by_agent(values, idx, agent):
    """``{slot: Q}`` of one agent's available actions from a batch's ``[A]`` values."""
    rows = ((idx.action_agent == agent) & idx.action_available).nonzero().view(-1)
    return {int(idx.action_slot[r]): float(values[r].detach()) for r in rows}


def close(a, b, tol=1e-5):
    return a.keys() == b.keys() and all(abs(a[k] - b[k]) < tol for k in a)


@pytest.mark.parametrize("share", ["encoders", "all", "none"])
@pytest.mark.parametrize("pool", ["mean", "max"])
def test_individual_q_matches_naive_views(share, pool):
    torch.manual_seed(0)
    schema, states = battle_like_states()
    net = ACENetwork(schema, hidden=16, pool=pool, layers=2)
    ind = IndividualQ.from_config(net, ModelConfig(hidden=16, pool=pool, layers=2), share)
    out = ind(collate(states))
    assert out.q.shape == (out.index.action_kind.numel(),)
    offset = 0
    for d in states:
        na = d["ally"].x.size(0)
        for i in range(na):
            want = naive_q(ind, schema, d, i)
            assert close(q_by_agent(out.q, out.index, offset + i), want), (i, share)
        offset += na


def test_views_are_the_observed_live_units_and_the_agent():
    schema, states = battle_like_states(seed=3)
    b = collate(states)
    idx = unit_index(schema, b)
    views = agent_views(idx, observed_units(schema, b, idx))
    offset = 0
    for gi, d in enumerate(states):
        for i in range(d["ally"].x.size(0)):
            keep, _ = view_of(schema, d, i)
            kept = torch.cat([keep["ally"], keep["enemy"]]).nonzero().view(-1)
            want = kept + int(idx.unit_ptr[gi])
            got = views.unit[views.index.unit_batch == offset + i]
            assert got.tolist() == want.tolist()
        offset += d["ally"].x.size(0)
    # fully observed without the attribute: every live unit, and the agent itself
    for d in states:
        del d["ally"].observes
    b = collate(states)
    idx = unit_index(schema, b)
    assert observed_units(schema, b, idx) is None
    views = agent_views(idx)
    dead_agent = 1  # with_dead kills ally 1 of every state: its view is itself only
    assert views.index.unit_count[dead_agent].item() == 1
    assert views.index.unit_count[0].item() == int(sum(d_.alive.sum() for d_ in
                                                       (states[0]["ally"], states[0]["enemy"])))


def test_bad_observations_are_refused():
    schema, states = battle_like_states()
    b = collate(states[:1])
    b["ally"].observes = torch.ones(3, 5, dtype=torch.bool)  # 7 units
    with pytest.raises(ValueError, match="observes"):
        observed_units(schema, b, unit_index(schema, b))
    d = states[0]
    d["ally"].observes = torch.ones(3, 9, dtype=torch.bool)  # two columns past the units
    b = collate([d])
    with pytest.raises(ValueError, match="past its graph's 7 units"):
        observed_units(schema, b, unit_index(schema, b))


def naive_counterfactuals(net, schema, d, joint):
    """V(s_{a, a*_-i}) by hand for every agent i and available action a: the state encoded
    from scratch, the other agents' actions of ``joint`` (action rows) and ``a`` added."""
    store = d[ACTION]
    out = []
    with torch.no_grad():
        base = R.encode_units(net, d)
        alive = R.alive_units(net, d)
        for i in range(d["ally"].x.size(0)):
            vals = {}
            for a in range(store.kind.numel()):
                if int(store.actor[a]) != i or not bool(store.available[a]):
                    continue
                units = base
                for j, other in enumerate(joint):
                    if j != i:
                        units = R.add_action(net, d, units, other)
                units = R.add_action(net, d, units, a)
                vals[int(store.slot[a])] = float(R.value(net, units, alive))
            out.append(vals)
    return out


@pytest.mark.parametrize("pool", ["mean", "mean_max"])
def test_counterfactual_targets_match_naive(pool):
    torch.manual_seed(1)
    schema, states = battle_like_states(seed=5)
    net = ACENetwork(schema, hidden=16, pool=pool, layers=2)
    b = collate(states)
    with torch.no_grad():
        ro = net.rollout(b, order="random", generator=torch.Generator().manual_seed(2))
        cf = counterfactual_values(net, ro)
    idx = ro.encoded.index
    offset, a_offset = 0, 0
    for d in states:
        na = d["ally"].x.size(0)
        joint = (ro.action_ids[offset:offset + na] - a_offset).tolist()  # rows of d's table
        want = naive_counterfactuals(net, schema, d, joint)
        for i in range(na):
            assert close(q_by_agent(cf, idx, offset + i), want[i]), i
        offset += na
        a_offset += d[ACTION].kind.numel()
    # at its own action of a*, every agent's target is V(s_{a*})
    v_final = net.value(ro.final_units, ro.encoded)[idx.agent_batch]
    assert torch.allclose(cf[ro.action_ids], v_final, atol=1e-5)


def test_counterfactuals_need_a_full_rollout():
    schema, states = battle_like_states()
    net = ACENetwork(schema, hidden=8)
    with pytest.raises(ValueError, match="every agent decided"):
        counterfactual_values(net, net.rollout(collate(states), max_steps=1))


def test_q_ignores_unobserved_units_and_other_agents_actions():
    """Perturbing what agent 0 does not observe, or another agent's actions, leaves its Q;
    perturbing a unit it observes moves it."""
    torch.manual_seed(2)
    schema, states = battle_like_states(seed=7, observe=False)
    d = states[0]  # 3 allies (ally 1 dead), 4 enemies (enemy 0 dead)
    d["ally"].observes = torch.tensor([[1, 1, 1, 0, 1, 1, 0], [0] * 7, [1] * 7], dtype=torch.bool)
    net = ACENetwork(schema, hidden=16, pool="mean_max")
    ind = IndividualQ.from_config(net, ModelConfig(hidden=16, pool="mean_max"), "encoders")

    def q0(state):
        with torch.no_grad():
            out = ind(state)
        return q_by_agent(out.q, out.index, 0)

    before = q0(d)
    hidden = {"enemy": [3]}  # column 6: ally 0 does not observe enemy 3
    moved = d.clone()
    moved["enemy"].x[hidden["enemy"]] += 3.0
    for et in schema.edge_types:
        e = moved[et].edge_index
        touch = torch.zeros(e.size(1), dtype=torch.bool)
        if et[0] == "enemy":
            touch |= torch.isin(e[0], torch.tensor(hidden["enemy"]))
        if et[2] == "enemy":
            touch |= torch.isin(e[1], torch.tensor(hidden["enemy"]))
        moved[et].edge_attr[touch] = torch.randn(int(touch.sum()), moved[et].edge_attr.size(1))
    assert close(q0(moved), before)
    # the other agents' actions: ally 2 left with stop alone leaves ally 0's values
    other = d.clone()
    mine = other[ACTION].actor == 0
    other[ACTION].available = torch.where(mine, other[ACTION].available, other[ACTION].slot == 0)
    assert close(q0(other), before)
    # ... while the centralised V of ally 2's candidates depends on ally 0's action
    agent0 = [a for a in range(d[ACTION].kind.numel()) if int(d[ACTION].actor[a]) == 0
              and bool(d[ACTION].available[a])]
    values = []
    for a in agent0[:2]:
        joint = torch.tensor([int(d[ACTION].slot[a]), 0, 0])
        with torch.no_grad():
            ro = net.rollout(d, selector=Forced(joint))
        values.append(ro.candidate_values[d[ACTION].actor == 2])
    assert not torch.allclose(values[0].nan_to_num(), values[1].nan_to_num(), atol=1e-4)
    # an observed unit (enemy 1) moves it
    seen = d.clone()
    seen["enemy"].x[1] += 3.0
    assert not close(q0(seen), before, tol=1e-4)


def test_decentralised_policy_is_each_agents_argmax_without_a_rollout(monkeypatch):
    torch.manual_seed(3)
    lrn = ACECTDE(spiders_fly_schema(), ACECTDEConfig(order="random"), ModelConfig(hidden=16))
    S = torch.tensor([[[0, 0], [4, 4], [2, 2]], [[1, 0], [0, 3], [4, 2]], [[4, 4], [4, 3], [0, 0]]])
    g = spiders_fly_graphs(S, 5)
    with torch.no_grad():
        out = lrn.net.individual(g)
    want = []
    for agent in range(6):
        qs = q_by_agent(out.q, out.index, agent)
        want.append(max(qs, key=lambda s: (qs[s], -s)))  # the first maximum
    def no_rollout(*args, **kwargs):
        raise AssertionError("the decentralised policy must not use the sequential rollout")

    monkeypatch.setattr(type(lrn.net), "rollout", no_rollout)
    assert lrn.act_decentralised(g).tolist() == want
    assert set(lrn.policies(0)) == {"dec"}
    # ties: the first maximum among the available actions
    idx = out.index
    flat = torch.zeros(idx.action_kind.numel())
    rows = greedy_actions(flat, idx)
    first = [int(((idx.action_agent == a) & idx.action_available).nonzero()[0]) for a in range(6)]
    assert rows.tolist() == first
    with pytest.raises(FloatingPointError):
        greedy_actions(torch.full_like(flat, float("nan")), idx)


@pytest.mark.parametrize("share", ["encoders", "all", "none"])
def test_shared_parts_and_checkpoint(share):
    torch.manual_seed(4)
    cfg, model = ACECTDEConfig(share=share), ModelConfig(hidden=8)
    lrn = ACECTDE(spiders_fly_schema(), cfg, model)
    net, ind = lrn.net, lrn.net.individual
    assert str(ind) == "IndividualQ(8, conv=ace, pool=mean)"
    assert (ind.unit_encoder is net.unit_encoder) == (share != "none")
    assert (ind.action_encoder is net.action_encoder) == (share != "none")
    assert (ind.value_head is net.value_head) == (share == "all")
    owned = {id(p) for p in lrn.optimizer.param_groups[0]["params"]}
    assert all(id(p) in owned for p in ind.parameters())  # every part is trained
    assert lrn.target_net.individual.unit_encoder is not ind.unit_encoder
    target = lrn.target_net
    assert (target.individual.unit_encoder is target.unit_encoder) == (share != "none")
    S = torch.tensor([[[0, 0], [4, 4], [2, 2]], [[1, 0], [0, 3], [4, 2]]])
    S2 = torch.tensor([[[1, 2], [4, 4], [2, 2]], [[1, 1], [0, 2], [4, 1]]])
    g, g2 = spiders_fly_graphs(S, 5), spiders_fly_graphs(S2, 5)
    logs = lrn.update(g, torch.tensor([2, 0, 4, 3]), torch.tensor([10.0, 0.0]),
                      torch.tensor([True, False]), g2)
    assert {"td_loss", "distill_loss", "ind_q_mean", "dec_agree"} <= set(logs)
    torch.manual_seed(5)
    again = ACECTDE(spiders_fly_schema(), cfg, model)
    again.load_state_dict(lrn.state_dict())
    with torch.no_grad():
        assert torch.equal(again.net.individual(g).q, ind(g).q)


def test_distillation_loss_by_hand_and_it_learns():
    torch.manual_seed(6)
    lrn = ACECTDE(spiders_fly_schema(), ACECTDEConfig(distill_weight=2.0), ModelConfig(hidden=16))
    S = torch.tensor([[[0, 0], [4, 4], [2, 2]], [[1, 0], [0, 3], [4, 2]]])
    g = spiders_fly_graphs(S, 5)
    loss, logs = lrn.distill_loss(g)
    with torch.no_grad():
        best = lrn.net.rollout(g)
        target = counterfactual_values(lrn.net, best)
        q = lrn.net.individual(g).q
    avail = best.encoded.index.action_available
    by_hand = float(((q - target)[avail] ** 2).mean())
    assert math.isclose(float(loss.detach()), by_hand, rel_tol=1e-5)
    # distillation alone (the TD term's targets held still): Q moves to its targets
    first = logs["distill_loss"]
    for _ in range(60):
        loss, _ = lrn.distill_loss(g)
        lrn.step(loss)
    assert lrn.distill_loss(g)[1]["distill_loss"] < 0.2 * first


def test_dead_agents_are_left_out_of_the_distillation():
    torch.manual_seed(7)
    schema, states = battle_like_states(seed=9)
    lrn = ACECTDE(schema, ACECTDEConfig(), ModelConfig(hidden=8))
    b = collate(states)
    loss, logs = lrn.distill_loss(b)
    with torch.no_grad():
        best = lrn.net.rollout(b)
        target = counterfactual_values(lrn.net, best)
        out = lrn.net.individual(b)
    idx = out.index
    counted = idx.action_available & idx.unit_alive[idx.action_actor]
    assert not bool(counted[idx.action_agent == 1].any())  # ally 1 of state 0 is dead
    assert math.isclose(float(loss.detach()), float(((out.q - target)[counted] ** 2).mean()),
                        rel_tol=1e-5)


def test_config_errors():
    for bad, match in [({"distill_weight": 0.0}, "distill_weight"),
                       ({"distill_weight": float("inf")}, "distill_weight"),
                       ({"share": "value"}, "algo.share"),
                       ({"distill_from": "greedy"}, "algo.distill_from")]:
        with pytest.raises(ValueError, match=match):
            ACECTDEConfig(**bad)
    with pytest.raises(ValueError, match="invalid config: algo.share"):
        load_config(CONFIG, ["algo.share=encoder"])
    cfg = load_config(CONFIG)
    assert cfg.algo.name == "ace_ctde" and isinstance(cfg.algo, ACECTDEConfig)
    with pytest.raises(ValueError, match="share must be one of"):
        IndividualQ.from_config(ACENetwork(spiders_fly_schema(), hidden=8), ModelConfig(hidden=8),
                                "x")
    with pytest.raises(ValueError, match="model.messages=kind only"):
        IndividualQ.from_config(ACENetwork(spiders_fly_schema(), hidden=8),
                                ModelConfig(hidden=8, messages="pair"))
    with pytest.raises(ValueError, match="model.passive_input=features only"):
        IndividualQ.from_config(ACENetwork(spiders_fly_schema(), hidden=8),
                                ModelConfig(hidden=8, passive_input="embedding"))


def test_battle_observations_against_sight_ranges_by_hand():
    pytest.importorskip("jaxmarl")
    from acegnn.envs.smac.smax import SMAXTask

    task = SMAXTask("5m_vs_6m", num_envs=4, seed=3)
    g = torch.Generator().manual_seed(0)
    for _ in range(12):  # move the units apart and into range; some die
        avail = task.observe()["avail"]
        acts = torch.multinomial(avail.float().view(-1, avail.size(-1)), 1, generator=g)
        task.step(acts.view(4, -1))
    obs = task.observe()
    b = task.graphs(obs)
    idx = unit_index(task.schema, b)
    seen = observed_units(task.schema, b, idx)
    sight = task.engine.env.unit_type_sight_ranges  # per SMAX type: marines' 9
    units = obs["units"]
    n, U = task.n_agents, task.spec.n_units
    want = torch.zeros(4 * n, U, dtype=torch.bool)
    for e in range(4):
        for i in range(n):
            xi, yi, ai = (float(units[e, i, c]) for c in (1, 2, 6))
            r = float(sight[0])  # every unit of 5m_vs_6m is a marine (SMAX type 0)
            for j in range(U):
                xj, yj, aj = (float(units[e, j, c]) for c in (1, 2, 6))
                want[e * n + i, j] = ai > 0 and aj > 0 and math.hypot(xj - xi, yj - yi) < r
    assert torch.equal(seen, want)
    assert bool(want.any()) and not bool(want.all())  # some units in sight, some not
    # the individual value's views follow them
    views = agent_views(idx, seen)
    for a in range(4 * n):
        in_view = views.unit[views.index.unit_batch == a] - idx.unit_ptr[a // n]
        expect = want[a].nonzero().view(-1).tolist()
        own = a % n
        assert in_view.tolist() == sorted(set(expect) | {own})


def test_cli_train_and_eval_report_both_policies(tmp_path, capsys):
    tiny = ["train.total_samples=1024", "train.samples_per_collect=256", "train.batch_size=16",
            "train.updates_per_collect=2", "train.learning_starts=256", "train.eval_every=512",
            "train.eval_episodes=4", "train.progress=false", "model.hidden=8", "model.layers=1",
            "train.checkpoint_every=0", "train.exact_eval_every=1024", f"run.dir={tmp_path}",
            "run.name=ctde"]
    assert main(["train", CONFIG, *tiny]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"eval_success_rate", "eval_dec_success_rate", "eval_dec_steps_gap"} <= set(summary)
    with open(tmp_path / "ctde" / "eval.csv") as f:
        header = f.readline().strip().split(",")
    assert header[:5] == ["samples", "success_rate", "mean_steps", "oracle_steps", "steps_gap"]
    assert header[5:9] == ["dec_success_rate", "dec_mean_steps", "dec_oracle_steps", "dec_steps_gap"]
    # the exact evaluation of both policies, at the last row
    assert {"exact_steps_gap", "dec_exact_steps_gap", "dec_exact_success_rate"} <= set(header[9:])
    with open(tmp_path / "ctde" / "train.csv") as f:
        assert "distill_loss" in f.readline()
    assert main(["eval", str(tmp_path / "ctde"), "--episodes", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    for k in ("success_rate", "dec_success_rate", "exact_steps_gap", "dec_exact_steps_gap"):
        assert k in out, k

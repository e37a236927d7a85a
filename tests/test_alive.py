"""Units that are not alive (a dead unit of a battle) influence neither V nor any message.

States carry per-node ``alive`` flags; the unit encoder drops the edges of dead units and
the value head leaves them out of the pooling. Proven three ways: against the naive
reference (which filters by hand), by perturbing a dead unit's features (nothing moves),
and against the same state with the dead units removed from the graph altogether.
"""
import pytest
import torch

from acegnn.envs.synthetic import random_state, smac_like_schema
from acegnn.graph import ACTION, DenseLayout, build_state, collate, dense_actions, full_edges, only_noop
from acegnn.graph.index import unit_index
from acegnn.nn import ACENetwork, EpsilonGreedy, Forced

import reference as R
from test_rollout import assert_chosen_only_matches_full_rollout, max_error_against_reference

SIZES = [(3, 4), (4, 3), (2, 5)]


def with_dead(schema, d, dead_allies, dead_enemies):
    """``d`` with some units dead: flags set, dead allies keep only stop (slot 0), and
    no action targets a dead unit."""
    na, ne = d["ally"].x.size(0), d["enemy"].x.size(0)
    alive = {"ally": torch.ones(na, dtype=torch.bool), "enemy": torch.ones(ne, dtype=torch.bool)}
    alive["ally"][list(dead_allies)] = False
    alive["enemy"][list(dead_enemies)] = False
    d["ally"].alive, d["enemy"].alive = alive["ally"], alive["enemy"]
    store = d[ACTION]
    avail = store.available.clone()
    names = schema.node_type_names
    for a in range(avail.numel()):
        t = int(store.target[a])
        if t >= 0 and not bool(alive[names[int(store.target_type[a])]][t]):
            avail[a] = False
    store.available = only_noop(avail.view(na, -1), alive["ally"], 0).view(-1)
    return d


def without_dead(schema, d):
    """The same state with its dead units (and their edges and actions) removed."""
    keep = {t: d[t].alive for t in schema.node_types}
    new_id, x, ei, ea = R.kept_units(schema, d, keep)
    store = d[ACTION]
    names = schema.node_type_names
    rows = []
    for a in range(store.kind.numel()):
        if not bool(keep["ally"][int(store.actor[a])]):
            continue
        t = int(store.target[a])
        if t >= 0 and not bool(keep[names[int(store.target_type[a])]][t]):
            continue
        rows.append(a)
    rows = torch.tensor(rows)
    actions = {k: store[k][rows].clone() for k in ("kind", "actor_type", "actor", "target_type",
                                                     "target", "slot", "available")}
    actions["actor"] = new_id["ally"][actions["actor"]]
    has = actions["target"] >= 0
    for ti, t in enumerate(names):
        sel = has & (actions["target_type"] == ti)
        actions["target"][sel] = new_id[t][actions["target"][sel]]
    return build_state(schema, x, ei, ea, actions)


def dead_states(seed=0, heal=True):
    g = torch.Generator().manual_seed(seed)
    schema = smac_like_schema(heal=heal)
    states = []
    for na, ne in SIZES:
        d = random_state(schema, na, ne, g, mask_prob=0.2)
        states.append(with_dead(schema, d, dead_allies=[1], dead_enemies=[0, ne - 1]))
    return schema, states


@pytest.mark.parametrize("pool", ["mean", "sum", "max", "mean_max", "mean_max_split"])
@pytest.mark.parametrize("conv", ["ace", "gatv2", "transformer"])
def test_masked_rollout_matches_naive_reference(pool, conv):
    torch.manual_seed(0)
    schema, states = dead_states()
    net = ACENetwork(schema, hidden=16, conv=conv, pool=pool)
    ro = net.rollout(collate(states), order="random", selector=EpsilonGreedy(0.5),
                     generator=torch.Generator().manual_seed(1))
    assert max_error_against_reference(net, states, ro) < 1e-5
    # the reference itself pools only alive units: V differs from pooling all of them
    d = states[0]
    with torch.no_grad():
        units = R.encode_units(net, d)
        assert abs(float(R.value(net, units, R.alive_units(net, d)) - R.value(net, units))) > 1e-6


@pytest.mark.parametrize("pool", ["mean", "sum", "max", "mean_max", "mean_max_split"])
@pytest.mark.parametrize("layers", [1, 2])
def test_chosen_only_values_with_dead_units_match_full_rollout(pool, layers):
    """Every graph has 7 units here, so a successor is pooled over a view of the rows,
    the dead ones left out."""
    torch.manual_seed(3)
    schema, states = dead_states(seed=5)
    b = collate(states)
    assert b.num_graphs * 7 == sum(b[t].num_nodes for t in schema.node_types)
    assert_chosen_only_matches_full_rollout(ACENetwork(schema, hidden=16, pool=pool,
                                                       layers=layers), b)


@pytest.mark.parametrize("pool", ["mean", "max", "mean_max"])
@pytest.mark.parametrize("conv", ["ace", "transformer"])
def test_dead_units_equal_removed_units(pool, conv):
    """Every live candidate has the value it has when the dead units are not in the graph."""
    torch.manual_seed(1)
    schema, states = dead_states(seed=2)
    net = ACENetwork(schema, hidden=16, conv=conv, pool=pool, layers=2)
    for d in states:
        full = net.rollout(d)
        small = net.rollout(without_dead(schema, d))
        idx, sidx = full.encoded.index, small.encoded.index
        live_agents = d["ally"].alive.nonzero().view(-1)
        for k, agent in enumerate(live_agents.tolist()):
            rows = (idx.action_agent == agent) & idx.action_available
            srows = (sidx.action_agent == k) & sidx.action_available
            # same slots, same order (the kept action rows keep their order)
            assert idx.action_slot[rows].tolist() == sidx.action_slot[srows].tolist()
            assert torch.allclose(full.candidate_values[rows], small.candidate_values[srows],
                                  atol=1e-5)
        assert torch.equal(full.actions[live_agents], small.actions)


def test_features_of_dead_units_change_nothing():
    torch.manual_seed(2)
    schema, states = dead_states(seed=4)
    net = ACENetwork(schema, hidden=16, pool="mean_max")
    b = collate(states)
    ro = net.rollout(b, order="random", generator=torch.Generator().manual_seed(3))
    for d in states:
        d["enemy"].x[~d["enemy"].alive] += 5.0
        d["ally"].x[~d["ally"].alive] -= 3.0
        for et in schema.edge_types:
            e = d[et].edge_index
            dead = ~d[et[0]].alive[e[0]] | ~d[et[2]].alive[e[1]]
            d[et].edge_attr[dead] = torch.randn(int(dead.sum()), d[et].edge_attr.size(1))
    b2 = collate(states)
    ro2 = net.rollout(b2, order=ro.rank, selector=Forced(ro.actions))
    assert torch.allclose(ro.candidate_values.nan_to_num(), ro2.candidate_values.nan_to_num(),
                          atol=1e-6)
    v = net.value(ro.final_units, ro.encoded)
    v2 = net.value(ro2.final_units, ro2.encoded)
    assert torch.allclose(v, v2, atol=1e-6)
    # without the flags the same perturbation does move the values
    for d in states:
        del d["ally"].alive, d["enemy"].alive
    ro3 = net.rollout(collate(states), order=ro.rank, selector=Forced(ro.actions))
    assert not torch.allclose(ro.candidate_values.nan_to_num(), ro3.candidate_values.nan_to_num(),
                              atol=1e-3)


def test_every_unit_dead_reads_zero_pooling():
    torch.manual_seed(3)
    schema = smac_like_schema()
    d = random_state(schema, 2, 2, torch.Generator().manual_seed(0))
    d = with_dead(schema, d, dead_allies=[0, 1], dead_enemies=[0, 1])
    net = ACENetwork(schema, hidden=8, pool="mean_max")
    ro = net.rollout(d)
    expected = net.value_head.out(torch.zeros(1, 16)).squeeze()
    valued = ro.candidate_values[~torch.isnan(ro.candidate_values)]
    assert valued.numel() == 2 and torch.allclose(valued, expected.expand(2))


def attack_layout(na, ne, B=2):
    """A dense layout of ``na`` allies (stop, 4 moves, attack each of ``ne`` enemies, no
    heal) and ``B`` random states' features: ``(schema, layout, x, edge_attr, slots)``."""
    schema = smac_like_schema(heal=False)
    ei = {et: full_edges(na if et[0] == "ally" else ne, na if et[2] == "ally" else ne,
                         same=et[0] == et[2]) for et in schema.edge_types}
    kinds = torch.tensor(list(range(5)) + [schema.kind_index("attack")] * ne)
    targets = torch.tensor([-1] * 5 + list(range(ne)))
    S = 5 + ne
    actions = dense_actions(schema, "ally", kinds, torch.ones(na, S, dtype=torch.bool),
                            targets, [None] * 5 + ["enemy"] * ne)
    layout = DenseLayout(schema, {"ally": na, "enemy": ne}, ei, actions)
    x = {"ally": torch.randn(B, na, 6), "enemy": torch.randn(B, ne, 5)}
    ea = {et: torch.randn(B, e.size(1), 2) for et, e in ei.items()}
    return schema, layout, x, ea, S


def test_dense_layout_carries_alive_flags():
    na, ne, B = 2, 3, 2
    schema, layout, x, ea, S = attack_layout(na, ne, B)
    alive = {"ally": torch.tensor([[True, True], [True, False]]),
             "enemy": torch.tensor([[True, False, True], [True, True, True]])}
    avail = torch.ones(B, na * S, dtype=torch.bool)
    for _ in range(2):  # second time through the cached indexing
        idx = unit_index(schema, layout.batch(x, ea, avail, alive))
        assert idx.unit_alive.tolist() == [True, True, True, False, True,
                                           True, False, True, True, True]
    idx = unit_index(schema, layout.batch(x, ea, avail))
    assert idx.unit_alive is None
    with pytest.raises(ValueError, match="alive flags must be"):
        layout.batch(x, ea, avail, {"ally": torch.ones(B, 3)})


def test_target_on_switches_passive_messages_per_state():
    """``target_on`` off: the action sends no passive message in that state (football:
    only the ball owner's actions move the ball), as if passive embeddings were off."""
    torch.manual_seed(5)
    na, ne, B = 3, 4, 2
    schema, layout, x, ea, S = attack_layout(na, ne, B)
    avail = torch.ones(B, na * S, dtype=torch.bool)
    on = torch.ones(B, na, S, dtype=torch.bool)
    on[0] = False  # state 0: no action has its target
    on[1, 0, 5:7] = False  # state 1: ally 0's attacks on enemies 0 and 1 lose theirs
    net = ACENetwork(schema, hidden=16)
    first = dict(max_steps=1)  # the first agent's candidates: no earlier message in play
    with_on = net.rollout(layout.batch(x, ea, avail, target_on=on.view(B, -1)), **first)
    full = net.rollout(layout.batch(x, ea, avail), **first)
    net.action_encoder.passive = False
    none = net.rollout(layout.batch(x, ea, avail), **first)
    net.action_encoder.passive = True
    idx = with_on.encoded.index
    assert idx.action_target.view(B, na, S)[0].eq(-1).all()
    v, vf, vn = (r.candidate_values.view(B, na, S)[:, 0] for r in (with_on, full, none))
    assert torch.allclose(v[0], vn[0]) and not torch.allclose(vf[0, 5:], vn[0, 5:])
    assert torch.allclose(v[1, 5:7], vn[1, 5:7]) and torch.allclose(v[1, 7:], vf[1, 7:])
    assert torch.allclose(v[1, :5], vf[1, :5])
    with pytest.raises(ValueError, match="target_on must be"):
        layout.batch(x, ea, avail, target_on=on.view(B, -1)[:, :3])

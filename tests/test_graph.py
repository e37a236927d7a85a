"""Schema, state building, batching and the checks on bad input."""
import pytest
import torch

from acegnn.envs.synthetic import random_state, smac_like_schema
from acegnn.graph import (ACTION, ActionKind, GraphSchema, build_state, collate, dense_actions,
                          unit_index)
from acegnn.nn import ACENetwork


def state(na=2, ne=3, seed=0, **kw):
    schema = smac_like_schema()
    return schema, random_state(schema, na, ne, torch.Generator().manual_seed(seed), **kw)


def test_schema_validation():
    with pytest.raises(ValueError, match="agent type 'x'"):
        GraphSchema({"a": 2}, {}, ("x",), (ActionKind("stay"),))
    with pytest.raises(ValueError, match="edge type"):
        GraphSchema({"a": 2}, {("a", "r", "b"): 2}, ("a",), (ActionKind("stay"),))
    with pytest.raises(ValueError, match="positive feature width"):
        GraphSchema({"a": 0}, {}, ("a",), (ActionKind("stay"),))
    with pytest.raises(ValueError, match="unique"):
        GraphSchema({"a": 1}, {}, ("a",), (ActionKind("s"), ActionKind("s")))
    with pytest.raises(ValueError, match="reserved"):
        GraphSchema({"action": 1}, {}, ("action",), (ActionKind("s"),))
    schema = smac_like_schema()
    assert schema.targeted_kinds == (5, 6)
    assert schema.metadata()[0] == ["ally", "enemy"]


def test_flat_index_is_graph_major_with_variable_sizes():
    schema = smac_like_schema()
    g = torch.Generator().manual_seed(0)
    states = [random_state(schema, na, ne, g) for na, ne in [(2, 3), (1, 4), (3, 1)]]
    idx = unit_index(schema, collate(states))
    assert idx.unit_count.tolist() == [5, 5, 4]
    assert idx.unit_ptr.tolist() == [0, 5, 10, 14]
    # graph 1: ally at row 5, enemies rows 6..9
    assert idx.flat["ally"].tolist() == [0, 1, 5, 10, 11, 12]
    assert idx.flat["enemy"].tolist() == [2, 3, 4, 6, 7, 8, 9, 13]
    assert idx.agents.tolist() == [0, 1, 5, 10, 11, 12]
    # attack enemy 2 of graph 1 by its only ally: slot 5 + 2
    rows = (idx.action_batch == 1) & (idx.action_slot == 7)
    assert idx.action_target[rows].tolist() == [8]
    assert idx.action_actor[rows].tolist() == [5]
    # heal ally 1 of graph 2 (slot 5 + 1 + 1 = 7): target row 11
    rows = (idx.action_batch == 2) & (idx.action_slot == 7)
    assert idx.action_target[rows].tolist() == [11, 11, 11]  # every ally can heal ally 1


def test_dense_actions_layout():
    schema = smac_like_schema(heal=False)
    kinds = torch.tensor([0, 1, 5, 5])
    target = torch.tensor([-1, -1, 0, 1])
    t = dense_actions(schema, "ally", kinds, torch.ones(2, 4, dtype=torch.bool), target,
                      [None, None, "enemy", "enemy"])
    assert t["actor"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert t["slot"].tolist() == [0, 1, 2, 3] * 2
    assert t["target_type"].tolist() == [-1, -1, 1, 1] * 2


def test_feature_width_mismatch():
    schema, d = state()
    d["enemy"].x = torch.randn(3, 7)
    with pytest.raises(ValueError, match="node type 'enemy'.*width 5"):
        unit_index(schema, collate([d]))
    schema, d = state()
    et = ("ally", "near", "enemy")
    d[et].edge_attr = torch.randn(d[et].edge_index.size(1), 3)
    with pytest.raises(ValueError, match="edge type .*width 2"):
        ACENetwork(schema, hidden=8).rollout(d)


def test_nan_features():
    schema, d = state()
    d["ally"].x[0, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        ACENetwork(schema, hidden=8).rollout(d)


def test_target_not_in_graph():
    schema, d = state(na=2, ne=3)
    tgt = d[ACTION].target
    tgt[(tgt == 2) & (d[ACTION].target_type == 1)] = 3  # enemy 3 does not exist
    with pytest.raises(ValueError, match="target 3 is not a unit of type 'enemy'"):
        ACENetwork(schema, hidden=8).rollout(d)


def test_targeted_action_needs_target():
    schema, d = state()
    attack = d[ACTION].kind == 5
    d[ACTION].target[attack] = -1
    with pytest.raises(ValueError, match="targeted but has no target"):
        unit_index(schema, collate([d]))


def test_all_masked_agent():
    schema, d = state(na=3)
    d[ACTION].available[d[ACTION].actor == 1] = False
    with pytest.raises(ValueError, match="agent 1 .* no available action"):
        ACENetwork(schema, hidden=8).rollout(d)


def test_actor_must_be_agent_type():
    schema, d = state()
    d[ACTION].actor_type[0] = 1
    with pytest.raises(ValueError, match="agent type"):
        unit_index(schema, collate([d]))


def test_missing_types_are_stored_empty_and_batch():
    schema = smac_like_schema()
    acts = dense_actions(schema, "ally", torch.tensor([0, 1]), torch.ones(1, 2, dtype=torch.bool))
    d = build_state(schema, {"ally": torch.randn(1, 6)}, {}, {}, acts)
    assert d["enemy"].x.shape == (0, 5)
    b = collate([d, random_state(schema, 2, 2)])
    ro = ACENetwork(schema, hidden=8).rollout(b)
    assert ro.actions.shape == (3,)


def _dense_inputs(B, seed, mask_prob=0.3):
    schema = smac_like_schema()
    g = torch.Generator().manual_seed(seed)
    states = [random_state(schema, 3, 4, g, mask_prob=mask_prob) for _ in range(B)]
    x = {t: torch.stack([d[t].x for d in states]) for t in schema.node_types}
    ei = {et: states[0][et].edge_index for et in schema.edge_types}
    ea = {et: torch.stack([d[et].edge_attr for d in states]) for et in schema.edge_types}
    table = {k: states[0][ACTION][k] for k in ("kind", "actor_type", "actor", "target_type",
                                               "target", "slot")}
    avail = torch.stack([d[ACTION].available for d in states])
    return schema, states, x, ei, ea, table, avail


def test_dense_batch_equals_collated_states():
    from acegnn.graph.dense import dense_batch

    schema, states, x, ei, ea, table, avail = _dense_inputs(5, 3)
    ref = collate(states)
    dense = dense_batch(schema, x, ei, ea, table, avail)
    for key in list(schema.node_types) + list(schema.edge_types) + [ACTION]:
        for k, v in ref[key].items():
            assert torch.equal(dense[key][k], v) if torch.is_tensor(v) else dense[key][k] == v, (key, k)
    net = ACENetwork(schema, hidden=8)
    assert torch.equal(net.rollout(dense).candidate_values.nan_to_num(),
                       net.rollout(ref).candidate_values.nan_to_num())


def _same_index(a, b):
    for name, u, v in zip(a._fields, a, b):
        if isinstance(u, dict):
            assert u.keys() == v.keys() and all(torch.equal(u[k], v[k]) for k in u), name
        elif torch.is_tensor(u):
            assert torch.equal(u, v), name
        else:
            assert u == v, name


def test_dense_layout_reuses_its_indexing_and_reads_availability_anew():
    from acegnn.graph.dense import DenseLayout
    from acegnn.graph.flat import flat_inputs
    from acegnn.graph.index import compute_unit_index

    schema, _, x, ei, ea, table, _ = _dense_inputs(4, 0)
    layout = DenseLayout(schema, {"ally": 3, "enemy": 4}, ei, table)
    for B, seed in [(4, 1), (2, 2), (4, 3)]:  # two batch sizes, one of them twice
        schema, states, x, _, ea, _, avail = _dense_inputs(B, seed)
        batch = layout.batch(x, ea, avail)
        ref = collate(states)
        for check in (False, True):
            _same_index(unit_index(schema, batch, check=check), compute_unit_index(schema, ref))
        got, want = flat_inputs(schema, batch), flat_inputs(schema, ref)
        for u, v in zip(got[:3], want[:3]):
            assert torch.equal(u, v)
    assert set(k[0] for k in layout._tiles) == {2, 4}
    cached = layout._tiles[(4, "cpu")]["index"]  # the cache is used ...
    assert unit_index(schema, layout.batch(x, ea, avail)).agents is cached.agents
    # ... but not for a batch whose structure was replaced: indexed from scratch
    batch = layout.batch(x, ea, avail)
    swapped = batch[ACTION].actor.clone()
    swapped[batch[ACTION].actor_type == 0] = 2 - swapped[batch[ACTION].actor_type == 0]
    batch[ACTION].actor = swapped  # allies 0 and 2 trade their action lists
    got = unit_index(schema, batch)
    _same_index(got, compute_unit_index(schema, batch))
    assert not torch.equal(got.action_actor, cached.action_actor)
    assert layout.cached(batch, "probe", lambda: "built") == "built"
    assert "probe" not in layout._tiles[(4, "cpu")]
    # nor after an in-place write to a shared tensor, which retires the cached tiling
    batch = layout.batch(x, ea, avail)
    batch[ACTION].actor.copy_(swapped)
    _same_index(unit_index(schema, batch), compute_unit_index(schema, batch))
    assert (4, "cpu") not in layout._tiles
    fresh = layout.batch(x, ea, avail)
    _same_index(unit_index(schema, fresh), cached._replace(action_available=fresh[ACTION].available))


def test_dense_layout_still_checks_bad_input():
    from acegnn.graph.dense import DenseLayout

    schema, _, x, ei, ea, table, avail = _dense_inputs(3, 0)
    layout = DenseLayout(schema, {"ally": 3, "enemy": 4}, ei, table)
    unit_index(schema, layout.batch(x, ea, avail))  # fills the cache
    bad = dict(x, ally=x["ally"].clone())
    bad["ally"][1, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        unit_index(schema, layout.batch(bad, ea, avail))
    none = avail.clone()
    none[2, table["actor"] == 1] = False
    with pytest.raises(ValueError, match="agent 7 .* no available action"):
        unit_index(schema, layout.batch(x, ea, none))
    unit_index(schema, layout.batch(x, ea, none), check=False)  # unchecked, as before
    with pytest.raises(ValueError, match="3 units each"):
        layout.batch({"ally": x["ally"][:, :2], "enemy": x["enemy"]}, ea, avail)
    with pytest.raises(ValueError, match="edge type .* edges each"):
        layout.batch(x, {et: a[:, :-1] for et, a in ea.items()}, avail)
    with pytest.raises(ValueError, match="one flag per action"):
        layout.batch(x, ea, avail[:, :-1])
    with pytest.raises(ValueError, match="cache_size"):
        DenseLayout(schema, {"ally": 3, "enemy": 4}, ei, table, cache_size=0)
    wrong = dict(table, actor_type=torch.ones_like(table["actor_type"]))
    with pytest.raises(ValueError, match="agent type"):  # the structure is checked up front
        DenseLayout(schema, {"ally": 3, "enemy": 4}, ei, wrong)


def test_spiders_fly_graph_features():
    from acegnn.envs.spiders_fly import spiders_fly_graphs

    pos = torch.tensor([[[0, 0], [4, 2], [1, 4]]])
    b = spiders_fly_graphs(pos, 5)
    assert torch.allclose(b["spider"].x, torch.tensor([[1, 0, 0, 0, 0], [0, 1, 0, 1, 0.5]]))
    assert torch.allclose(b["fly"].x, torch.tensor([[0, 0, 1, 0.25, 1]]))
    et = ("spider", "near", "fly")  # distance on the two axes, fly - spider, scaled
    assert torch.allclose(b[et].edge_attr, torch.tensor([[0.25, 1.0], [-0.75, 0.5]]))
    avail = b[ACTION].available.view(2, 5)  # stay up down left right
    assert avail.tolist() == [[True, False, True, False, True], [True, True, False, True, True]]


def test_spiders_fly_onehot_features():
    from acegnn.config import load_config
    from acegnn.envs.spiders_fly import spiders_fly_graphs

    pos = torch.tensor([[[0, 0], [4, 2], [1, 4]]])
    scalar, onehot = spiders_fly_graphs(pos, 5), spiders_fly_graphs(pos, 5, "onehot")
    assert onehot["spider"].x.shape == (2, 5 + 10) and onehot["fly"].x.shape == (1, 15)
    assert torch.equal(onehot["spider"].x[:, :5], scalar["spider"].x)  # scalar part kept
    # row one-hot then column one-hot: spider 1 at (4, 2), the fly at (1, 4)
    assert onehot["spider"].x[1, 5:].nonzero().view(-1).tolist() == [4, 5 + 2]
    assert onehot["fly"].x[0, 5:].nonzero().view(-1).tolist() == [1, 5 + 4]
    et = ("spider", "near", "fly")  # fly - spider: (1, 4) and (-3, 2), offset by N - 1 = 4
    attr = onehot[et].edge_attr
    assert attr.shape == (2, 2 + 18) and torch.equal(attr[:, :2], scalar[et].edge_attr)
    assert attr[0, 2:].nonzero().view(-1).tolist() == [1 + 4, 9 + 4 + 4]
    assert attr[1, 2:].nonzero().view(-1).tolist() == [-3 + 4, 9 + 2 + 4]
    task = load_config(None, ["env.features=onehot", "env.grid_size=7"]).env.make(0)
    assert task.schema.node_types["spider"] == 5 + 14 and task.graphs(task.observe())["fly"].x.size(1) == 19
    with pytest.raises(ValueError, match="features 'binary'"):
        load_config(None, ["env.features=binary"])


def test_replay_buffer_wraps_and_checks_shapes():
    from acegnn.buffers import ReplayBuffer

    buf = ReplayBuffer(4, {"p": ((2,), torch.int8)}, n_agents=2)
    for i in range(3):  # 6 rows into 4 slots: rows 2..5 remain
        obs = {"p": torch.full((2, 2), 2 * i).add(torch.arange(2).view(2, 1))}
        buf.add(obs, torch.zeros(2, 2, dtype=torch.long), torch.arange(2.0) + 2 * i,
                torch.zeros(2, dtype=torch.bool), obs)
    assert len(buf) == 4 and sorted(buf.reward.tolist()) == [2.0, 3.0, 4.0, 5.0]
    big = {"p": torch.arange(6).view(6, 1).expand(6, 2)}  # more rows than capacity
    buf.add(big, torch.zeros(6, 2, dtype=torch.long), torch.arange(6.0),
            torch.zeros(6, dtype=torch.bool), big)
    assert sorted(buf.reward.tolist()) == [2.0, 3.0, 4.0, 5.0] and len(buf) == 4
    assert sorted(buf.obs["p"][:, 0].tolist()) == [2, 3, 4, 5]
    with pytest.raises(ValueError, match="obs\\['p'\\]"):
        buf.add({"p": torch.zeros(2, 3)}, torch.zeros(2, 2, dtype=torch.long), torch.zeros(2),
                torch.zeros(2, dtype=torch.bool), {"p": torch.zeros(2, 3)})
    with pytest.raises(ValueError, match="NaN"):
        buf.add(big, torch.zeros(6, 2, dtype=torch.long), torch.full((6,), float("nan")),
                torch.zeros(6, dtype=torch.bool), big)
    wide = {"p": torch.tensor([[0, 127], [-128, 128]])}  # 128 does not fit int8
    with pytest.raises(ValueError, match=r"obs\['p'\] holds values in \[-128, 128\].*int8"):
        buf.add(wide, torch.zeros(2, 2, dtype=torch.long), torch.zeros(2),
                torch.zeros(2, dtype=torch.bool), wide)
    assert len(buf) == 4 and sorted(buf.reward.tolist()) == [2.0, 3.0, 4.0, 5.0]  # unchanged


def test_replay_buffer_resizes_only_when_it_never_wrapped():
    from acegnn.buffers import ReplayBuffer

    def filled(capacity, rows):
        buf = ReplayBuffer(capacity, {"p": ((2,), torch.int8)}, n_agents=2)
        obs = {"p": torch.arange(rows).view(rows, 1).expand(rows, 2)}
        buf.add(obs, torch.zeros(rows, 2, dtype=torch.long), torch.arange(float(rows)),
                torch.zeros(rows, dtype=torch.bool), obs)
        return buf

    big = ReplayBuffer(8, {"p": ((2,), torch.int8)}, n_agents=2)
    big.load_state_dict(filled(6, 4).state_dict())  # 4 of 6 rows used: grows to 8
    assert len(big) == 4 and big.pos == 4 and big.reward[:4].tolist() == [0.0, 1.0, 2.0, 3.0]
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    assert torch.equal(big.sample(5, g1).reward, filled(8, 4).sample(5, g2).reward)
    with pytest.raises(ValueError, match="capacity 4 differs .* wrapped around"):
        big.load_state_dict(filled(4, 4).state_dict())  # full: may have wrapped
    small = ReplayBuffer(3, {"p": ((2,), torch.int8)}, n_agents=2)
    small.load_state_dict(filled(9, 3).state_dict())  # 3 of 9 rows: shrinks to 3 (full)
    assert len(small) == 3 and small.pos == 0
    seven = {"p": torch.full((1, 2), 7)}
    small.add(seven, torch.zeros(1, 2, dtype=torch.long), torch.tensor([7.0]),
              torch.zeros(1, dtype=torch.bool), seven)
    assert small.reward.tolist() == [7.0, 1.0, 2.0]  # the oldest row is overwritten first
    with pytest.raises(ValueError, match="capacity 9 differs .* do not fit"):
        small.load_state_dict(filled(9, 4).state_dict())


def test_logger_widens_columns(tmp_path):
    from acegnn.utils.logger import Logger
    import csv

    log = Logger(str(tmp_path))
    log.log("train", 1, {"epsilon": 1.0})
    log.log("train", 2, {"epsilon": 0.9, "td_loss": 0.5})
    log.close()
    with open(tmp_path / "train.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows == [{"samples": "1", "epsilon": "1.0", "td_loss": ""},
                    {"samples": "2", "epsilon": "0.9", "td_loss": "0.5"}]

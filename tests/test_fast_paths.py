"""The fast paths of the decision with rollout give the results of the plain ones.

* a dense layout keeps the rollout's plan and candidate routes per batch size: a batch
  of it decides as the same batch indexed from scratch, also when availability and
  alive flags change from one batch to the next;
* acting (no autograd, state updated in place) values as learning does (autograd);
* the value encoder's linear-readout shortcut (one scalar per unit) values as the
  general path (pooled hidden vectors) does;
* the unit encoder's masked mean over edges equals dropping the edges of dead units;
* a selector that only knows flat candidates chooses as one that reads the table;
* a layer whose input is narrower than its output (node and edge features) gives
  torch.nn.Linear's values and gradients;
* the value encoder's max pooling (dead units zeroed, the max's own backward) gives the
  values and gradients of a max over the alive units by ``amax``.
"""
import pytest
import torch

from acegnn.envs.smac.units import SMAX_ACTIONS, BattleSpec, UnitStats, battle_graphs, battle_schema
from acegnn.envs.synthetic import random_state, smac_like_schema
from acegnn.graph import collate
from acegnn.graph.dense import layout_of
from acegnn.nn import ACENetwork, EpsilonGreedy, Forced, Greedy, Selector
from acegnn.nn.se_state import table_layout
from acegnn.nn.selectors import CandidateTable

SPEC = BattleSpec(3, 4, (32.0, 32.0), SMAX_ACTIONS,
                  UnitStats(attack_range=(6.0,) * 9, sight_range=(9.0,) * 9))


def battles(B, seed):
    """Random battle observations: some units dead, attacks available in range."""
    g = torch.Generator().manual_seed(seed)
    U = SPEC.n_units
    units = torch.zeros(B, U, 7)
    units[..., 0] = 0  # marines
    units[..., 1:3] = 16 + 8 * torch.rand(B, U, 2, generator=g)
    units[..., 3] = torch.rand(B, U, generator=g)
    units[..., 5] = torch.rand(B, U, generator=g)
    units[..., 6] = (torch.rand(B, U, generator=g) > 0.25).float()
    units[0, :, 6] = 1.0  # one battle with every unit alive
    avail = torch.rand(B, SPEC.n_allies, SPEC.slots, generator=g) > 0.4
    dead = units[:, :SPEC.n_allies, 6] == 0
    avail[dead] = False
    avail[..., SMAX_ACTIONS.noop] |= dead
    avail[~avail.any(-1)] = True
    return battle_graphs(units, avail, SPEC)


def unlaid(batch):
    """The same batch without its dense layout: indexed and planned from scratch."""
    out = batch.clone()
    out.__dict__.pop("_dense_layout", None)
    return out


def same_rollout(a, b, exact=True):
    for field in ("actions", "action_ids", "rank", "greedy_ids", "next_agent", "first_agent"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    for field in ("candidate_values", "chosen_value", "max_value", "final_units"):
        x, y = getattr(a, field), getattr(b, field)
        assert torch.equal(x.isnan(), y.isnan()), field
        if exact:
            assert torch.equal(x.nan_to_num(), y.nan_to_num()), field
        else:
            assert torch.allclose(x.nan_to_num(), y.nan_to_num(), atol=1e-6), field


@pytest.mark.parametrize("pool,layers,messages", [("mean", 1, "kind"), ("max", 1, "kind"),
                                                   ("mean", 2, "kind"), ("mean", 2, "pair")])
def test_layout_cache_decides_as_from_scratch(pool, layers, messages):
    torch.manual_seed(0)
    net = ACENetwork(battle_schema(), hidden=32, pool=pool, layers=layers, messages=messages)
    with torch.no_grad():
        for seed in range(3):  # one size: the second and third batches reuse the plan
            b = battles(5, seed)
            assert layout_of(b, net.schema) is not None and layout_of(unlaid(b), net.schema) is None
            for kw in ({}, {"selector": EpsilonGreedy(0.5)}, {"max_steps": 2}):
                gen = [torch.Generator().manual_seed(seed) for _ in range(2)]
                same_rollout(net.rollout(b, generator=gen[0], **kw),
                             net.rollout(unlaid(b), generator=gen[1], **kw))
            key = ("rollout", table_layout(net.encode(b)))
            assert layout_of(b, net.schema).cached(b, key, lambda: None) is not None


def test_written_outputs_leave_the_kept_plan_alone():
    torch.manual_seed(0)
    net = ACENetwork(battle_schema(), hidden=16)
    with torch.no_grad():
        first = net.rollout(battles(3, 0))
        expected = (first.rank.clone(), first.next_agent.clone(), first.first_agent.clone())
        for t in (first.rank, first.next_agent, first.first_agent):
            t.fill_(7)
        again = net.rollout(battles(3, 0))
    for a, b in zip((again.rank, again.next_agent, again.first_agent), expected):
        assert torch.equal(a, b)


def test_acting_in_place_values_as_learning():
    torch.manual_seed(1)
    net = ACENetwork(battle_schema(), hidden=32)
    b = battles(4, 1)
    with torch.no_grad():
        acted = net.rollout(b)
    learned = net.rollout(b)
    assert learned.chosen_value.requires_grad
    same_rollout(acted, learned)
    forced = Forced(acted.actions)
    for values in ("chosen", "successors"):
        with torch.no_grad():
            a = net.rollout(b, selector=forced, values=values)
        same_rollout(a, net.rollout(b, selector=forced, values=values))


@pytest.mark.parametrize("pool", ["mean", "sum"])
def test_linear_readout_shortcut_values_as_pooled_vectors(pool, monkeypatch):
    from acegnn.nn.value_head import ValueHead

    torch.manual_seed(2)
    schema = smac_like_schema()
    g = torch.Generator().manual_seed(0)
    b = collate([random_state(schema, na, ne, g, mask_prob=0.3) for na, ne in [(3, 2), (2, 4)]])
    net = ACENetwork(schema, hidden=16, pool=pool)
    assert net.value_head.linear_readout
    fast = net.rollout(b, order="random", generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(ValueHead, "linear_readout", property(lambda self: False))
    plain = net.rollout(b, order=fast.rank, selector=Forced(fast.actions))
    same_rollout(fast, plain, exact=False)


@pytest.mark.parametrize("conv", ["ace"])
def test_masked_edge_mean_equals_dropped_edges(conv):
    torch.manual_seed(3)
    net = ACENetwork(battle_schema(), hidden=16, conv=conv)
    b = battles(3, 2)
    masked = net.encode(b).units
    net.unit_encoder.conv.encodes_edges = False  # embed every edge, drop dead units' edges
    dropped = net.encode(b).units
    assert torch.allclose(masked, dropped, atol=1e-6)


class FlatGreedy(Selector):
    """Greedy through the flat candidates only (the default select_column)."""

    def select(self, cands, generator=None):
        vmax = torch.full((cands.num_agents,), float("-inf")).scatter_reduce(
            0, cands.agent, cands.values, reduce="amax")
        first = torch.full((cands.num_agents,), cands.rows.numel()).scatter_reduce(
            0, cands.agent, torch.where(cands.values == vmax[cands.agent],
                                        torch.arange(cands.rows.numel()), cands.rows.numel()),
            reduce="amin")
        return cands.rows[first[cands.acting]]


def test_flat_selectors_choose_as_table_selectors():
    torch.manual_seed(4)
    schema = smac_like_schema()
    g = torch.Generator().manual_seed(1)
    b = collate([random_state(schema, na, ne, g, mask_prob=0.4) for na, ne in [(3, 2), (2, 4), (1, 1)]])
    net = ACENetwork(schema, hidden=16)
    same_rollout(net.rollout(b, selector=Greedy()), net.rollout(b, selector=FlatGreedy()))


def test_candidate_table_round_trip_and_uniform_exploration():
    rows = torch.tensor([[3, 4, 6, 3], [7, 8, 9, 10]])
    valid = torch.tensor([[True, False, True, False], [True, True, True, True]])
    values = torch.tensor([[0.5, 9.0, 0.7, 9.0], [1.0, 0.0, 1.0, -1.0]])
    table = CandidateTable(rows, values, valid, torch.tensor([0, 2]), torch.tensor([2, 0]), 3)
    flat = table.candidates()
    assert flat.rows.tolist() == [3, 6, 7, 8, 9, 10] and flat.agent.tolist() == [0, 0, 2, 2, 2, 2]
    assert flat.greedy.tolist() == [6, 7]
    assert table.column(torch.tensor([6, 9])).tolist() == [2, 2]
    gen = torch.Generator().manual_seed(0)
    cols = torch.stack([EpsilonGreedy(1.0).select_column(table, gen) for _ in range(4000)])
    assert set(cols[:, 0].tolist()) == {0, 2}  # never an entry that is not a candidate
    freq = torch.bincount(cols[:, 1], minlength=4).float() / cols.size(0)
    assert torch.allclose(freq, torch.full((4,), 0.25), atol=0.03)
    assert torch.equal(EpsilonGreedy(0.0).select_column(table, gen), table.greedy)


def test_layout_batch_with_other_units_is_indexed_and_checked_from_scratch():
    from acegnn.graph.index import unit_index

    b = battles(2, 0)
    unit_index(battle_schema(), b)  # cached
    b["enemy"].x = b["enemy"].x[:-1]  # one unit fewer than the layout's edges reach
    with pytest.raises(ValueError, match="outside its node sets"):
        unit_index(battle_schema(), b)


def test_edge_sum_in_chunks_equals_one_pass(monkeypatch):
    import acegnn.nn.unit_encoder as ue

    torch.manual_seed(5)
    enc = ue.mlp(5, 8, layers=2)
    attr = torch.randn(50, 5, requires_grad=True)
    dst = torch.randint(0, 7, (50,))
    start = torch.randn(7, 8, requires_grad=True)
    weight = torch.randn(7, 8)
    inputs = [start, attr, *enc.parameters()]
    plain = start.index_add(0, dst, enc(attr))
    expected = torch.autograd.grad((plain * weight).sum(), inputs)
    monkeypatch.setattr(ue, "EDGE_CHUNK", 8)  # 7 chunks, encoded again in backward
    chunked = ue.edge_sum(enc, attr, dst, start)
    assert torch.allclose(chunked, plain, atol=1e-6)
    for a, b in zip(torch.autograd.grad((chunked * weight).sum(), inputs), expected):
        assert torch.allclose(a, b, atol=1e-5)
    with torch.no_grad():
        assert torch.allclose(ue.edge_sum(enc, attr, dst, start.clone()), plain, atol=1e-6)


def test_chunked_edges_train_as_one_pass(monkeypatch):
    import acegnn.nn.unit_encoder as ue

    torch.manual_seed(6)
    net = ACENetwork(battle_schema(), hidden=16)
    b = battles(3, 4)
    grads = []
    for chunk in (ue.EDGE_CHUNK, 7):
        monkeypatch.setattr(ue, "EDGE_CHUNK", chunk)
        net.zero_grad()
        net.rollout(b).chosen_value.sum().backward()
        grads.append([p.grad.clone() for p in net.parameters()])
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-5)


def test_battle_edges_from_all_pairs_equal_per_relation():
    """battle_graphs computes every ordered pair once; per relation by hand, bit for bit."""
    from acegnn.envs.smac.units import DISTANCE_SCALE, RELATIONS

    g = torch.Generator().manual_seed(7)
    U, B = SPEC.n_units, 4
    units = torch.zeros(B, U, 7)
    units[..., 1:3] = 32 * torch.rand(B, U, 2, generator=g)
    units[..., 6] = (torch.rand(B, U, generator=g) > 0.3).float()
    units[:, :, 0] = torch.randint(0, 2, (B, U), generator=g).float()
    avail = torch.ones(B, SPEC.n_allies, SPEC.slots, dtype=torch.bool)
    b = battle_graphs(units, avail, SPEC)
    first = {"ally": 0, "enemy": SPEC.n_allies}
    attack = torch.tensor(SPEC.stats.attack_range)[units[..., 0].long()]
    for et in RELATIONS:
        E = b[et].edge_index.size(1) // B
        src, dst = b[et].edge_index[:, :E]  # graph 0's: rows within the node types
        i, j = first[et[0]] + src, first[et[2]] + dst  # columns of `units`
        delta = units[:, j, 1:3] - units[:, i, 1:3]
        dist = delta.norm(dim=-1, keepdim=True)
        live = (units[:, i, 6] > 0) & (units[:, j, 6] > 0)
        expected = torch.cat([delta / DISTANCE_SCALE, dist / DISTANCE_SCALE,
                              (dist < attack[:, i].unsqueeze(-1)).float(),
                              (dist < 9.0).float()], -1) * live.unsqueeze(-1)
        assert torch.equal(b[et].edge_attr.view(B, E, -1), expected), et


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(37, 5), (4, 9, 5)])
def test_narrow_linear_gives_linear_values_and_gradients(bias, shape):
    from torch import nn

    from acegnn.nn.unit_encoder import NarrowLinear, mlp

    torch.manual_seed(0)
    plain, narrow = nn.Linear(5, 24, bias=bias), NarrowLinear(5, 24, bias=bias)
    narrow.load_state_dict(plain.state_dict())
    x = torch.randn(*shape, dtype=torch.float64)
    plain, narrow = plain.double(), narrow.double()
    g = torch.randn(*shape[:-1], 24, dtype=torch.float64)
    grads = []
    for layer in (plain, narrow):
        xi = x.clone().requires_grad_(True)
        out = layer(xi)
        out.backward(g)
        grads.append([out.detach(), xi.grad, *(p.grad for p in layer.parameters())])
    assert len(grads[0]) == len(grads[1]) == 3 + bias
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    with torch.no_grad():
        assert torch.equal(narrow(x), plain(x))
    kinds = [type(m) for m in mlp(5, 16, layers=2) if isinstance(m, nn.Linear)]
    assert kinds == [NarrowLinear, nn.Linear]  # narrow in, then as wide in as out


def test_max_over_units_gives_amax_gradient_with_ties():
    from acegnn.nn.value_head import max_over_units

    g = torch.Generator().manual_seed(0)
    dense = torch.randint(0, 3, (6, 5, 7), generator=g).double()  # many ties per column
    dense[0, :, 0] = 2.0  # five rows tie
    grad = torch.randn(6, 7, generator=g, dtype=torch.float64)
    got, want = (dense.clone().requires_grad_(True) for _ in range(2))
    max_over_units(got).backward(grad)
    want.amax(1).backward(grad)
    assert torch.equal(max_over_units(got.detach()), want.detach().amax(1))
    torch.testing.assert_close(got.grad, want.grad, rtol=0, atol=1e-15)
    assert torch.allclose(got.grad[0, :, 0], grad[0, 0] / 5)  # shared by the five


@pytest.mark.parametrize("sizes", [(5, 5, 5, 5), (3, 5, 2, 4)])  # a view; a scatter
@pytest.mark.parametrize("pool", ["max", "mean_max", "mean_max_split"])
def test_pooled_max_over_alive_units_as_masked_amax(pool, sizes):
    """Dead units are zeroed, not set to -inf, before the max: V and every gradient are
    those of a max over the alive units only (a graph with none pools to 0), where the
    graphs have one size (pooled as a view) and several (scattered)."""
    from acegnn.graph.index import UnitIndex
    from acegnn.nn.value_head import ValueHead

    torch.manual_seed(4)
    B, H, U = len(sizes), 8, sum(sizes)
    head = ValueHead(H, pool, layers=2).double()
    units = torch.randn(U, H, dtype=torch.float64)
    count = torch.tensor(sizes)
    ptr = torch.cat([torch.zeros(1, dtype=torch.long), count.cumsum(0)])
    alive = torch.rand(U) < 0.6
    alive[ptr[1]:ptr[2]] = False  # graph 1: every unit dead
    e = torch.zeros(0, dtype=torch.long)
    index = UnitIndex(B, U, torch.arange(B).repeat_interleave(count), count, ptr, {},
                      *[e] * 10, unit_alive=alive)

    def reference(u):
        h, pooled = head.unit_hidden(u), []
        for g in range(B):
            rows = h[ptr[g]:ptr[g + 1]][alive[ptr[g]:ptr[g + 1]]]
            top = rows.amax(0) if len(rows) else h.new_zeros(h.size(1))
            mean = rows.sum(0) / max(len(rows), 1)
            if pool == "mean_max_split":  # 2H-wide rows: the first H averaged, the last H maxed
                pooled.append(torch.cat([mean[:H], top[H:]]))
            else:
                pooled.append(torch.cat([mean, top]) if pool == "mean_max" else top)
        return head.out(torch.stack(pooled)).squeeze(-1)

    grads = []
    for fn in (lambda u: head.pooled_value(head.unit_hidden(u), index), reference):
        head.zero_grad()
        u = units.clone().requires_grad_(True)
        v = fn(u)
        v.backward(torch.arange(1.0, B + 1, dtype=torch.float64))
        assert v.requires_grad
        grads.append([v.detach(), u.grad, *(p.grad.clone() for p in head.parameters())])
    assert (head.unit_hidden(units) == 0).any()  # ReLU zeros: ties at a maximum of 0
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)

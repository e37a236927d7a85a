"""The efficient rollout against a naive, from-scratch reference, and its contract."""
import copy
import os

import pytest
import torch

from acegnn.envs.synthetic import random_state, smac_like_schema
from acegnn.graph import ACTION, collate
from acegnn.nn import ACENetwork, EpsilonGreedy, Forced

import reference as R

SIZES = [(2, 3), (3, 2), (1, 1), (4, 3), (3, 5)]


def make_states(seed=0, mask_prob=0.3, heal=True, sizes=SIZES):
    g = torch.Generator().manual_seed(seed)
    schema = smac_like_schema(heal=heal)
    return schema, [random_state(schema, na, ne, g, mask_prob=mask_prob) for na, ne in sizes]


def max_error_against_reference(net, states, ro):
    idx = ro.encoded.index
    err, checked = 0.0, 0
    for gi, d in enumerate(states):
        agents = (idx.agent_batch == gi).nonzero().view(-1)
        ranks = ro.rank[agents].tolist()
        order = sorted(range(len(agents)), key=lambda i: ranks[i])
        ref = R.reference_candidates(net, d, order, ro.actions[agents].tolist())
        for step, agent in zip(ref, order):
            rows = (idx.action_agent == agents[agent]).nonzero().view(-1)
            evaluated = rows[~torch.isnan(ro.candidate_values[rows])]
            assert sorted(idx.action_slot[evaluated].tolist()) == sorted(step)  # only available
            for slot, v in step.items():
                row = rows[idx.action_slot[rows] == slot].item()
                err = max(err, abs(ro.candidate_values[row].item() - v.item()))
                checked += 1
    assert checked > 0
    return err


@pytest.mark.parametrize("pool", ["mean", "sum", "max", "mean_max", "mean_max_split"])
@pytest.mark.parametrize("conv", ["ace", "gatv2", "transformer"])
def test_matches_naive_reference(pool, conv):
    torch.manual_seed(0)
    schema, states = make_states()
    net = ACENetwork(schema, hidden=16, conv=conv, pool=pool)
    gen = torch.Generator().manual_seed(1)
    ro = net.rollout(collate(states), order="random", selector=EpsilonGreedy(0.5), generator=gen)
    assert max_error_against_reference(net, states, ro) < 1e-5


def no_library_encoder(monkeypatch):
    """Make the library's unit encoder and PyG's attention layers fail if called."""
    from torch_geometric.nn import GATv2Conv, TransformerConv

    from acegnn.nn.unit_encoder import PyGUnitConv, UnitEncoder

    def fail(*args, **kwargs):
        raise AssertionError("the reference called the library's encoder")

    for cls in (UnitEncoder, PyGUnitConv, GATv2Conv, TransformerConv):
        monkeypatch.setattr(cls, "forward", fail)


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("conv", ["gatv2", "transformer"])
def test_attention_convs_match_hand_written_layers(conv, heads, monkeypatch):
    """The reference computes GATv2 and TransformerConv by hand (the library's encoder is
    never called while it runs), with several heads and attention made sharp, so that
    weights far from uniform are checked."""
    torch.manual_seed(0)
    schema, states = make_states(seed=9)
    net = ACENetwork(schema, hidden=16, conv=conv, pool="mean_max", conv_kwargs={"heads": heads})
    with torch.no_grad():
        for layer in net.unit_encoder.conv.conv.convs.values():
            (layer.att if conv == "gatv2" else layer.lin_query.weight).mul_(4.0)
    b = collate(states)
    library = net.encode(b).units
    ro = net.rollout(b, order="random", selector=EpsilonGreedy(0.5),
                     generator=torch.Generator().manual_seed(1))
    no_library_encoder(monkeypatch)
    with torch.no_grad():
        by_hand = torch.cat([R.encode_units(net, d) for d in states])
    # one graph after the other, units in schema type order within each: as the flat rows
    assert torch.allclose(by_hand, library, atol=1e-5)
    uniform = R.softmax
    monkeypatch.setattr(R, "softmax", lambda s: torch.ones_like(s) / s.numel())
    with torch.no_grad():  # the attention weights matter
        assert not torch.allclose(torch.cat([R.encode_units(net, d) for d in states]), library,
                                  atol=1e-3)
    monkeypatch.setattr(R, "softmax", uniform)
    assert max_error_against_reference(net, states, ro) < 1e-5


@pytest.mark.parametrize("passive,layers,messages,value_layers,passive_input", [
    (True, 1, "kind", None, "features"), (False, 1, "kind", None, "features"),
    (True, 3, "kind", None, "features"), (True, 1, "pair", None, "features"),
    (True, 2, "pair", None, "features"), (False, 2, "pair", None, "features"),
    (True, 1, "kind", 2, "features"), (True, 2, "kind", 1, "features"),
    (True, 1, "kind", None, "embedding"), (True, 2, "kind", None, "embedding")])
def test_matches_reference_with_and_without_passive(passive, layers, messages, value_layers,
                                                    passive_input):
    torch.manual_seed(1)
    schema, states = make_states(seed=3, mask_prob=0.5)
    net = ACENetwork(schema, hidden=32, passive=passive, pool="mean_max", layers=layers,
                     messages=messages, value_layers=value_layers, passive_input=passive_input)
    if value_layers is not None:  # the value encoder's depth alone
        assert net.value_head.layers == value_layers
        assert len(net.unit_encoder.node_encoders["ally"]) == 2 * layers
    ro = net.rollout(collate(states), order="random", selector=EpsilonGreedy(0.3),
                     generator=torch.Generator().manual_seed(2))
    assert max_error_against_reference(net, states, ro) < 1e-5


@pytest.mark.parametrize("layers,passive_input", [(1, "features"), (2, "features"),
                                                   (2, "embedding")])
def test_passive_table_of_given_actions_matches_hand_computed_entries(layers, passive_input):
    """``encode(passive_rows=...)`` computes only the passive entries the given actions
    read (each agent's row of the compact table, one kind's slice of the last layer): they
    equal the encoder run by hand on the actor's features (or, with
    ``passive_input="embedding"``, its row of the encoded units), every other entry is zero, and
    the gradients are those of the full table restricted to the same entries (the last
    layer's slices of kinds no action reads get zero)."""
    torch.manual_seed(0)
    schema, states = make_states(seed=6, mask_prob=0.0)
    net = ACENetwork(schema, hidden=8, layers=layers, passive_width=24,
                     passive_input=passive_input)
    b = collate(states)
    full = net.encode(b)
    idx = full.index
    attack = (idx.action_kind == schema.kind_index("attack")).nonzero().view(-1)
    heal = (idx.action_kind == schema.kind_index("heal")).nonzero().view(-1)
    for rows in (attack[::3], torch.cat([attack[::2], heal[1::4]])):
        part = net.encode(b, passive_rows=lambda index: rows)
        assert torch.equal(part.passive_block, full.passive_block)
        aiming = torch.zeros(idx.num_agents, dtype=torch.bool)
        aiming[idx.action_agent[idx.action_target >= 0]] = True
        assert part.passive.size(0) == full.passive.size(0) == int(aiming.sum())
        need = torch.zeros_like(part.passive, dtype=torch.bool)
        for a in rows.tolist():
            agent, kind = int(idx.action_agent[a]), int(idx.action_kind[a])
            col = list(schema.targeted_kinds).index(kind)
            unit = int(idx.agents[agent])
            t = next(t for t, r in idx.flat.items() if bool((r == unit).any()))
            x = full.units[unit] if passive_input == "embedding" else \
                b[t].x[(idx.flat[t] == unit).nonzero().item()]
            by_hand = R.seq(net.action_encoder.passive_encoders[t], x).view(-1, 8)[col]
            block = int(part.passive_block[agent])
            assert torch.allclose(part.passive[block, col], by_hand, atol=1e-6)
            need[block, col] = True
        assert bool((part.passive[~need] == 0).all())
        w = torch.randn_like(full.passive)
        params = list(net.action_encoder.passive_encoders.parameters())
        g_part = torch.autograd.grad((part.passive * w).sum(), params)
        g_full = torch.autograd.grad((full.passive * w * need).sum(), params, retain_graph=True)
        for gp, gf in zip(g_part, g_full):
            assert torch.allclose(gp, gf, atol=1e-5)
        last = net.action_encoder.passive_encoders["ally"][-2].weight
        unread = ~need.any((0, 2))  # kinds no given action reads
        grad_last = g_part[[p is last for p in params].index(True)].view(-1, 8, last.size(1))
        assert bool(unread.any()) == (rows.numel() == attack[::3].numel())
        assert bool((grad_last[unread] == 0).all()) and bool((grad_last[~unread] != 0).any())


def test_pair_messages_read_the_pair_and_its_edge():
    """Pair messages (``messages="pair"``): each targeted action's rows equal the pair
    encoder run by hand (the reference reads the edge actor -> target, zeros where the
    state has none, and some actions here have none); ``passive_rows`` computes the given
    actions' rows only, the others zero, with the same rows; two attacks of one agent
    on different targets send different active messages, unlike a kind's vector; and
    changing the features of one edge changes the messages of the action along it only."""
    torch.manual_seed(0)
    schema, states = make_states(seed=4, mask_prob=0.0, sizes=[(2, 3), (3, 2)])
    net = ACENetwork(schema, hidden=8, layers=2, messages="pair")
    b = collate(states)
    full = net.encode(b)
    idx = full.index
    targeted = (idx.action_target >= 0).nonzero().view(-1)
    assert full.passive is None and full.pair.shape == (targeted.numel(), 2, 8)
    missing = 0
    for a in targeted.tolist():
        g = int(idx.action_batch[a])
        local = a - int((idx.action_batch < g).sum())
        d = states[g]
        by_hand = R.pair_messages(net, d, local)
        assert torch.allclose(full.pair[full.pair_row[a]], by_hand, atol=1e-5)
        at, tt = schema.node_type_names[int(d[ACTION].actor_type[local])], \
            schema.node_type_names[int(d[ACTION].target_type[local])]
        edges = [et for et in schema.edge_types if et[0] == at and et[2] == tt]
        missing += all(not bool(((d[et].edge_index[0] == int(d[ACTION].actor[local])) &
                                 (d[et].edge_index[1] == int(d[ACTION].target[local]))).any())
                       for et in edges)
    assert 0 < missing < targeted.numel()  # both branches of the edge lookup are checked
    attack = idx.action_kind == schema.kind_index("attack")
    first = attack & (idx.action_agent == 0)
    assert not torch.allclose(full.pair[full.pair_row[first]][0, 0],
                              full.pair[full.pair_row[first]][1, 0])
    rows = targeted[::3]
    part = net.encode(b, passive_rows=lambda index: rows)
    assert torch.equal(part.pair_row, full.pair_row)
    read = torch.zeros(targeted.numel(), dtype=torch.bool)
    read[full.pair_row[rows]] = True
    assert torch.allclose(part.pair[read], full.pair[read], atol=1e-6)
    assert bool((part.pair[~read] == 0).all())
    a = int(targeted[0])
    local = a
    assert int(idx.action_batch[a]) == 0  # the first graph's rows are its own
    d = copy.deepcopy(states[0])
    et = next(et for et in schema.edge_types
              if et[0] == schema.node_type_names[int(d[ACTION].actor_type[local])])
    hit = ((d[et].edge_index[0] == int(d[ACTION].actor[local])) &
           (d[et].edge_index[1] == int(d[ACTION].target[local])))
    if bool(hit.any()):
        d[et].edge_attr[hit] += 1.0
        changed = net.encode(collate([d] + states[1:]))
        moved = (changed.pair - full.pair).abs().amax((1, 2)) > 1e-6
        assert moved.nonzero().view(-1).tolist() == [int(full.pair_row[a])]


def test_pair_messages_are_refused_where_they_cannot_be_used():
    from acegnn.nn.ace import ModelConfig

    with pytest.raises(ValueError, match="model.messages must be one of"):
        ModelConfig(messages="edge")
    with pytest.raises(ValueError, match="messages must be one of"):
        ACENetwork(smac_like_schema(), hidden=8, messages="edge")


def test_passive_changes_values_of_targeted_actions():
    torch.manual_seed(0)
    schema, states = make_states(seed=5, mask_prob=0.0, sizes=[(2, 3)])
    net = ACENetwork(schema, hidden=16)
    ro = net.rollout(states[0])
    idx = ro.encoded.index
    attack = idx.action_kind == schema.kind_index("attack")
    first = idx.action_agent == ro.first_agent[0]
    v = ro.candidate_values[attack & first]
    assert v.unique().numel() == v.numel()  # each target gives a distinct SE-state
    net.action_encoder.passive = False
    ro2 = net.rollout(states[0])
    v2 = ro2.candidate_values[attack & (ro2.encoded.index.action_agent == ro2.first_agent[0])]
    assert torch.allclose(v2, v2[0].expand_as(v2))  # w/o IA: one kind, one active message


def test_greedy_picks_argmax_and_values_are_consistent():
    torch.manual_seed(0)
    schema, states = make_states(seed=7)
    net = ACENetwork(schema, hidden=16)
    ro = net.rollout(collate(states))
    idx = ro.encoded.index
    for i in range(idx.num_agents):
        rows = (idx.action_agent == i) & idx.action_available
        v = ro.candidate_values[rows]
        assert ro.max_value[i] == v.max()
        assert ro.chosen_value[i] == v.max()
        assert ro.action_ids[i] == ro.greedy_ids[i]
        assert idx.action_available[ro.action_ids[i]]
    # the chosen SE-state of the last agent equals the full readout of the final units
    last = ro.next_agent == -1
    full = net.value(ro.final_units, ro.encoded)
    assert torch.allclose(ro.chosen_value[last], full[idx.agent_batch[last]], atol=1e-5)


def test_teacher_forcing_follows_given_actions():
    torch.manual_seed(0)
    schema, states = make_states(seed=2)
    net = ACENetwork(schema, hidden=16)
    b = collate(states)
    explored = net.rollout(b, selector=EpsilonGreedy(1.0), generator=torch.Generator().manual_seed(0))
    forced = net.rollout(b, selector=Forced(explored.actions))
    assert torch.equal(forced.actions, explored.actions)
    assert torch.allclose(forced.candidate_values.nan_to_num(), explored.candidate_values.nan_to_num())
    bad = explored.actions.clone()
    idx = forced.encoded.index
    unavailable = (~idx.action_available).nonzero().view(-1)
    row = unavailable[0]
    bad[idx.action_agent[row]] = idx.action_slot[row]
    with pytest.raises(ValueError, match="invalid action"):
        net.rollout(b, selector=Forced(bad))
    bad[0] = 999
    with pytest.raises(ValueError, match="invalid action"):
        net.rollout(b, selector=Forced(bad))


def assert_chosen_only_matches_full_rollout(net, b):
    """Valued at the given actions only (one successor per step, pooled whole), the
    chosen values and their gradients are those of the rollout that values every
    candidate."""
    gen = torch.Generator().manual_seed(1)
    explored = net.rollout(b, order="random", selector=EpsilonGreedy(0.5), generator=gen)
    full = net.rollout(b, order=explored.rank, selector=Forced(explored.actions))
    only = net.rollout(b, order=explored.rank, selector=Forced(explored.actions), values="chosen")
    assert torch.equal(only.action_ids, full.action_ids)
    assert torch.allclose(only.chosen_value, full.chosen_value, atol=1e-6)
    assert torch.allclose(only.final_units, full.final_units)
    assert bool(only.max_value.isnan().all()) and bool((only.greedy_ids == -1).all())
    # same gradients of the chosen values
    g_full = torch.autograd.grad(full.chosen_value.sum(), list(net.parameters()), allow_unused=True)
    g_only = torch.autograd.grad(only.chosen_value.sum(), list(net.parameters()), allow_unused=True)
    for a, c in zip(g_full, g_only):
        assert (a is None) == (c is None) and (a is None or torch.allclose(a, c, atol=1e-5))
    succ = net.rollout(b, order=explored.rank, selector=Forced(explored.actions), values="successors")
    first = succ.rank == 0
    assert torch.allclose(succ.chosen_value, full.chosen_value, atol=1e-6)
    assert torch.allclose(succ.max_value[~first], full.max_value[~first], atol=1e-6)
    assert torch.equal(succ.greedy_ids[~first], full.greedy_ids[~first])
    assert bool(succ.max_value[first].isnan().all())
    later = ~first[succ.encoded.index.action_agent]
    assert torch.allclose(succ.candidate_values[later].nan_to_num(),
                          full.candidate_values[later].nan_to_num(), atol=1e-6)


@pytest.mark.parametrize("pool", ["mean", "sum", "max", "mean_max"])
def test_chosen_only_values_match_full_rollout(pool):
    torch.manual_seed(0)
    schema, states = make_states(seed=4)  # graphs of 2 to 8 units: pooled by scatter
    net = ACENetwork(schema, hidden=16, pool=pool, layers=2)
    b = collate(states)
    assert_chosen_only_matches_full_rollout(net, b)
    with pytest.raises(ValueError, match="known before valuing"):
        net.rollout(b, values="chosen")
    with pytest.raises(ValueError, match="values must be"):
        net.rollout(b, values="some")


def test_orders_and_next_agent():
    schema, states = make_states(seed=4)
    net = ACENetwork(schema, hidden=8)
    b = collate(states)
    ro = net.rollout(b, order="random", generator=torch.Generator().manual_seed(3))
    idx = ro.encoded.index
    for gi in range(idx.num_graphs):
        agents = (idx.agent_batch == gi).nonzero().view(-1)
        assert sorted(ro.rank[agents].tolist()) == list(range(agents.numel()))
        seq = [int(ro.first_agent[gi])]
        while ro.next_agent[seq[-1]] >= 0:
            seq.append(int(ro.next_agent[seq[-1]]))
        assert ro.rank[torch.tensor(seq)].tolist() == list(range(agents.numel()))
    explicit = net.rollout(b, order=ro.rank)
    assert torch.equal(explicit.rank, ro.rank)
    with pytest.raises(ValueError, match="permutation"):
        net.rollout(b, order=torch.zeros_like(ro.rank))
    with pytest.raises(ValueError, match="order"):
        net.rollout(b, order="sorted-by-magic")


def test_max_steps_only_values_first_agents():
    schema, states = make_states(seed=4)
    net = ACENetwork(schema, hidden=8)
    ro = net.rollout(collate(states), max_steps=1)
    first = ro.rank == 0
    assert not torch.isnan(ro.max_value[first]).any()
    assert torch.isnan(ro.max_value[~first]).all()
    assert (ro.actions[~first] == -1).all()


def test_epsilon_and_order_are_deterministic_given_generator():
    schema, states = make_states(seed=6)
    net = ACENetwork(schema, hidden=8)
    b = collate(states)
    runs = [net.rollout(b, order="random", selector=EpsilonGreedy(0.5), generator=torch.Generator().manual_seed(9))
            for _ in range(2)]
    assert torch.equal(runs[0].actions, runs[1].actions)
    assert torch.equal(runs[0].rank, runs[1].rank)
    other = net.rollout(b, order="random", selector=EpsilonGreedy(0.5), generator=torch.Generator().manual_seed(10))
    assert not (torch.equal(other.actions, runs[0].actions) and torch.equal(other.rank, runs[0].rank))


def test_gradients_flow_to_every_part():
    schema, states = make_states(seed=8, mask_prob=0.0)
    net = ACENetwork(schema, hidden=8)
    ro = net.rollout(collate(states), selector=EpsilonGreedy(1.0), generator=torch.Generator().manual_seed(0))
    ro.chosen_value.sum().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def permute_state(d, perm):
    """The same state with units of each type reordered: new unit j = old unit perm[t][j]."""
    d = copy.copy(d)
    d = d.clone()
    inv = {t: torch.argsort(p) for t, p in perm.items()}
    for t, p in perm.items():
        d[t].x = d[t].x[p]
    for et in d.edge_types:
        s, _, t = et
        ei = d[et].edge_index
        d[et].edge_index = torch.stack([inv[s][ei[0]], inv[t][ei[1]]])
    names = list(perm)
    store = d[ACTION]
    actor_t = store.actor_type
    store.actor = torch.stack([inv[names[int(a)]][i] for a, i in zip(actor_t, store.actor)])
    target = store.target.clone()
    for k in range(target.numel()):
        if target[k] >= 0:
            target[k] = inv[names[int(store.target_type[k])]][target[k]]
    store.target = target
    return d


@pytest.mark.parametrize("pool", ["mean", "max"])
def test_values_invariant_to_unit_permutation(pool):
    torch.manual_seed(0)
    schema, states = make_states(seed=11, sizes=[(4, 5)])
    d = states[0]
    net = ACENetwork(schema, hidden=16, pool=pool)
    ro = net.rollout(d, order="random", selector=EpsilonGreedy(0.5), generator=torch.Generator().manual_seed(0))
    perm = {"ally": torch.tensor([2, 0, 3, 1]), "enemy": torch.tensor([4, 2, 0, 1, 3])}
    p = permute_state(d, perm)
    # agent perm[j] of the original is agent j of the permuted graph
    ro_p = net.rollout(p, order=ro.rank[perm["ally"]], selector=Forced(ro.actions[perm["ally"]]))
    assert torch.allclose(ro.candidate_values.nan_to_num(), ro_p.candidate_values.nan_to_num(),
                          atol=1e-5)
    assert torch.equal(ro.candidate_values.isnan(), ro_p.candidate_values.isnan())


def test_repr():
    schema = smac_like_schema()
    net = ACENetwork(schema, hidden=32, conv="gatv2", pool="max", passive=False)
    assert str(net) == ("ACENetwork(hidden=32, conv=gatv2, pool=max, passive=False, "
                        "messages=kind, layers=1, value_layers=1)")
    deep = ACENetwork(schema, hidden=8, layers=2, value_layers=3)
    assert str(deep).endswith("layers=2, value_layers=3)")
    pairs = ACENetwork(schema, hidden=8, messages="pair")
    assert "messages=pair" in str(pairs) and "pairs=True" in str(pairs.action_encoder)
    assert str(pairs.action_encoder).endswith("pairs=True, embedded=False)")
    embedded = ACENetwork(schema, hidden=8, passive_input="embedding")
    assert str(embedded.action_encoder).endswith("pairs=False, embedded=True)")
    assert str(net.value_head) == "ValueHead(32, pool=max, layers=1)"
    assert str(net.unit_encoder) == "UnitEncoder(32, conv=gatv2)"


def test_bad_network_arguments():
    schema = smac_like_schema()
    with pytest.raises(ValueError, match="model.conv='nope' is neither registered"):
        ACENetwork(schema, conv="nope")
    with pytest.raises(ValueError, match="unknown pool"):
        ACENetwork(schema, pool="median")
    with pytest.raises(ValueError, match="hidden"):
        ACENetwork(schema, hidden=0)
    with pytest.raises(ValueError, match="passive_input must be one of"):
        ACENetwork(schema, passive_input="embeddings")
    net = ACENetwork(schema, hidden=8)
    _, states = make_states()
    with pytest.raises(ValueError, match="epsilon"):
        net.rollout(states[0], selector=EpsilonGreedy(1.5))


@pytest.mark.parametrize("pool", ["mean", "max"])
def test_naive_batched_rollout_agrees(pool):
    from acegnn.nn.naive import naive_rollout

    torch.manual_seed(0)
    schema, states = make_states(seed=12)
    net = ACENetwork(schema, hidden=16, pool=pool)
    b = collate(states)
    rank = net.rollout(b, order="random", generator=torch.Generator().manual_seed(0)).rank
    fast = net.rollout(b, order=rank)
    with torch.no_grad():
        slow = naive_rollout(net, b, order=rank, max_edges=40)  # several chunks per step
    assert torch.equal(fast.candidate_values.isnan(), slow.isnan())
    assert torch.allclose(fast.candidate_values.nan_to_num(), slow.nan_to_num(), atol=1e-5)


@pytest.mark.parametrize("pool", ["mean", "max"])
def test_action_targeting_its_own_actor(pool):
    """Self-heal: both messages land on the actor row."""
    torch.manual_seed(0)
    schema, states = make_states(seed=13, mask_prob=0.0, sizes=[(3, 2), (2, 1)])
    for d in states:  # make heal-self available
        store = d[ACTION]
        self_heal = (store.kind == schema.kind_index("heal")) & (store.target == store.actor)
        store.available[self_heal] = True
    net = ACENetwork(schema, hidden=16, pool=pool)
    ro = net.rollout(collate(states), order="random", selector=EpsilonGreedy(0.5),
                     generator=torch.Generator().manual_seed(4))
    assert max_error_against_reference(net, states, ro) < 1e-5


@pytest.mark.parametrize("pool,layers,additive", [("mean", 1, True), ("sum", 1, True),
                                                  ("mean_max", 1, False), ("mean", 2, False),
                                                  ("mean", (1, 2), False)])
def test_which_heads_can_couple_untargeted_actions(pool, layers, additive):
    """Without a passive target, each action only changes its own unit. With sum/mean
    pooling and a linear readout V(s, a0, a1) is then additive in a0 and a1 (the second
    agent cannot react to the first); max pooling or a deeper readout couples them."""
    from acegnn.envs.spiders_fly import spiders_fly_graphs, spiders_fly_schema

    torch.manual_seed(0)
    layers, value_layers = layers if isinstance(layers, tuple) else (layers, None)
    net = ACENetwork(spiders_fly_schema(), hidden=16, pool=pool, layers=layers,
                     value_layers=value_layers)  # (1, 2): a deeper value encoder alone
    with torch.no_grad():  # large action messages, so that ReLU patterns change between them
        net.action_encoder.active.normal_(std=3.0)
    pos = torch.tensor([[[2, 2], [2, 3], [0, 0]]])  # every action available to both
    v = torch.zeros(5, 5)
    for a0 in range(5):
        ro = net.rollout(spiders_fly_graphs(pos, 5), selector=Forced(torch.tensor([a0, 0])))
        second = ro.candidate_values[ro.encoded.index.action_agent == 1]
        v[a0] = second
    interaction = v - v[:, :1] - v[:1, :] + v[0, 0]  # zero iff additive
    assert (interaction.abs().max() < 1e-5) == additive


@pytest.mark.parametrize("pool,layers,sizes", [("mean", 1, SIZES), ("mean_max", 2, SIZES),
                                               ("mean_max", 1, ((2, 3),) * 4),
                                               ("mean_max_split", 2, ((2, 3),) * 4)])
def test_compiled_kernels_match_naive_reference(monkeypatch, pool, layers, sizes):
    """``train.compile``: without autograd the candidates are valued by kernels compiled
    with ``torch.compile`` (a linear readout's scores; the pre-activations and the
    pooling of the others; the pooling statistics of each step where the graphs have
    one size). Checked against the naive reference, with heal-self available (a second
    message on the actor's row) and dead units, and against the same rollout uncompiled."""
    from acegnn.nn import value_head

    monkeypatch.setattr(value_head, "_COMPILED", {})
    torch.manual_seed(0)
    schema, states = make_states(seed=13, mask_prob=0.2, sizes=sizes)
    for d in states:
        store = d[ACTION]
        self_heal = (store.kind == schema.kind_index("heal")) & (store.target == store.actor)
        store.available[self_heal] = True
    for d in states:  # the first enemy is dead where there are two
        d["enemy"].alive = torch.arange(d["enemy"].num_nodes) > (0 if d["enemy"].num_nodes > 1 else -1)
        d["ally"].alive = torch.ones(d["ally"].num_nodes, dtype=torch.bool)
    net = ACENetwork(schema, hidden=16, pool=pool, layers=layers)
    batch = collate(states)

    def rollout():
        with torch.no_grad():
            return net.rollout(batch, order="random", selector=EpsilonGreedy(0.5),
                               generator=torch.Generator().manual_seed(4))

    plain = rollout()
    net.value_head.compiled = True
    fast = rollout()
    assert torch.equal(fast.actions, plain.actions)
    assert torch.allclose(fast.candidate_values, plain.candidate_values, atol=1e-6,
                          equal_nan=True)
    assert max_error_against_reference(net, states, fast) < 1e-5
    one_size = len(set(sizes)) == 1
    assert (value_head.dense_pool_stats in value_head._COMPILED) == (one_size and pool != "mean")


def test_a_compiled_kernel_is_checked_against_the_plain_function():
    """:class:`CompiledKernel` runs the plain function beside the kernel on its first call
    with each pattern of sizes 0 and 1 (where torch.compile builds another kernel) and
    raises, naming the kernel and the way out, where they disagree: by a value or a NaN."""
    from acegnn.nn.value_head import CompiledKernel, gathered_pre

    plain_calls = []

    def counted(*args):
        plain_calls.append(args[2].shape)
        return gathered_pre(*args)

    torch.manual_seed(0)
    pre, msg = torch.randn(7, 16), torch.randn(5, 16)
    read, rows = torch.randint(0, 7, (4, 2, 3)), torch.randint(0, 5, (4, 2, 3))
    kernel = CompiledKernel(counted)
    kernel.kernel = gathered_pre  # a kernel that agrees (no compilation in this test)
    want = gathered_pre(pre, msg, read, rows, None)
    assert torch.equal(kernel(pre, msg, read, rows, None), want)
    kernel(pre, msg, read[:3], rows[:3], None)  # other sizes, none 0 or 1: checked already
    assert plain_calls == [(4, 2, 3)]
    kernel(pre, msg, read[:, :, :1], rows[:, :, :1], None)  # a size 1: another kernel
    assert plain_calls == [(4, 2, 3), (4, 2, 1)]

    off = CompiledKernel(gathered_pre)
    off.kernel = lambda *args: gathered_pre(*args) + 1e-3  # beyond float rounding
    with pytest.raises(RuntimeError, match=r"gathered_pre disagrees .*largest difference "
                                           r"0\.001.*train\.compile=false"):
        off(pre, msg, read, rows, None)
    close = CompiledKernel(gathered_pre)
    close.kernel = lambda *args: gathered_pre(*args) * (1 + 1e-6)  # float rounding: passes
    close(pre, msg, read, rows, None)
    nan = CompiledKernel(gathered_pre)
    nan.kernel = lambda *args: gathered_pre(*args).index_fill(0, torch.tensor([2]), float("nan"))
    with pytest.raises(RuntimeError, match="largest difference inf"):
        nan(pre, msg, read, rows, None)


GUARD = """
import sys, torch
from acegnn.nn.value_head import compiled, gathered_pre
torch.manual_seed(0)
args = (torch.randn(49, 128), torch.randn(20, 128), torch.randint(0, 49, (96, 2, 1)),
        torch.randint(0, 20, (96, 2, 1)), None)
try:
    out = compiled(gathered_pre)(*args)
except RuntimeError as e:
    print("refused:", e)
    sys.exit()
print("agrees" if torch.allclose(out, gathered_pre(*args), atol=1e-4) else "WRONG")
"""


@pytest.mark.slow  # two processes compile (about 30 s)
@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() != "AVX512",
                    reason="fills the cache under AVX-512, then reads it under AVX2")
def test_kernels_of_a_cache_built_for_another_vector_width_are_refused(tmp_path):
    """The real failure the check is for: TorchInductor's on-disk cache, filled under
    AVX-512 and read under ``ATEN_CPU_CAPABILITY=avx2`` (torch 2.13 hands out the
    AVX-512 kernels: wrong sums, NaN). A kernel either agrees with the plain function or
    is refused; never used wrong."""
    import subprocess
    import sys

    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    first = subprocess.run([sys.executable, "-c", GUARD], env=env, capture_output=True,
                           text=True, timeout=600)
    assert first.stdout.strip() == "agrees", first.stderr[-2000:]
    second = subprocess.run([sys.executable, "-c", GUARD], env={**env, "ATEN_CPU_CAPABILITY": "avx2"},
                            capture_output=True, text=True, timeout=600)
    out = second.stdout.strip()
    assert out == "agrees" or out.startswith("refused: the compiled kernel gathered_pre "
                                             f"disagrees"), (out, second.stderr[-2000:])
    assert out == "agrees" or str(tmp_path) in out  # the cache to empty, named


@pytest.mark.parametrize("pool,layers,grad", [("mean", 1, False), ("mean_max", 1, False),
                                             ("mean_max", 2, False), ("mean_max", 1, True)])
def test_valid_candidates_only_match_the_masked_grid(monkeypatch, pool, layers, grad):
    """A step values its valid candidates only, one per row (a dead agent's one action,
    attacks out of range left out), where some entries of its ``[agents, S]`` grid are
    not valid: the same values, choices and gradients as valuing the whole grid and
    masking it."""
    import acegnn.nn.rollout as rollout_module

    torch.manual_seed(0)
    schema, states = make_states(seed=13, mask_prob=0.4)
    for d in states:  # the first enemy is dead where there are two
        d["enemy"].alive = torch.arange(d["enemy"].num_nodes) > (0 if d["enemy"].num_nodes > 1 else -1)
    net = ACENetwork(schema, hidden=16, pool=pool, layers=layers)
    batch = collate(states)
    calls = []
    compact = rollout_module._valid_values

    def counted(*args):
        calls.append(1)
        return compact(*args)

    monkeypatch.setattr(rollout_module, "_valid_values", counted)

    def rollout(valid_only):
        monkeypatch.setattr(rollout_module, "VALID_ONLY", valid_only)
        net.zero_grad()
        with torch.set_grad_enabled(grad):
            ro = net.rollout(batch, order="random", selector=EpsilonGreedy(0.3),
                             generator=torch.Generator().manual_seed(4))
        if grad:
            ro.chosen_value.sum().backward()
        return ro, [None if p.grad is None else p.grad.clone() for p in net.parameters()]

    (full, full_grads), (valid, valid_grads) = rollout(False), rollout(True)
    assert calls and not bool(batch[ACTION].available.all())
    assert torch.equal(valid.actions, full.actions)
    assert torch.allclose(valid.candidate_values, full.candidate_values, atol=1e-6,
                          equal_nan=True)
    assert torch.isnan(valid.candidate_values[~batch[ACTION].available]).all()
    assert torch.allclose(valid.chosen_value, full.chosen_value, atol=1e-6)
    assert grad == any(g is not None and bool(g.abs().sum() > 0) for g in valid_grads)
    for a, b in zip(valid_grads, full_grads):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.allclose(a, b, atol=1e-6)


def test_top3_and_max_without_agree_with_sorting_where_values_tie():
    """Max pooling's statistics by value: the three largest per feature (a tied value as
    often as it occurs, -inf padding a short graph; without and with autograd) and the
    largest two once one element is taken out, against sorting, on values drawn from {-inf, 0, 1, 2} so that
    ties of every kind occur."""
    from acegnn.nn.value_head import max_without, top3

    g = torch.Generator().manual_seed(0)
    for n in (1, 2, 3, 4, 6):
        dense = torch.tensor([float("-inf"), 0.0, 1.0, 2.0])[
            torch.randint(0, 4, (200, n, 5), generator=g)]
        want = dense.sort(dim=1, descending=True).values[:, :3]
        if n < 3:
            want = torch.cat([want, torch.full((200, 3 - n, 5), float("-inf"))], dim=1)
        top = top3(dense)
        assert torch.equal(top, want), n
        assert torch.equal(top3(dense.clone().requires_grad_()), want)  # by topk
        out = torch.randint(0, n, (200, 1, 5), generator=g)  # the element taken out
        value = dense.gather(1, out).squeeze(1)
        rest = dense.scatter(1, out, float("-inf")).sort(dim=1, descending=True).values
        first, second = max_without(top, value)
        assert torch.equal(first, rest[:, 0])
        if n > 1:
            assert torch.equal(second, rest[:, 1])


@pytest.mark.parametrize("values,max_steps", [("all", 1), ("chosen", None), ("successors", None)])
def test_only_the_message_rows_read_are_transformed(monkeypatch, values, max_steps):
    """The value encoder's ``W m`` is computed for the message rows a rollout reads, each
    once (a rollout to the first agent reads that agent's; one that values the given
    actions only, theirs), and the values are those of the whole transformed table."""
    import acegnn.nn.rollout as rollout_module
    from acegnn.nn.se_state import message_routes, zero_row
    from acegnn.nn.value_head import ValueHead

    torch.manual_seed(0)
    schema, states = make_states(seed=4)
    net = ACENetwork(schema, hidden=16, pool="mean_max", layers=2)
    b = collate(states)
    forced = net.rollout(b, order="random", generator=torch.Generator().manual_seed(5))
    selector = None if values == "all" else Forced(forced.actions)
    transformed = []
    message_pre = ValueHead.message_pre
    monkeypatch.setattr(ValueHead, "message_pre",
                        lambda self, m: transformed.append(m.size(0)) or message_pre(self, m))

    def run():
        return net.rollout(b, order=forced.rank, selector=selector, values=values,
                           max_steps=max_steps)

    ro = run()
    enc, idx = ro.encoded, ro.encoded.index
    if values == "all":  # every action of the first agents
        actions = torch.isin(idx.action_agent, (forced.rank == 0).nonzero().view(-1))
        actions = actions.nonzero().view(-1)
    elif values == "chosen":
        actions = forced.action_ids[forced.action_ids >= 0]
    else:  # the first agents' given actions, every action of the others
        first = forced.rank[idx.action_agent] == 0
        actions = torch.cat([forced.action_ids[(forced.rank == 0) & (forced.action_ids >= 0)],
                             (~first).nonzero().view(-1)])
    routes = message_routes(enc, actions)
    read = torch.cat([routes.active, routes.passive]).unique()
    assert transformed == [read.numel()]
    assert read.numel() < zero_row(enc) + 1  # fewer than the table's rows
    monkeypatch.setattr(rollout_module, "_message_rows", lambda cand, device: None)
    transformed.clear()
    full = run()
    assert transformed == [zero_row(enc) + 1]
    torch.testing.assert_close(ro.candidate_values.nan_to_num(), full.candidate_values.nan_to_num(),
                               rtol=0, atol=1e-6)
    assert torch.equal(ro.action_ids, full.action_ids)

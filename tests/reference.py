"""A naive, hand-written ACE forward pass: every SE-state built from scratch.

Independent of the library's batching, flat indexing and candidate shortcuts: one
graph at a time, one candidate at a time, plain loops and matrix products.
"""
from __future__ import annotations

from typing import List, Sequence

import torch
from torch import Tensor
from torch_geometric.data import HeteroData

from acegnn.graph import ACTION


def seq(mods, x: Tensor) -> Tensor:
    """Apply an MLP by hand: Linear -> x W^T + b, ReLU -> max(x, 0)."""
    for m in mods:
        if isinstance(m, torch.nn.Sequential):
            x = seq(m, x)
        elif isinstance(m, torch.nn.Linear):
            x = x @ m.weight.T + m.bias
        else:
            x = torch.clamp(x, min=0)
    return x


def alive_of(d: HeteroData, t: str) -> Tensor:
    """Alive flags of node type ``t`` (all alive when the state has none)."""
    if "alive" in d[t]:
        return d[t].alive.bool()
    return torch.ones(d[t].x.size(0), dtype=torch.bool)


def alive_units(net, d: HeteroData) -> Tensor:
    """``[U]`` alive flags in the order of :func:`encode_units`."""
    return torch.cat([alive_of(d, t) for t in net.schema.node_types])


def encode_units(net, d: HeteroData) -> Tensor:
    """Unit embeddings of one graph, units in schema type order. ``[U, H]``

    Edges from or to a unit that is not alive carry no message."""
    schema = net.schema
    if net.unit_encoder.conv_name == "ace":
        rows = []
        for t in schema.node_types:
            h = seq(net.unit_encoder.node_encoders[t], d[t].x)
            for j in range(h.size(0)):
                incoming = []
                for et in schema.edge_types:
                    if et[2] != t:
                        continue
                    enc = net.unit_encoder.edge_encoders["__".join(et)]
                    ei, ea = d[et].edge_index, d[et].edge_attr
                    live = alive_of(d, et[0])[ei[0]] & alive_of(d, et[2])[ei[1]]
                    into_j = ea[(ei[1] == j) & live]  # features of the live edges ending at j
                    incoming.append(seq(enc, into_j))
                incoming = torch.cat(incoming) if incoming else h.new_zeros(0, h.size(1))
                rows.append(h[j] + incoming.mean(0) if incoming.size(0) > 0 else h[j])
        return torch.stack(rows)
    x = {t: d[t].x for t in schema.node_types}
    ei = {et: d[et].edge_index for et in schema.edge_types}
    ea = {et: d[et].edge_attr for et in schema.edge_types}
    alive = {t: alive_of(d, t) for t in schema.node_types}
    h = net.unit_encoder(x, ei, ea, alive)
    return torch.cat([h[t] for t in schema.node_types])


def unit_row(net, d: HeteroData, type_idx: int, local: int) -> int:
    names = net.schema.node_type_names
    return sum(d[names[i]].x.size(0) for i in range(type_idx)) + local


def add_action(net, d: HeteroData, units: Tensor, a: int) -> Tensor:
    """Eq. 2 for one action (row ``a`` of the graph's action table)."""
    schema = net.schema
    store = d[ACTION]
    units = units.clone()
    kind = int(store.kind[a])
    actor_type, actor = int(store.actor_type[a]), int(store.actor[a])
    r = unit_row(net, d, actor_type, actor)
    units[r] = units[r] + net.action_encoder.active[kind]
    enc = net.action_encoder
    if enc.passive and schema.action_kinds[kind].targeted:
        t_name = schema.node_type_names[actor_type]
        out = seq(enc.passive_encoders[t_name], d[t_name].x[actor])
        col = list(schema.targeted_kinds).index(kind)
        passive = out.view(len(schema.targeted_kinds), -1)[col]
        tr = unit_row(net, d, int(store.target_type[a]), int(store.target[a]))
        units[tr] = units[tr] + passive
    return units


def value(net, units: Tensor, alive: Tensor = None) -> Tensor:
    """V of one SE-state; only the ``alive`` units (default: all) are pooled."""
    head = net.value_head
    h = seq(head.unit_mlp, units)
    if alive is not None:
        h = h[alive]
    if h.size(0) == 0:
        pools = {r: h.new_zeros(h.size(1)) for r in ("mean", "sum", "max")}
    else:
        pools = {"mean": h.mean(0), "sum": h.sum(0), "max": h.max(0).values}
    pooled = torch.cat([pools[r] for r in head.reduces])
    return seq(head.out, pooled).squeeze(-1)


def reference_candidates(net, d: HeteroData, order: Sequence[int],
                         chosen: Sequence[int]) -> List[dict]:
    """V of every candidate of every step, following ``chosen`` slots.

    Args:
        order: agents (local index among the graph's agents) in decision order.
        chosen: the slot each agent (local index) takes.

    Returns:
        one dict per step: ``{slot: V}`` over the acting agent's available actions.
    """
    schema = net.schema
    store = d[ACTION]
    agent_keys = []  # (type_idx, local) of every agent, graph order
    for t in schema.agent_types:
        ti = schema.node_type_index(t)
        agent_keys += [(ti, j) for j in range(d[t].x.size(0))]
    agent_keys.sort(key=lambda k: unit_row(net, d, *k))
    done: List[int] = []  # action rows chosen so far
    out = []
    for agent in order:
        ti, j = agent_keys[agent]
        rows = [a for a in range(store.kind.numel())
                if int(store.actor_type[a]) == ti and int(store.actor[a]) == j]
        step = {}
        for a in rows:
            if not bool(store.available[a]):
                continue
            units = encode_units(net, d)  # from scratch, every candidate
            for prev in done + [a]:
                units = add_action(net, d, units, prev)
            step[int(store.slot[a])] = value(net, units, alive_units(net, d))
        out.append(step)
        done.append(next(a for a in rows if int(store.slot[a]) == chosen[agent]))
    return out

"""A naive, hand-written ACE forward pass: every SE-state built from scratch.

Independent of the library's batching, flat indexing and candidate shortcuts: one
graph at a time, one candidate at a time, plain loops and matrix products.
"""
from __future__ import annotations

import math
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


def kept_units(schema, d: HeteroData, keep):
    """The units of ``d`` that ``keep`` (``{type: [N_t] bool}``) marks, renumbered, and the
    edges among them: ``(new_id, x, edge_index, edge_attr)``, ``new_id[t]`` mapping each
    old index of type ``t`` to its new one (-1 where dropped)."""
    new_id = {t: torch.cumsum(k.long(), 0) - 1 for t, k in keep.items()}
    x = {t: d[t].x[keep[t]] for t in schema.node_types}
    ei, ea = {}, {}
    for et in schema.edge_types:
        e = d[et].edge_index
        both = keep[et[0]][e[0]] & keep[et[2]][e[1]]
        ei[et] = torch.stack([new_id[et[0]][e[0, both]], new_id[et[2]][e[1, both]]])
        ea[et] = d[et].edge_attr[both]
    return new_id, x, ei, ea


def lin(m, x: Tensor) -> Tensor:
    """A linear layer by hand: ``x W^T (+ b)``."""
    y = x @ m.weight.T
    return y if m.bias is None else y + m.bias


def softmax(scores: Tensor) -> Tensor:
    """Softmax of a 1-d tensor by hand."""
    e = torch.exp(scores - scores.max())
    return e / e.sum()


def gatv2_message(conv, x_src: Tensor, x_j: Tensor, src: Tensor, emb: Tensor) -> Tensor:
    """PyG ``GATv2Conv`` output at one destination ``x_j`` (no self loops).

    Per head ``k``, over the live edges ``i -> j`` with edge embedding ``e_ij``:
    ``a_ij = att_k . leaky_relu(W_r x_j + W_l x_i + W_e e_ij)``, softmax over ``i``,
    ``out_k = sum_i a_ij W_l x_i``; heads concatenated, plus the bias."""
    if conv.add_self_loops or conv.res is not None or not conv.concat or conv.dropout > 0:
        raise NotImplementedError("the reference covers GATv2Conv as GATv2UnitConv builds it")
    H, C = conv.heads, conv.out_channels
    right = lin(conv.lin_r, x_j)
    out = []
    for k in range(H):
        cols = slice(k * C, (k + 1) * C)
        scores, values = [], []
        for e, i in enumerate(src.tolist()):
            left = lin(conv.lin_l, x_src[i])[cols]
            z = right[cols] + left
            if conv.lin_edge is not None:
                z = z + (emb[e] @ conv.lin_edge.weight.T)[cols]
            z = torch.where(z > 0, z, conv.negative_slope * z)
            scores.append((z * conv.att[0, k]).sum())
            values.append(left)
        if scores:
            a = softmax(torch.stack(scores))
            out.append((a.unsqueeze(-1) * torch.stack(values)).sum(0))
        else:  # no incoming edge: nothing to attend to
            out.append(x_j.new_zeros(C))
    out = torch.cat(out)
    return out if conv.bias is None else out + conv.bias


def transformer_message(conv, x_src: Tensor, x_j: Tensor, src: Tensor, emb: Tensor) -> Tensor:
    """PyG ``TransformerConv`` output at one destination ``x_j``.

    Per head ``k``, over the live edges ``i -> j``: ``q = W_q x_j``,
    ``k_i = W_k x_i + W_e e_ij``, ``v_i = W_v x_i + W_e e_ij``,
    ``a_ij = softmax_i(q . k_i / sqrt(C))``, ``out_k = sum_i a_ij v_i``; heads
    concatenated, then the root weight ``+ W_skip x_j`` (or the ``beta`` gate)."""
    if not conv.concat or conv.dropout > 0:
        raise NotImplementedError("the reference covers TransformerConv as TransformerUnitConv builds it")
    H, C = conv.heads, conv.out_channels
    query = lin(conv.lin_query, x_j)
    out = []
    for k in range(H):
        cols = slice(k * C, (k + 1) * C)
        scores, values = [], []
        for e, i in enumerate(src.tolist()):
            edge = (emb[e] @ conv.lin_edge.weight.T)[cols] if conv.lin_edge is not None else 0.0
            key = lin(conv.lin_key, x_src[i])[cols] + edge
            scores.append((query[cols] * key).sum() / math.sqrt(C))
            values.append(lin(conv.lin_value, x_src[i])[cols] + edge)
        if scores:
            a = softmax(torch.stack(scores))
            out.append((a.unsqueeze(-1) * torch.stack(values)).sum(0))
        else:
            out.append(x_j.new_zeros(C))
    out = torch.cat(out)
    if conv.root_weight:
        skip = lin(conv.lin_skip, x_j)
        if conv.lin_beta is not None:
            beta = torch.sigmoid(torch.cat([out, skip, out - skip]) @ conv.lin_beta.weight.T)
            out = beta * skip + (1 - beta) * out
        else:
            out = out + skip
    return out


PYG_MESSAGES = {"gatv2": gatv2_message, "transformer": transformer_message}


def encode_units(net, d: HeteroData) -> Tensor:
    """Unit embeddings of one graph, units in schema type order. ``[U, H]``

    Edges from or to a unit that is not alive carry no message. ``ace``: node embedding
    plus the mean of the incoming edge embeddings. ``gatv2`` / ``transformer``: PyG's
    layer per edge type computed by hand (:func:`gatv2_message`,
    :func:`transformer_message`, weights read from the library's layers), summed over
    the edge types into a unit, then ``h + relu(sum)``."""
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
    message = PYG_MESSAGES[net.unit_encoder.conv_name]
    convs = net.unit_encoder.conv.conv.convs  # one PyG layer per edge type
    h = {t: seq(net.unit_encoder.node_encoders[t], d[t].x) for t in schema.node_types}
    rows = []
    for t in schema.node_types:
        into_t = [et for et in schema.edge_types if et[2] == t]
        for j in range(h[t].size(0)):
            if not into_t:  # no edge type ends at this node type: no message at all
                rows.append(h[t][j])
                continue
            total = 0.0
            for et in into_t:
                ei, ea = d[et].edge_index, d[et].edge_attr
                live = alive_of(d, et[0])[ei[0]] & alive_of(d, et[2])[ei[1]]
                into_j = live & (ei[1] == j)
                emb = seq(net.unit_encoder.edge_encoders["__".join(et)], ea[into_j])
                total = total + message(convs[et], h[et[0]], h[t][j], ei[0, into_j], emb)
            rows.append(h[t][j] + torch.clamp(total, min=0))
    return torch.stack(rows)


def unit_row(net, d: HeteroData, type_idx: int, local: int) -> int:
    names = net.schema.node_type_names
    return sum(d[names[i]].x.size(0) for i in range(type_idx)) + local


def pair_messages(net, d: HeteroData, a: int) -> Tensor:
    """The pair encoder's ``[c, H]`` messages of action ``a``: its MLP over the actor's and
    the target's embeddings in the state, per edge type out of an agent type the
    features of the edge actor -> target (zeros without one), and the one-hot of the
    action's kind among the targeted kinds, concatenated."""
    store, names = d[ACTION], net.schema.node_type_names
    pe = net.action_encoder.pair_encoder
    at, actor = int(store.actor_type[a]), int(store.actor[a])
    tt, target = int(store.target_type[a]), int(store.target[a])
    base = encode_units(net, d)
    parts = [base[unit_row(net, d, at, actor)], base[unit_row(net, d, tt, target)]]
    for et in pe.edge_types:
        x = torch.zeros(net.schema.edge_types[et])
        if et[0] == names[at] and et[2] == names[tt]:
            ei = d[et].edge_index
            hit = ((ei[0] == actor) & (ei[1] == target)).nonzero().view(-1)
            if hit.numel() > 0:
                x = d[et].edge_attr[hit[0]]
        parts.append(x)
    kinds = list(net.schema.targeted_kinds)
    parts.append(torch.eye(len(kinds))[kinds.index(int(store.kind[a]))])
    return seq(pe.mlp, torch.cat(parts)).view(pe.messages, -1)


def add_action(net, d: HeteroData, units: Tensor, a: int) -> Tensor:
    """Eq. 2 for one action (row ``a`` of the graph's action table)."""
    schema = net.schema
    store = d[ACTION]
    units = units.clone()
    kind = int(store.kind[a])
    actor_type, actor = int(store.actor_type[a]), int(store.actor[a])
    r = unit_row(net, d, actor_type, actor)
    enc = net.action_encoder
    targeted = schema.action_kinds[kind].targeted and int(store.target[a]) >= 0
    tr = unit_row(net, d, int(store.target_type[a]), int(store.target[a])) if targeted else None
    if enc.pairs and targeted:
        m = pair_messages(net, d, a)
        units[r] = units[r] + m[0]
        if m.size(0) == 2:
            units[tr] = units[tr] + m[1]
        return units
    units[r] = units[r] + net.action_encoder.active[kind]
    if enc.passive and targeted:
        t_name = schema.node_type_names[actor_type]
        # the actor's node features (the paper's), or its encoded embedding (the official
        # football code's): the state's, before any message
        read = encode_units(net, d)[r] if enc.embedded else d[t_name].x[actor]
        out = seq(enc.passive_encoders[t_name], read)
        col = list(schema.targeted_kinds).index(kind)
        passive = out.view(len(schema.targeted_kinds), -1)[col]
        units[tr] = units[tr] + passive
    return units


def value(net, units: Tensor, alive: Tensor = None) -> Tensor:
    """V of one SE-state; only the ``alive`` units (default: all) are pooled."""
    head = net.value_head
    h = seq(head.unit_mlp, units)
    if alive is not None:
        h = h[alive]
    if head.pool == "mean_max_split":  # the first half of each row averaged, the second maxed
        H = h.size(1) // 2
        if h.size(0) == 0:
            return seq(head.out, h.new_zeros(2 * H)).squeeze(-1)
        return seq(head.out, torch.cat([h[:, :H].mean(0), h[:, H:].max(0).values])).squeeze(-1)
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


def config_leaves(cfg) -> dict:
    """An experiment config as ``{"section.key": value}``, to compare configs key by key."""
    from acegnn.config import to_dict

    return {f"{s}.{k}": v for s, d in to_dict(cfg).items() if isinstance(d, dict)
            for k, v in d.items()}

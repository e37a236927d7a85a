"""Building a batch directly from dense per-state tensors (no per-state Python objects).

Environments whose states all have the same units (per type) and the same relation
structure -- Spiders-and-Fly, SMAX with dead units kept as nodes -- build their graph
batches here: the edge structure and action lists are shared, features are stacked.
"""
from __future__ import annotations

from typing import Mapping

import torch
from torch import Tensor
from torch_geometric.data import Batch, HeteroData

from acegnn.graph.schema import ACTION, EdgeType, GraphSchema


def _tile(B: int, n: int, device) -> tuple:
    """``batch`` vector and ``ptr`` of ``B`` graphs with ``n`` elements each."""
    batch = torch.arange(B, device=device).repeat_interleave(n)
    ptr = torch.arange(B + 1, device=device) * n
    return batch, ptr


def dense_batch(
    schema: GraphSchema,
    x: Mapping[str, Tensor],
    edge_index: Mapping[EdgeType, Tensor],
    edge_attr: Mapping[EdgeType, Tensor],
    actions: Mapping[str, Tensor],
    available: Tensor,
) -> Batch:
    """A batch of ``B`` states with the same units and relations.

    Args:
        schema (GraphSchema): The environment's schema.
        x (Mapping[str, Tensor]): ``{t: [B, n_t, F_t]}`` node features.
        edge_index (Mapping[EdgeType, Tensor]): ``{e: [2, E_e]}`` local edge indices,
            the same in every state.
        edge_attr (Mapping[EdgeType, Tensor]): ``{e: [B, E_e, F_e]}`` edge features.
        actions (Mapping[str, Tensor]): The action table of one state (see
            :func:`acegnn.graph.dense_actions`), the same in every state except for
            availability.
        available (Tensor): ``[B, num_actions]`` availability per state.

    Returns:
        A :class:`~torch_geometric.data.Batch` equal to collating ``B`` states built with
        :func:`acegnn.graph.build_state`.
    """
    B = available.size(0)
    device = available.device
    out = Batch(_base_cls=HeteroData)
    for t in schema.node_types:
        xt = x[t]
        n = xt.size(1)
        out[t].x = xt.reshape(B * n, xt.size(2))
        out[t].batch, out[t].ptr = _tile(B, n, device)
    for et in schema.edge_types:
        ei = edge_index[et].to(device)
        E = ei.size(1)
        n_src, n_dst = x[et[0]].size(1), x[et[2]].size(1)
        step = torch.arange(B, device=device).repeat_interleave(E)
        offset = torch.stack([step * n_src, step * n_dst])  # [2, B * E]
        out[et].edge_index = ei.repeat(1, B) + offset
        ea = edge_attr[et]
        out[et].edge_attr = ea.reshape(B * E, ea.size(2))
    A = actions["kind"].numel()
    store = out[ACTION]
    for key, value in actions.items():
        if key == "available":
            continue
        store[key] = value.to(device).repeat(B)
    store.available = available.reshape(B * A).bool()
    store.batch, store.ptr = _tile(B, A, device)
    store.num_nodes = B * A
    out._num_graphs = B
    return out

"""Fixed-size vectors from graph states, for value-factorisation baselines.

The baselines see the same information as ACE (paper Appendix, "Input Feature"): an
agent's input is its own node features and the features of its edges to every other
unit (for Spiders-and-Fly: unit id, position, distance to every other unit on the two
axes); the mixers' global state is every unit's node features. This needs states whose
units have fixed counts per type, as every graph of a :func:`dense_batch` has.
"""
from __future__ import annotations

from typing import Dict, NamedTuple, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.graph.dense import layout_of
from acegnn.graph.index import UnitIndex, unit_index
from acegnn.graph.schema import GraphSchema


class FlatInputs(NamedTuple):
    agent_obs: Tensor  # [num_graphs, n_agents, obs_dim]
    state: Tensor  # [num_graphs, state_dim]
    available: Tensor  # [num_graphs, n_agents, num_slots] bool
    index: UnitIndex


class _FlatPlan(NamedTuple):
    """Where each agent's features come from; depends only on the batch's structure."""

    own: Dict[str, Tensor]  # agent type -> position among the agents of each node row
    edges: Dict[tuple, Tuple[Tensor, int]]  # edge type -> (edge order, edges per agent)


def _flat_plan(schema: GraphSchema, batch: Batch, idx: UnitIndex) -> _FlatPlan:
    B, n = idx.num_graphs, idx.num_agents
    if B == 0 or n % B != 0 or not bool((idx.agent_ptr[1:] - idx.agent_ptr[:-1] == n // B).all()):
        raise ValueError("value-factorisation baselines need the same number of agents in "
                         "every state")
    counts = idx.unit_count
    if not bool((counts == counts[0]).all()):
        raise ValueError("value-factorisation baselines need the same units in every state")
    own = {t: torch.searchsorted(idx.agents, idx.flat[t]) for t in schema.agent_types}
    edges = {}
    for et in schema.edge_types:
        if et[0] not in schema.agent_types:
            continue
        ei = batch[et].edge_index
        src_agent = torch.searchsorted(idx.agents, idx.flat[et[0]][ei[0]])
        key = src_agent * (int(ei[1].max()) + 1 if ei.numel() else 1) + ei[1]
        deg = torch.bincount(src_agent, minlength=n)
        if ei.numel() and not bool((deg == deg[0]).all()):
            raise ValueError(f"agents have different numbers of {et} edges; baselines need "
                             f"fixed-size inputs")
        edges[et] = (torch.argsort(key), int(deg[0]) if ei.numel() else 0)
    return _FlatPlan(own, edges)


def flat_inputs(schema: GraphSchema, batch: Batch, check: bool = True) -> FlatInputs:
    """Per-agent observation vectors, global state vectors and action masks.

    Raises:
        ValueError: if graphs differ in unit counts or agents differ in their number of
            outgoing edges or actions (no fixed-size vector exists then).
    """
    idx = unit_index(schema, batch, check=check)
    layout = layout_of(batch, schema)
    build = lambda: _flat_plan(schema, batch, idx)  # noqa: E731
    plan = build() if layout is None else layout.cached(batch, "flat", build)
    B, n = idx.num_graphs, idx.num_agents
    per_graph = n // B
    feats = []
    for t, order in plan.own.items():  # own node features, agents graph-major
        own = batch[t].x.new_zeros(n, schema.node_types[t])
        own[order] = batch[t].x
        feats.append(own)
    for et, (perm, d) in plan.edges.items():  # edges to every other unit, by destination
        ea = batch[et].edge_attr
        feats.append(ea[perm].reshape(n, d * ea.size(1)))
    agent_obs = torch.cat(feats, dim=1).view(B, per_graph, -1)
    state = torch.cat([batch[t].x.reshape(B, -1) for t in schema.node_types], dim=1)
    slots = int(idx.action_slot.max()) + 1
    available = torch.zeros(n, slots, dtype=torch.bool, device=state.device)
    available[idx.action_agent, idx.action_slot] = idx.action_available
    return FlatInputs(agent_obs, state, available.view(B, per_graph, slots), idx)

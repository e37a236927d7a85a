"""The naive decision with rollout, as a baseline for benchmarks.

Every candidate SE-state is built from scratch: its state graph is copied, encoded
again, all actions chosen so far plus the candidate's are added, and the whole value
encoder runs on it. Same results as :func:`acegnn.nn.sequential_rollout` (greedy), at
the cost of ``candidates x (units + edges) x hidden^2`` per agent step.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Union

import torch
from torch import Tensor
from torch_geometric.data import Batch, HeteroData

from acegnn.graph.index import unit_index
from acegnn.graph.schema import ACTION
from acegnn.graph.state import as_batch
from acegnn.nn.rollout import agent_ranks
from acegnn.nn.se_state import apply_actions

if TYPE_CHECKING:  # pragma: no cover
    from acegnn.nn.ace import ACENetwork


def _segments(ptr: Tensor, graphs: Tensor):
    """Element ids of ``graphs`` (with repetition) under CSR pointer ``ptr``, the new
    pointer, and the offset that maps an old id to its new position."""
    counts = ptr[graphs + 1] - ptr[graphs]
    new_ptr = torch.zeros(graphs.numel() + 1, dtype=torch.long, device=ptr.device)
    new_ptr[1:] = counts.cumsum(0)
    owner = torch.repeat_interleave(torch.arange(graphs.numel(), device=ptr.device), counts)
    ids = torch.arange(int(new_ptr[-1]), device=ptr.device) - new_ptr[owner] + ptr[graphs[owner]]
    return ids, new_ptr, owner


def replicate(batch: Batch, graphs: Tensor) -> Batch:
    """A batch holding copies of the given graphs of ``batch``, in order."""
    out = Batch(_base_cls=HeteroData)
    node_ptr, node_shift = {}, {}
    B = int(batch.num_graphs)
    for t in batch.node_types:
        store = batch[t]
        ptr = store.ptr if "ptr" in store else torch.zeros(B + 1, dtype=torch.long,
                                                            device=graphs.device)
        ids, new_ptr, owner = _segments(ptr, graphs)
        for key, value in store.items():
            if key in ("batch", "ptr", "num_nodes"):
                continue
            out[t][key] = value[ids]
        out[t].batch, out[t].ptr, out[t].num_nodes = owner, new_ptr, int(new_ptr[-1])
        node_ptr[t], node_shift[t] = ptr, new_ptr
    for et in batch.edge_types:
        s, _, d = et
        ei, ea = batch[et].edge_index, batch[et].edge_attr
        edge_graph = batch[s].batch[ei[0]] if ei.numel() else ei.new_zeros(0)
        eptr = torch.zeros(B + 1, dtype=torch.long, device=graphs.device)
        eptr[1:] = torch.bincount(edge_graph, minlength=B).cumsum(0)
        ids, _, owner = _segments(eptr, graphs)
        g = graphs[owner]
        src = ei[0, ids] - node_ptr[s][g] + node_shift[s][owner]
        dst = ei[1, ids] - node_ptr[d][g] + node_shift[d][owner]
        out[et].edge_index = torch.stack([src, dst])
        out[et].edge_attr = ea[ids]
    out._num_graphs = graphs.numel()
    return out


def naive_rollout(net: "ACENetwork", data: Union[HeteroData, Batch],
                  order: Union[str, Tensor] = "default", max_edges: int = 2_000_000) -> Tensor:
    """Greedy sequential decision, re-encoding every candidate SE-state.

    Args:
        max_edges (int, optional): Candidates are processed in chunks of at most about
            this many copied edges, to bound memory. (default: :obj:`2_000_000`)

    Returns:
        ``[num_actions]`` V of every candidate (NaN elsewhere), as
        :attr:`Rollout.candidate_values` of the greedy efficient rollout.
    """
    batch = as_batch(data)
    idx = unit_index(net.schema, batch)
    rank = agent_ranks(idx, order)
    A = idx.action_kind.numel()
    device = idx.agents.device
    values = torch.full((A,), float("nan"), device=device)
    action_ptr = batch[ACTION].ptr
    num_edges = sum(batch[et].edge_index.size(1) for et in batch.edge_types)
    edges_per_graph = max(1, num_edges // max(1, idx.num_graphs))
    chunk = max(1, max_edges // edges_per_graph)
    steps = int(rank.max()) + 1 if idx.num_agents else 0
    chosen = torch.full((idx.num_graphs, steps), -1, dtype=torch.long, device=device)  # action rows so far
    for k in range(steps):
        cand = (idx.action_available & (rank[idx.action_agent] == k)).nonzero().view(-1)
        for part in cand.split(chunk):
            graphs = idx.action_batch[part]
            rep = replicate(batch, graphs)
            enc = net.encode(rep, check=False)  # encode every candidate's state again
            shift = (rep[ACTION].ptr[:-1] - action_ptr[graphs]).unsqueeze(1)
            rows = torch.cat([part.unsqueeze(1), chosen[graphs, :k]], dim=1) + shift
            units = apply_actions(enc.units, enc, rows.reshape(-1))
            values[part] = net.value(units, enc)
        # greedy choice per acting agent: the first maximum, as the efficient rollout
        seg = idx.action_agent[cand]
        v = values[cand]
        vmax = torch.full((idx.num_agents,), float("-inf"), device=device).scatter_reduce(
            0, seg, v, reduce="amax")
        pos = torch.arange(cand.numel(), device=device)
        first = torch.full((idx.num_agents,), cand.numel(), device=device).scatter_reduce(
            0, seg, torch.where(v == vmax[seg], pos, cand.numel()), reduce="amin")
        acting = seg.unique()
        chosen[idx.agent_batch[acting], k] = cand[first[acting]]
    return values

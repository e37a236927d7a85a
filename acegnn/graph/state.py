"""Building states as HeteroData and batching them."""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence, Union

import torch
from torch import Tensor
from torch_geometric.data import Batch, HeteroData

from acegnn.graph.schema import ACTION, EdgeType, GraphSchema


def dense_actions(
    schema: GraphSchema,
    actor_type: str,
    kind: Tensor,
    available: Optional[Tensor] = None,
    target: Optional[Tensor] = None,
    target_type: Union[str, Sequence[Optional[str]], None] = None,
) -> Dict[str, Tensor]:
    """The action table of the units of one agent type whose action lists are aligned.

    Slot ``j`` of every agent is action ``j`` of the environment, so a chosen slot is
    the action id to send to the environment.

    Args:
        schema (GraphSchema): The environment's schema.
        actor_type (str): The agent node type acting.
        kind (Tensor): ``[num_agents, num_slots]`` or ``[num_slots]`` action kind index.
        available (Tensor, optional): ``[num_agents, num_slots]`` bool mask.
            (default: all available)
        target (Tensor, optional): ``[num_agents, num_slots]`` or ``[num_slots]`` local
            index of the target unit in its node type, ``-1`` for none. (default: none)
        target_type (str or list, optional): The node type of the targets, one for all
            slots or one per slot (``None`` for untargeted slots). (default: :obj:`None`)

    Returns:
        A dict of flat action fields, to pass to :func:`build_state` (several dicts can
        be merged with :func:`cat_actions`).
    """
    if available is None:
        if kind.dim() != 2:
            raise ValueError(f"pass `available` or a 2-D `kind` to know the number of agents "
                             f"(got kind of shape {tuple(kind.shape)})")
        available = torch.ones_like(kind, dtype=torch.bool)
    num_agents, num_slots = available.shape
    kind = kind.expand(num_agents, num_slots)
    if target is None:
        target = torch.full((num_slots,), -1, dtype=torch.long)
    target = target.expand(num_agents, num_slots)
    if isinstance(target_type, str) or target_type is None:
        tt = -1 if target_type is None else schema.node_type_index(target_type)
        ttype = torch.full((num_slots,), tt, dtype=torch.long)
    else:
        if len(target_type) != num_slots:
            raise ValueError(f"target_type needs one entry per slot ({num_slots}) "
                             f"(got {len(target_type)})")
        ttype = torch.tensor([-1 if t is None else schema.node_type_index(t) for t in target_type])
    ttype = torch.where(target < 0, torch.full_like(target, -1), ttype.expand(num_agents, num_slots))
    return {
        "kind": kind.reshape(-1).long(),
        "actor_type": torch.full((num_agents * num_slots,), schema.node_type_index(actor_type)),
        "actor": torch.arange(num_agents).repeat_interleave(num_slots),
        "target_type": ttype.reshape(-1).long(),
        "target": target.reshape(-1).long(),
        "slot": torch.arange(num_slots).repeat(num_agents),
        "available": available.reshape(-1).bool(),
    }


def only_noop(available: Tensor, can_act: Tensor, noop: int) -> Tensor:
    """The action mask of agents of which some can no longer act (a dead unit): such an
    agent keeps only its ``noop`` slot, the convention of :mod:`acegnn.envs.base`.

    Args:
        available (Tensor): ``[..., n_agents, num_slots]`` bool mask of the live rules.
        can_act (Tensor): ``[..., n_agents]`` bool, :obj:`False` for agents that cannot act.
        noop (int): The slot of the no-op.

    Returns:
        Tensor: ``[..., n_agents, num_slots]`` the mask, with exactly the no-op available to
        every agent that cannot act.
    """
    if not 0 <= noop < available.size(-1):
        raise ValueError(f"noop must be a slot in 0..{available.size(-1) - 1} (got {noop})")
    if can_act.shape != available.shape[:-1]:
        raise ValueError(f"can_act must have shape {tuple(available.shape[:-1])} "
                         f"(got {tuple(can_act.shape)})")
    out = available & can_act.unsqueeze(-1)
    out[..., noop] |= ~can_act
    return out


def cat_actions(*tables: Mapping[str, Tensor]) -> Dict[str, Tensor]:
    """Concatenate action tables (e.g. of several agent types)."""
    return {k: torch.cat([t[k] for t in tables]) for k in tables[0]}


def build_state(
    schema: GraphSchema,
    x_dict: Mapping[str, Tensor],
    edge_index_dict: Mapping[EdgeType, Tensor],
    edge_attr_dict: Mapping[EdgeType, Tensor],
    actions: Mapping[str, Tensor],
) -> HeteroData:
    """One state as a :class:`HeteroData` that follows ``schema``.

    Node type ``t`` holds ``x`` ``[num_t, F_t]``; edge type ``e`` holds ``edge_index``
    ``[2, E]`` and ``edge_attr`` ``[E, F_e]``; the node store ``"action"`` holds the
    action table (see :func:`dense_actions`). Missing node or edge types are stored
    empty, so that every state of a schema batches with every other.
    """
    data = HeteroData()
    for t, dim in schema.node_types.items():
        x = x_dict.get(t)
        data[t].x = torch.zeros(0, dim) if x is None else x
    for et, dim in schema.edge_types.items():
        ei = edge_index_dict.get(et)
        data[et].edge_index = torch.zeros(2, 0, dtype=torch.long) if ei is None else ei
        ea = edge_attr_dict.get(et)
        data[et].edge_attr = torch.zeros(0, dim) if ea is None else ea
    store = data[ACTION]
    for key, value in actions.items():
        store[key] = value
    store.num_nodes = int(actions["kind"].numel())
    return data


def collate(states: Sequence[HeteroData]) -> Batch:
    """Batch states (any unit counts) into one PyG batch."""
    return Batch.from_data_list(list(states))


def as_batch(data: Union[HeteroData, Batch]) -> Batch:
    """A single state becomes a batch of one; a batch is returned as is."""
    if isinstance(data, Batch):
        return data
    return Batch.from_data_list([data])


def full_edges(num_src: int, num_dst: int, same: bool) -> Tensor:
    """All ``src -> dst`` pairs, without self loops when ``same``. ``[2, E]``"""
    src = torch.arange(num_src).repeat_interleave(num_dst)
    dst = torch.arange(num_dst).repeat(num_src)
    if same:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    return torch.stack([src, dst])

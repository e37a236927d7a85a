"""Flat, graph-major indexing of the units and actions of a batch of states.

Every unit of a batch gets one row in a flat ``[num_units, hidden]`` matrix: graph 0's
units first (node types in schema order), then graph 1's, and so on. Actions refer to
their actor and target by flat row. Checking a batch against its schema happens here,
once per batch.
"""
from __future__ import annotations

from typing import Dict, NamedTuple, Optional

import torch
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.graph.schema import ACTION, ACTION_FIELDS, GraphSchema


class UnitIndex(NamedTuple):
    """Flat indexing of one batch (all tensors on the batch's device)."""

    num_graphs: int
    num_units: int
    unit_batch: Tensor  # [num_units] graph of every unit
    unit_count: Tensor  # [num_graphs] units per graph
    unit_ptr: Tensor  # [num_graphs + 1]
    flat: Dict[str, Tensor]  # node type -> [num_t] flat row of each node
    agents: Tensor  # [num_agents] flat row of every agent, graph-major
    agent_batch: Tensor  # [num_agents]
    agent_ptr: Tensor  # [num_graphs + 1]
    # Action table, one entry per action of the batch:
    action_kind: Tensor  # [A]
    action_agent: Tensor  # [A] index into ``agents``
    action_actor: Tensor  # [A] flat row of the acting unit
    action_target: Tensor  # [A] flat row of the target unit, -1 for none
    action_slot: Tensor  # [A] position in the agent's action list (env action id)
    action_available: Tensor  # [A] bool
    action_batch: Tensor  # [A]
    unit_alive: Optional[Tensor] = None  # [num_units] bool; None: every unit counts
    agent_key: Optional[Tensor] = None  # [num_agents] sort key of order="sorted", if given

    @property
    def num_agents(self) -> int:
        return int(self.agents.numel())


def store_of(batch: Batch, key):
    """``batch[key]`` of a node type or an edge type the batch has, without PyG's key
    resolution (some microseconds a lookup, and a rollout makes dozens)."""
    stores = batch.__dict__.get("_edge_store_dict" if isinstance(key, tuple) else "_node_store_dict")
    store = None if stores is None else stores.get(key)
    return batch[key] if store is None else store


def _ptr(store, num_graphs: int, device) -> Tensor:
    ptr = getattr(store, "ptr", None)
    if ptr is None:  # a graph type with no node in any graph may lack ptr
        return torch.zeros(num_graphs + 1, dtype=torch.long, device=device)
    return ptr


def unit_index(schema: GraphSchema, batch: Batch, check: bool = True) -> UnitIndex:
    """Compute the flat layout of ``batch`` and validate it against ``schema``.

    A batch built by a :class:`~acegnn.graph.dense.DenseLayout` reuses the layout's
    indexing of its batch size (validated once).

    Raises:
        ValueError: on a feature width that does not match the schema, NaN or infinite
            features, an action whose kind, actor or target is not in the graph, or an
            agent without any available action.
    """
    from acegnn.graph.dense import layout_of  # dense builds on this module

    layout = layout_of(batch, schema)
    if layout is not None:
        idx = layout.unit_index(batch, check)
        if idx is not None:
            return idx
    return compute_unit_index(schema, batch, check)


class _UnitLayout(NamedTuple):
    """Where each node type's units sit in the flat rows of a batch."""

    counts: Tensor  # [T, B] units of type t in graph b
    type_start: Tensor  # [T, B] flat row of the first unit of type t in graph b
    unit_count: Tensor  # [B]
    unit_ptr: Tensor  # [B + 1]
    unit_batch: Tensor  # [num_units]
    flat: Dict[str, Tensor]  # node type -> [N_t] flat rows


def _unit_layout(names, batch: Batch, num_graphs: int, device) -> _UnitLayout:
    ptrs = torch.stack([_ptr(batch[t], num_graphs, device) for t in names])  # [T, B + 1]
    counts = ptrs[:, 1:] - ptrs[:, :-1]  # [T, B]
    unit_count = counts.sum(0)
    unit_ptr = torch.zeros(num_graphs + 1, dtype=torch.long, device=device)
    unit_ptr[1:] = unit_count.cumsum(0)
    type_start = unit_ptr[:-1].unsqueeze(0) + counts.cumsum(0) - counts  # [T, B]
    flat: Dict[str, Tensor] = {}
    for ti, t in enumerate(names):
        n = int(ptrs[ti, -1])
        b = batch[t].batch if n > 0 else torch.zeros(0, dtype=torch.long, device=device)
        flat[t] = type_start[ti, b] + torch.arange(n, device=device) - ptrs[ti, b]
    unit_batch = torch.repeat_interleave(torch.arange(num_graphs, device=device), unit_count)
    return _UnitLayout(counts, type_start, unit_count, unit_ptr, unit_batch, flat)


def _agent_layout(schema: GraphSchema, units: _UnitLayout, num_graphs: int):
    """The agents' flat rows (graph-major, types in schema order), their graphs, the
    per-graph pointer and ``agent_of_row`` ``[num_units]`` (-1 for a unit that is no agent)."""
    agents, _ = torch.sort(torch.cat([units.flat[t] for t in schema.agent_types]))
    agent_batch = units.unit_batch[agents]
    agent_ptr = torch.zeros(num_graphs + 1, dtype=torch.long, device=agents.device)
    agent_ptr[1:] = torch.bincount(agent_batch, minlength=num_graphs).cumsum(0)
    agent_of_row = torch.full((units.unit_batch.numel(),), -1, dtype=torch.long, device=agents.device)
    agent_of_row[agents] = torch.arange(agents.numel(), device=agents.device)
    return agents, agent_batch, agent_ptr, agent_of_row


def _flat_rows(names, units: _UnitLayout, type_idx: Tensor, local: Tensor, graph: Tensor,
               what: str, check: bool) -> Tensor:
    """Flat rows of the units ``(type_idx, local)`` of the graphs ``graph`` (an action's
    actor or target), checked to exist when ``check``."""
    num_types = len(names)
    bad = (type_idx < 0) | (type_idx >= num_types)
    if check and bool(bad.any()):
        raise ValueError(f"action {what} type index out of range 0..{num_types - 1} "
                         f"(got {type_idx[bad][:5].tolist()})")
    ti = type_idx.clamp(0, num_types - 1)
    n_of = units.counts[ti, graph]
    bad = (local < 0) | (local >= n_of)
    if check and bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise ValueError(f"action {i} of graph {int(graph[i])}: {what} {int(local[i])} is not a "
                         f"unit of type '{names[int(ti[i])]}' in that graph "
                         f"(it has {int(n_of[i])})")
    return units.type_start[ti, graph] + local


def _check_action_kinds(schema: GraphSchema, store) -> None:
    """Each action's kind exists and its actor is of an agent type."""
    kind, device = store.kind, store.kind.device
    bad = (kind < 0) | (kind >= schema.num_kinds)
    if bool(bad.any()):
        raise ValueError(f"action kind out of range 0..{schema.num_kinds - 1} "
                         f"(got {kind[bad][:5].tolist()})")
    agent_type_ids = torch.tensor([schema.node_type_index(t) for t in schema.agent_types],
                                  device=device)
    bad = ~torch.isin(store.actor_type, agent_type_ids)
    if bool(bad.any()):
        raise ValueError(f"an actor must be a unit of an agent type {list(schema.agent_types)} "
                         f"(got type index {int(store.actor_type[bad][0])})")


def _check_action_targets(schema: GraphSchema, store) -> None:
    """Each action has a target exactly when its kind is targeted."""
    kind = store.kind
    targeted = torch.zeros(schema.num_kinds, dtype=torch.bool, device=kind.device)
    targeted[list(schema.targeted_kinds)] = True
    need, has_target = targeted[kind], store.target >= 0
    missing, extra = need & ~has_target, ~need & has_target
    if bool(missing.any()):
        i = int(missing.nonzero()[0])
        raise ValueError(f"action {i} of kind '{schema.action_kinds[int(kind[i])].name}' is "
                         f"targeted but has no target")
    if bool(extra.any()):
        i = int(extra.nonzero()[0])
        raise ValueError(f"action {i} of kind '{schema.action_kinds[int(kind[i])].name}' is "
                         f"not targeted but has a target ({int(store.target[i])})")


def compute_unit_index(schema: GraphSchema, batch: Batch, check: bool = True,
                       per_state: bool = True) -> UnitIndex:
    """:func:`unit_index` from scratch; without ``per_state``, only the structure (the
    fields :func:`state_flags` would read are left at their defaults)."""
    names = schema.node_type_names
    num_graphs = int(batch.num_graphs)
    device = batch[names[0]].x.device
    if check:
        check_features(schema, batch)
    units = _unit_layout(names, batch, num_graphs, device)
    agents, agent_batch, agent_ptr, agent_of_row = _agent_layout(schema, units, num_graphs)

    store = batch[ACTION]
    missing = [k for k in ACTION_FIELDS if k not in store]
    if missing:
        raise ValueError(f"the action table lacks the fields {missing}; build states with "
                         f"acegnn.graph.build_state")
    if check:
        _check_action_kinds(schema, store)
    graph = store.batch if store.kind.numel() > 0 else torch.zeros(0, dtype=torch.long, device=device)
    actor = _flat_rows(names, units, store.actor_type, store.actor, graph, "actor", check)
    if check:
        _check_action_targets(schema, store)
    has_target = store.target >= 0
    target = _flat_rows(names, units, torch.where(has_target, store.target_type, 0),
                        torch.where(has_target, store.target, 0), graph, "target", check)
    available = store.available.bool()
    idx = UnitIndex(
        num_graphs=num_graphs, num_units=int(units.unit_ptr[-1]), unit_batch=units.unit_batch,
        unit_count=units.unit_count, unit_ptr=units.unit_ptr, flat=units.flat, agents=agents,
        agent_batch=agent_batch, agent_ptr=agent_ptr, action_kind=store.kind,
        action_agent=agent_of_row[actor], action_actor=actor,
        action_target=torch.where(has_target, target, -1),
        action_slot=store.slot, action_available=available, action_batch=graph)
    if per_state:
        idx = idx._replace(**state_flags(schema, batch, idx))
    if check:
        check_available(idx, available)
    return idx


def state_flags(schema: GraphSchema, batch: Batch, idx: UnitIndex) -> Dict[str, Optional[Tensor]]:
    """The per-state fields of :class:`UnitIndex` read from optional attributes, given
    the batch's structural indexing ``idx``:

    * ``unit_alive`` ``[num_units]`` from the node stores' ``alive`` flags (a node type
      without them counts as alive; ``None`` when no type has them). A unit that is not
      alive (a dead unit of a battle) influences nothing: the unit encoder drops its
      edges and the value head leaves it out of the pooling.
    * ``agent_key`` ``[num_agents]`` from the agent types' ``order_key`` (``None`` when
      they have none): the decision order ``"sorted"`` sorts a graph's agents by it.
    * ``action_target`` switched by the action table's optional ``target_on`` ``[A]``
      flags: an action whose flag is off has no target in this state (no passive
      message), e.g. a football player's action moves the ball only while the player
      owns it. Without the flags the targets are the table's.
    """
    flat, agents, num_units = idx.flat, idx.agents, idx.num_units
    stores = {t: store_of(batch, t) for t in schema.node_types}
    typed = [t for t, store in stores.items() if "alive" in store]
    alive = None
    if typed:
        alive = torch.ones(num_units, dtype=torch.bool, device=agents.device)
        for t in typed:
            flags = stores[t].alive
            if flags.shape != flat[t].shape:
                raise ValueError(f"node type '{t}' has alive flags of shape {tuple(flags.shape)}; "
                                 f"it has {flat[t].numel()} units")
            alive[flat[t]] = flags.bool()
    keyed = [t for t in schema.agent_types if "order_key" in stores[t]]
    key = None
    if keyed:
        if len(keyed) != len(schema.agent_types):
            raise ValueError(f"order keys are given for the agent types {keyed} but not for all "
                             f"of {list(schema.agent_types)}")
        key = torch.empty(agents.numel(), dtype=torch.float64, device=agents.device)
        for t in keyed:
            k = stores[t].order_key
            if k.shape != flat[t].shape:
                raise ValueError(f"node type '{t}' has order keys of shape {tuple(k.shape)}; it "
                                 f"has {flat[t].numel()} units")
            key[torch.searchsorted(agents, flat[t])] = k.double()
    out = {"unit_alive": alive, "agent_key": key}
    actions = store_of(batch, ACTION)
    if "target_on" in actions:
        on = actions.target_on
        if on.shape != idx.action_target.shape:
            raise ValueError(f"target_on must hold one flag per action ({idx.action_target.numel()}) "
                             f"(got shape {tuple(on.shape)})")
        out["action_target"] = torch.where(on.bool(), idx.action_target,
                                           torch.full_like(idx.action_target, -1))
    return out


#: The agent node stores' optional attribute of what each agent observes (see
#: :func:`observed_units`).
OBSERVES = "observes"


def observed_units(schema: GraphSchema, batch: Batch, idx: UnitIndex) -> Optional[Tensor]:
    """What each agent observes, from the agent types' optional ``observes`` attributes
    (the decentralised view of ACE-CTDE, :mod:`acegnn.nn.individual`).

    A task with partial observation puts on every agent node store a bool matrix
    ``observes`` ``[N_t, W]``: entry ``(i, j)`` says whether agent ``i`` observes the unit
    at position ``j`` of its own graph (the graph's units in schema type order, as the
    flat rows of :class:`UnitIndex` within the graph), with ``W`` at least the graph's
    unit count; the columns past it must be ``False`` (padding, where graphs of one
    batch have different unit counts). The views built from it
    (:func:`acegnn.nn.individual.agent_views`) hold an agent itself, whatever its row
    says, and no unit that is not alive; a dead agent observes nothing.

    Returns:
        ``[num_agents, W]`` bool in the batch's agent order, or ``None`` when no agent
        type has the attribute: every agent observes every unit of its graph.

    Raises:
        ValueError: if only some agent types have the attribute, on a wrong shape, or
            on an observed position past the graph's units.
    """
    stores = {t: store_of(batch, t) for t in schema.agent_types}
    given = [t for t, store in stores.items() if OBSERVES in store]
    if not given:
        return None
    if len(given) != len(stores):
        raise ValueError(f"'{OBSERVES}' is given for the agent types {given} but not for all "
                         f"of {list(schema.agent_types)}")
    widths = {t: stores[t][OBSERVES].shape for t in given}
    width = max((s[-1] for s in widths.values() if len(s) == 2), default=0)
    for t, shape in widths.items():
        if len(shape) != 2 or shape != (idx.flat[t].numel(), width):
            raise ValueError(f"node type '{t}' has '{OBSERVES}' of shape {tuple(shape)}; it needs "
                             f"one row per unit ({idx.flat[t].numel()}) and one column per unit "
                             f"of the largest graph, the same for every agent type")
    device = idx.agents.device
    need = int(idx.unit_count[idx.agent_batch].max()) if idx.num_agents > 0 else 0
    if width < need:
        raise ValueError(f"'{OBSERVES}' has {width} columns; an agent's graph has {need} units, "
                         f"one column each")
    out = torch.zeros(idx.num_agents, width, dtype=torch.bool, device=device)
    for t in given:
        out[torch.searchsorted(idx.agents, idx.flat[t])] = stores[t][OBSERVES].bool().to(device)
    beyond = torch.arange(width, device=device) >= idx.unit_count[idx.agent_batch].unsqueeze(1)
    if bool((out & beyond).any()):
        i = int((out & beyond).any(1).nonzero()[0])
        raise ValueError(f"agent {i} (graph {int(idx.agent_batch[i])}) observes a position past "
                         f"its graph's {int(idx.unit_count[idx.agent_batch[i]])} units")
    return out


def check_available(idx: UnitIndex, available: Tensor) -> None:
    """Every agent needs an available action."""
    if idx.num_agents == 0:
        return
    n_avail = torch.bincount(idx.action_agent[available], minlength=idx.num_agents)
    if bool((n_avail == 0).any()):
        i = int((n_avail == 0).nonzero()[0])
        raise ValueError(f"agent {i} (graph {int(idx.agent_batch[i])}) has no available action; "
                         f"every agent needs at least one (e.g. a no-op for dead units)")


def check_features(schema: GraphSchema, batch: Batch, edges: bool = True) -> None:
    """Feature shapes per type, finite features and (``edges``) edge indices inside their
    node sets; a dense layout's batches skip the edge indices, its own and checked once.
    The values are read with one synchronisation."""
    bad = []  # (0-dim bool tensor, error) of the value checks
    for t, dim in schema.node_types.items():
        x = store_of(batch, t).x
        if x.dim() != 2 or x.size(1) != dim:
            raise ValueError(f"node type '{t}' has features of shape {tuple(x.shape)}; the schema "
                             f"says width {dim}")
        bad.append((~torch.isfinite(x).all(), f"node type '{t}' has NaN or infinite features"))
    for et, dim in schema.edge_types.items():
        store = store_of(batch, et)
        ea = store.edge_attr
        if ea.dim() != 2 or ea.size(1) != dim:
            raise ValueError(f"edge type {et} has features of shape {tuple(ea.shape)}; the schema "
                             f"says width {dim}")
        if ea.size(0) != store.edge_index.size(1):
            raise ValueError(f"edge type {et} has {store.edge_index.size(1)} edges but "
                             f"{ea.size(0)} feature rows")
        bad.append((~torch.isfinite(ea).all(), f"edge type {et} has NaN or infinite features"))
        ei = store.edge_index
        if edges and ei.numel() > 0:
            n_src, n_dst = store_of(batch, et[0]).x.size(0), store_of(batch, et[2]).x.size(0)
            lo, hi = ei.amin(1), ei.amax(1)
            bad.append(((lo < 0).any() | (hi[0] >= n_src) | (hi[1] >= n_dst),
                        f"edge type {et} has an edge_index outside its node sets "
                        f"({n_src} src, {n_dst} dst nodes)"))
    if bad and bool(torch.stack([b for b, _ in bad]).any()):
        raise ValueError(next(msg for b, msg in bad if bool(b)))

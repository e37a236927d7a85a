r"""ACE-CTDE's individual value :math:`Q(o_i, a_i)` and its counterfactual targets (paper
"Apply ACE to the CTDE scheme" and Appendix "ACE-CTDE").

Both are computed on one graph per agent, its *view* (:func:`agent_views`): the live
units of the agent's graph that it observes
(:func:`acegnn.graph.index.observed_units`), itself always, and its own actions. An
action acts on the agent's row and targets its target's row, if the agent observes it.

**Individual value** (:class:`IndividualQ`):

.. math::
    Q(o_i, a_i) = \mathrm{value}\big(\{e^{o_i}_u(u_j) + [j = i]\, e_a^a(a_i)
        + [j = \mathrm{target}(a_i)]\, e_a^p(a_i) : j \in o_i\}\big)

with :math:`e^{o_i}_u` the unit encoder on the edges among the units of :math:`o_i`, and
the value encoder pooling over the units of :math:`o_i`.

**Counterfactual targets** (:func:`counterfactual_values`):

.. math::
    \hat Q(o_i, a_i) = V\big(s_{a_i, a^*_{-i}}\big)

for every action :math:`a_i` of every agent, with :math:`a^*` the joint action of a
sequential rollout. Each candidate :math:`a_i` adds its messages to agent :math:`i`'s
copy of :math:`s_{a^*}` less :math:`a^*_i`'s messages, and is valued without
re-encoding (:meth:`acegnn.nn.value_head.ValueHead.candidate_values`).

See docs/ace_ctde.md ("What is computed").
"""
from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Union

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch, HeteroData

from acegnn.graph.index import UnitIndex, observed_units, store_of, unit_index
from acegnn.graph.schema import GraphSchema
from acegnn.graph.state import as_batch
from acegnn.nn.ace import ModelConfig
from acegnn.nn.action_encoder import ActionEncoder
from acegnn.nn.init import init_relu_layers
from acegnn.nn.rollout import NAN_VALUES, Rollout
from acegnn.nn.se_state import EncodedState, apply_actions, candidate_rows
from acegnn.nn.unit_encoder import UnitEncoder
from acegnn.nn.value_head import ValueHead

#: What :class:`IndividualQ` shares with the centralised network (``algo.share``).
SHARES = ("encoders", "all", "none")


class AgentViews(NamedTuple):
    """One graph per agent (:func:`agent_views`): view ``i`` is agent ``i``'s."""

    index: UnitIndex  # the views' flat indexing; the batch's action table routed into them
    unit: Tensor  # [P] flat row in the batch of every view row
    row_of: Tensor  # [num_agents, W] view row of (agent, position in its graph), -1 outside
    local: Dict[str, Tensor]  # node type -> [P_t] row in batch[t] of the view's units of type t


def _ragged_arange(counts: Tensor) -> Tensor:
    """``0..c-1`` for every ``c`` of ``counts``, concatenated."""
    start = torch.cumsum(counts, 0) - counts
    return torch.arange(int(counts.sum()), device=counts.device) - start.repeat_interleave(counts)


def agent_views(idx: UnitIndex, observes: Optional[Tensor] = None,
                whole: bool = False) -> AgentViews:
    """The view of every agent of a batch: the live units it observes and itself.

    Args:
        idx (UnitIndex): The batch's indexing.
        observes (Tensor, optional): ``[num_agents, W]`` bool by position in the agent's
            graph (:func:`acegnn.graph.index.observed_units`); :obj:`None`: every unit.
        whole (bool, optional): Every unit of the agent's graph instead, alive or not (a
            copy of the whole state per agent: the counterfactual SE-states).
            (default: :obj:`False`)

    The views' :class:`UnitIndex` has one graph per agent (its ``agents``: the agent's
    own row of each view) and the batch's action table (``action_agent``, slots and
    availability unchanged; ``action_batch`` is the agent): an action acts on its
    agent's row and targets its target's row of the same view, ``-1`` where the agent
    does not observe the target. A unit that is not alive is in no view but its own
    agent's; a dead agent observes nothing: its view is itself alone, not alive.
    """
    n, device = idx.num_agents, idx.agents.device
    graph = idx.agent_batch
    width = int(idx.unit_count.max()) if idx.num_graphs > 0 else 0
    pos = torch.arange(width, device=device)
    member = pos < idx.unit_count[graph].unsqueeze(1)  # [n, W] units of the agent's graph
    if observes is not None and not whole:
        if observes.dim() != 2 or observes.size(0) != n:
            raise ValueError(f"observes must be [num_agents ({n}), W] "
                             f"(got {tuple(observes.shape)})")
        seen = observes.bool()[:, :width]
        if seen.size(1) < width:
            raise ValueError(f"observes has {observes.size(1)} columns; the largest graph has "
                             f"{width} units")
        member = member & seen
    flat = (idx.unit_ptr[graph].unsqueeze(1) + pos).clamp(max=max(idx.num_units - 1, 0))
    if idx.unit_alive is not None and not whole:  # no one sees a dead unit, a dead agent nothing
        member = member & idx.unit_alive[flat] & idx.unit_alive[idx.agents].unsqueeze(1)
    own = idx.agents - idx.unit_ptr[graph]  # [n] position of each agent in its graph
    member[torch.arange(n, device=device), own] = True
    agent_of, at = member.nonzero(as_tuple=True)  # sorted by agent, then position
    unit = flat[agent_of, at]
    P = unit.numel()
    row_of = torch.full((n, width), -1, dtype=torch.long, device=device)
    row_of[agent_of, at] = torch.arange(P, device=device)

    type_of = torch.empty(idx.num_units, dtype=torch.long, device=device)
    local_row = torch.empty(idx.num_units, dtype=torch.long, device=device)
    for ti, rows in enumerate(idx.flat.values()):
        type_of[rows] = ti
        local_row[rows] = torch.arange(rows.numel(), device=device)
    view_type = type_of[unit]
    flat_v = {t: (view_type == ti).nonzero().view(-1) for ti, t in enumerate(idx.flat)}
    local = {t: local_row[unit[rows]] for t, rows in flat_v.items()}

    count = torch.bincount(agent_of, minlength=n)
    ptr = torch.zeros(n + 1, dtype=torch.long, device=device)
    ptr[1:] = count.cumsum(0)
    agents = row_of[torch.arange(n, device=device), own]
    tgt = idx.action_target
    tpos = (tgt - idx.unit_ptr[idx.action_batch]).clamp(min=0)
    target = torch.where(tgt >= 0, row_of[idx.action_agent, tpos], torch.full_like(tgt, -1))
    index = idx._replace(
        num_graphs=n, num_units=P, unit_batch=agent_of, unit_count=count, unit_ptr=ptr,
        flat=flat_v, agents=agents, agent_batch=torch.arange(n, device=device),
        agent_ptr=torch.arange(n + 1, device=device), action_actor=agents[idx.action_agent],
        action_target=target, action_batch=idx.action_agent,
        unit_alive=None if idx.unit_alive is None else idx.unit_alive[unit], agent_key=None)
    return AgentViews(index, unit, row_of, local)


def _view_edges(batch: Batch, schema: GraphSchema, idx: UnitIndex, views: AgentViews) -> tuple:
    """Per edge type, the edges of the batch between two units of one view, once per
    view: ``({e: [2, E'_e]}`` in the views' per-type numbering, ``{e: [E'_e, F_e]})``.
    Every edge is tried once per agent of its graph."""
    device = idx.agents.device
    vlocal = torch.empty(views.unit.numel(), dtype=torch.long, device=device)
    for rows in views.index.flat.values():
        vlocal[rows] = torch.arange(rows.numel(), device=device)
    ei_v, ea_v = {}, {}
    for et in schema.edge_types:
        store = store_of(batch, et)
        ei, ea = store.edge_index, store.edge_attr
        src, dst = idx.flat[et[0]][ei[0]], idx.flat[et[2]][ei[1]]
        graph = idx.unit_batch[src]
        per = idx.agent_ptr[graph + 1] - idx.agent_ptr[graph]  # agents of each edge's graph
        edge = torch.arange(ei.size(1), device=device).repeat_interleave(per)  # [E * n_g]
        g = graph[edge]
        agent = idx.agent_ptr[g] + _ragged_arange(per)
        start = idx.unit_ptr[g]
        s_v = views.row_of[agent, src[edge] - start]
        d_v = views.row_of[agent, dst[edge] - start]
        keep = (s_v >= 0) & (d_v >= 0)
        ei_v[et] = torch.stack([vlocal[s_v[keep]], vlocal[d_v[keep]]])
        ea_v[et] = ea[edge[keep]]
    return ei_v, ea_v


class IndividualValues(NamedTuple):
    """:math:`Q(o_i, a)` of every action of a batch (:meth:`IndividualQ.forward`)."""

    q: Tensor  # [num_actions] Q of each action row (unavailable ones valued too)
    index: UnitIndex  # the batch's indexing
    views: AgentViews  # the agents' views the values were computed on


class IndividualQ(nn.Module):
    r"""The individual value :math:`Q(o_i, a_i)` of every action of every agent (module
    docstring): a unit encoder, an action encoder and a value encoder, applied to each
    agent's view.

    The parts may be the centralised network's own modules (tied weights; see
    :meth:`from_config`), registered here as well.

    Args:
        unit_encoder (UnitEncoder): Encodes each view's units (edges among them only).
        action_encoder (ActionEncoder): The agent's own action's embeddings.
        value_head (ValueHead): Values each view, pooling over its units.
    """

    def __init__(self, unit_encoder: UnitEncoder, action_encoder: ActionEncoder,
                 value_head: ValueHead) -> None:
        super().__init__()
        self.schema = unit_encoder.schema
        self.unit_encoder, self.action_encoder = unit_encoder, action_encoder
        self.value_head = value_head

    @classmethod
    def from_config(cls, net: nn.Module, model: ModelConfig,
                    share: str = "encoders") -> "IndividualQ":
        """The individual value of a centralised :class:`~acegnn.nn.ACENetwork` ``net``.

        Args:
            net: The centralised network.
            model (ModelConfig): Its config; parts not shared are built from it anew
                (same structure) and initialised by ``model.init``.
            share (str, optional): ``"encoders"``: ``net``'s unit and action encoders, a
                value encoder of its own; ``"all"``: ``net``'s three encoders;
                ``"none"``: three of its own. (default: :obj:`"encoders"`)
        """
        if share not in SHARES:
            raise ValueError(f"share must be one of {list(SHARES)} (got {share!r})")
        if model.messages != "kind":
            raise ValueError(f"ACE-CTDE's individual values take model.messages=kind only "
                             f"(got {model.messages!r}): pair messages would need the "
                             f"views' own pairs")
        if model.passive_input != "features":
            raise ValueError(f"ACE-CTDE's individual values take model.passive_input=features "
                             f"only (got {model.passive_input!r}): the passive table is the "
                             f"batch's, from node features")
        schema, hidden, layers = net.schema, model.hidden, model.layers
        fresh = []
        if share == "none":
            unit = UnitEncoder(schema, hidden, model.conv, dict(model.conv_kwargs), layers,
                               model.conv_layers)
            action = ActionEncoder(schema, hidden, model.passive, layers, model.passive_width)
            fresh += [unit, action]
        else:
            unit, action = net.unit_encoder, net.action_encoder
        if share == "all":
            value = net.value_head
        else:
            value = ValueHead(hidden, model.pool, model.value_depth)
            fresh.append(value)
        for m in fresh:
            init_relu_layers(m, model.init)
        return cls(unit, action, value)

    def forward(self, data: Union[HeteroData, Batch], check: bool = True) -> IndividualValues:
        """:math:`Q(o_i, a)` of every action row of ``data`` ``[num_actions]``.

        Args:
            data (HeteroData or Batch): States; their agents' observations are read from
                them (:func:`acegnn.graph.index.observed_units`).
            check (bool, optional): Validate the input. (default: :obj:`True`)
        """
        batch = as_batch(data)
        idx = unit_index(self.schema, batch, check=check)
        views = agent_views(idx, observed_units(self.schema, batch, idx))
        vidx = views.index
        x = {t: store_of(batch, t).x for t in self.schema.node_types}
        x_v = {t: x[t][views.local[t]] for t in self.schema.node_types}  # [P_t, F_t]
        ei_v, ea_v = _view_edges(batch, self.schema, idx, views)
        alive_v = None if vidx.unit_alive is None else \
            {t: vidx.unit_alive[rows] for t, rows in vidx.flat.items()}
        h = self.unit_encoder(x_v, ei_v, ea_v, alive_v)
        first = x_v[self.schema.node_type_names[0]]
        units = first.new_empty(vidx.num_units, self.unit_encoder.hidden)
        for t in self.schema.node_types:
            units = units.index_put((vidx.flat[t],), h[t])
        # passive embeddings come from the actor's own features: the batch's table
        ae = self.action_encoder
        passive, block = ae.passive_table(x, idx)
        enc = EncodedState(vidx, units, ae.active, passive, ae.passive_col, block)
        actions = torch.arange(idx.action_kind.numel(), device=units.device)
        rows = candidate_rows(units, enc, actions)
        base = self.value_head.pool_base(units, vidx)
        q = self.value_head.candidate_values(base, vidx, idx.action_agent, rows)
        return IndividualValues(q, idx, views)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.unit_encoder.hidden}, "
                f"conv={self.unit_encoder.conv_name}, pool={self.value_head.pool})")


def greedy_actions(values: Tensor, idx: UnitIndex) -> Tensor:
    """Each agent's available action of largest value, the first on ties: ``[num_agents]``
    rows of the action table (``values`` ``[num_actions]``).

    Raises:
        FloatingPointError: on a NaN value of an available action.
    """
    A, n = values.numel(), idx.num_agents
    avail = idx.action_available
    if bool(torch.isnan(values[avail]).any()):
        raise FloatingPointError(NAN_VALUES)
    v = values.masked_fill(~avail, float("-inf"))
    top = v.new_full((n,), float("-inf")).scatter_reduce(0, idx.action_agent, v, reduce="amax")
    rows = torch.arange(A, device=values.device)
    best = torch.where((v == top[idx.action_agent]) & avail, rows, torch.full_like(rows, A))
    return torch.full((n,), A, dtype=torch.long, device=values.device).scatter_reduce(
        0, idx.action_agent, best, reduce="amin")


def counterfactual_values(net: nn.Module, rollout: Rollout) -> Tensor:
    r""":math:`V(s_{a, a^*_{-i}})` of every action row ``a`` (of agent :math:`i`) of a batch
    ``[num_actions]``: the SE-state where every other agent takes its action of
    ``rollout`` and agent :math:`i` takes ``a`` (unavailable actions are valued too).

    Args:
        net (ACENetwork): The network that values them (``rollout``'s, so that the
            states' encoding is ``rollout.encoded``).
        rollout (Rollout): A rollout of ``net`` in which every agent decided.
    """
    enc = rollout.encoded
    idx = enc.index
    if bool((rollout.action_ids < 0).any()):
        raise ValueError("counterfactual values need a rollout in which every agent decided "
                         "(no max_steps)")
    views = agent_views(idx, whole=True)
    venc = enc._replace(index=views.index)
    final = rollout.final_units[views.unit]  # s_{a*} in every view
    own = apply_actions(torch.zeros_like(final), venc, rollout.action_ids)  # a*_i in view i
    base = final - own  # s_{a*_{-i}} in view i
    head = net.value_head
    actions = torch.arange(idx.action_kind.numel(), device=base.device)
    rows = candidate_rows(base, venc._replace(units=base), actions)
    return head.candidate_values(head.pool_base(base, views.index), views.index,
                                 idx.action_agent, rows)

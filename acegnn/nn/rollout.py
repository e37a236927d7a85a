r"""Decision with rollout (paper "Bidirectional Action-Dependent Q-learning").

Agents of every state decide one after another. At each step the acting agent's
available actions are rolled out to candidate SE-states, all candidates of the batch
are valued together, and the chosen action's messages are added before the next agent
decides. The state is encoded once for the whole sequence. A second head of the value
head's structure (ACE-PPO's logit encoder) can read the same candidates in the same pass.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import Batch, HeteroData

from acegnn.graph.dense import layout_of
from acegnn.graph.index import UnitIndex, store_of
from acegnn.graph.schema import ACTION
from acegnn.graph.state import as_batch
from acegnn.nn.se_state import (EncodedState, apply_actions, message_routes, message_table,
                                table_layout, zero_row)
from acegnn.nn.selectors import CandidateTable, Greedy, Selection, Selector
from acegnn.nn.value_head import Successors, SuccessorValues, ValueHead

GREEDY = Greedy()

if TYPE_CHECKING:  # pragma: no cover
    from acegnn.nn.ace import ACENetwork


class Rollout(NamedTuple):
    """Result of a sequential decision over a batch.

    Per-agent tensors follow the batch's agent order (graph-major, see
    :class:`~acegnn.graph.index.UnitIndex`); agents not reached (``max_steps``) hold
    ``-1`` / NaN.
    """

    actions: Tensor  # [num_agents] chosen slot (env action id)
    action_ids: Tensor  # [num_agents] chosen row of the batch's action table
    rank: Tensor  # [num_agents] position of the agent in its graph's decision order
    chosen_value: Tensor  # [num_agents] V(s_{a_1:i}) after agent i's chosen action
    max_value: Tensor  # [num_agents] max over agent i's candidates of V
    greedy_ids: Tensor  # [num_agents] row of the argmax candidate
    candidate_values: Tensor  # [num_actions] V of every candidate, NaN elsewhere
    next_agent: Tensor  # [num_agents] agent deciding after i in its graph, -1 for last
    first_agent: Tensor  # [num_graphs] first agent of each graph, -1 if it has none
    final_units: Tensor  # [num_units, H] unit embeddings of the last SE-state reached
    encoded: EncodedState  # the shared encoding of the states
    candidate_logits: Optional[Tensor] = None  # [num_actions] logit-head output, or None
    selection: Optional[Dict[str, Tensor]] = None  # name -> [num_agents] what the selector
    # returned with its choices (Selection.stats), NaN for agents it did not choose for


def agent_ranks(index: UnitIndex, order: Union[str, Tensor] = "default",
                generator: Optional[torch.Generator] = None) -> Tensor:
    """Position of every agent in its graph's decision sequence ``[num_agents]``.

    Args:
        order: ``"default"`` (agents in the graph's order), ``"random"`` (a uniform
            permutation per graph), ``"sorted"`` (by the agents' ``order_key``, which
            the task puts on the agent node stores; ties keep the graph's order), or a
            tensor of ranks, a permutation of ``0..n_g-1`` within every graph.
    """
    n = index.num_agents
    device = index.agents.device
    local = torch.arange(n, device=device) - index.agent_ptr[index.agent_batch]
    if isinstance(order, Tensor):
        rank = order.to(device=device, dtype=torch.long)
        if rank.shape != (n,):
            raise ValueError(f"order must hold one rank per agent ({n}) (got shape {tuple(rank.shape)})")
        key = index.agent_batch * (n + 1) + rank
        sorted_key, _ = torch.sort(key)
        if not torch.equal(sorted_key, index.agent_batch * (n + 1) + local):
            raise ValueError("order must be a permutation of 0..n_g-1 within every graph")
        return rank
    if order == "default":
        return local
    if order == "sorted":
        if index.agent_key is None:
            raise ValueError("order='sorted' needs states whose agents carry an order_key "
                             "(set by the task); these have none")
        perm = torch.argsort(index.agent_key, stable=True)
        perm = perm[torch.argsort(index.agent_batch[perm], stable=True)]
        rank = torch.empty_like(local)
        rank[perm] = local
        return rank
    if order == "random":
        noise = torch.rand(n, generator=generator, device="cpu").to(device)
        perm = torch.argsort(noise)  # a uniform shuffle, then grouped by graph (stable)
        perm = perm[torch.argsort(index.agent_batch[perm], stable=True)]
        rank = torch.empty_like(local)
        rank[perm] = local  # perm is graph-major, so local positions are ranks
        return rank
    raise ValueError(f"order must be 'default', 'random', 'sorted' or a tensor of ranks "
                     f"(got {order!r})")


NAN_VALUES = ("the value network produced NaN values (diverged parameters or inputs); "
              "no action can be chosen")


class _Plan(NamedTuple):
    """The decision sequence of a batch: who decides at each step (a dense layout may
    keep it for its batches: read only)."""

    rank: Tensor  # [n] position of each agent in its graph's order
    agents: Tensor  # [n] agents by step, graph-major inside a step
    counts: List[int]  # agents deciding at each step
    graph: Tensor  # [n] graph of each agent of ``agents``
    next_agent: Tensor  # [n] (batch order) agent deciding after i in its graph, -1 for last
    first_agent: Tensor  # [num_graphs]


def _plan(idx: UnitIndex, rank: Tensor) -> _Plan:
    n, B = idx.num_agents, idx.num_graphs
    device = idx.agents.device
    steps = int(rank.max()) + 1 if n > 0 else 0  # agents of the largest graph
    agents = torch.argsort(rank * (n + 1) + torch.arange(n, device=device))
    counts = torch.bincount(rank, minlength=steps).tolist()
    pos_of = torch.full((B, steps + 1), -1, dtype=torch.long, device=device)
    pos_of[idx.agent_batch, rank] = torch.arange(n, device=device)
    next_agent = pos_of[idx.agent_batch, rank + 1] if n > 0 else rank
    return _Plan(rank, agents, counts, idx.agent_batch[agents], next_agent, pos_of[:, 0])


class _Routes(NamedTuple):
    """Candidates as one row per agent: ``[m, S]`` action rows and, per entry, the unit
    rows and message rows of its successor (see :class:`SuccessorValues`)."""

    rows: Tensor  # [m, S] action rows, increasing; padding repeats the first
    pad: Optional[Tensor]  # [m, S] bool, None without padding
    read: Tensor  # [m, 2, S] actor row; target row (the actor's where none)
    write: Tensor  # [m, 2, S] actor row; target row (num_units where none)
    msg: Tensor  # [m, 2, S] message rows: active; passive (the zero row where none)
    extra: Optional[Tensor]  # [m, S] passive message to the actor itself, None if no entry has one


def _routes(enc: EncodedState, rows: Tensor, pad: Optional[Tensor] = None) -> _Routes:
    m, S = rows.shape
    r = message_routes(enc, rows.reshape(-1))
    zero = zero_row(enc)
    on_self = r.target == r.actor
    changed = (r.target >= 0) & ~on_self
    none = torch.full_like(r.target, enc.index.num_units)
    read = torch.stack([r.actor, torch.where(changed, r.target, r.actor)])
    write = torch.stack([r.actor, torch.where(changed, r.target, none)])
    msg = torch.stack([r.active, torch.where(changed, r.passive, torch.full_like(r.passive, zero))])
    extra = torch.where(on_self, r.passive, torch.full_like(r.passive, zero)).view(m, S) \
        if bool(on_self.any()) else None

    def per_agent(t: Tensor) -> Tensor:  # [2, m * S] -> [m, 2, S]
        return t.view(2, m, S).transpose(0, 1).contiguous()

    return _Routes(rows, pad, per_agent(read), per_agent(write), per_agent(msg), extra)


def _action_table(idx: UnitIndex, agents: Tensor) -> tuple:
    """``[m, S]`` action rows of ``agents`` (increasing; padded with the first) and the
    padding mask (``None`` where every agent has ``S`` actions)."""
    n, A = idx.num_agents, idx.action_agent.numel()
    device = idx.agents.device
    order = torch.argsort(idx.action_agent, stable=True)
    per = torch.bincount(idx.action_agent, minlength=n)
    S = int(per.max()) if n > 0 and A > 0 else 0
    start = torch.cumsum(per, 0) - per
    owner = idx.action_agent[order]
    table = torch.full((n, S), -1, dtype=torch.long, device=device)
    table[owner, torch.arange(A, device=device) - start[owner]] = order
    table = table[agents]
    pad = table < 0
    if not bool(pad.any()):
        return table, None
    return torch.where(pad, table[:, :1], table), pad


def _decision(net: "ACENetwork", batch: Batch, enc: EncodedState, order, generator,
              table: bool = True) -> tuple:
    """The plan and (if ``table``) the candidate routes of every agent of a rollout.
    They depend only on the structure for the default order: a dense layout keeps them
    per batch size, unless the batch switches targets per state (``target_on``)."""
    idx = enc.index

    def build(table: bool = True):
        plan = _plan(idx, agent_ranks(idx, order, generator))
        return plan, _routes(enc, *_action_table(idx, plan.agents)) if table else None

    layout = layout_of(batch, net.schema) if isinstance(order, str) and order == "default" else None
    if layout is None or "target_on" in store_of(batch, ACTION):
        return build(table)
    return layout.cached(batch, ("rollout", table_layout(enc)), build)


class _Candidates(NamedTuple):
    """Which SE-states each step of a rollout values (phase 2 of :func:`sequential_rollout`).

    The plan's first ``start`` agents (the steps valued at their given action only) come
    first; the agents ``start..reached`` value every candidate of their table rows.
    """

    steps: int  # steps of the rollout (max_steps or every agent)
    reached: int  # agents that decide within those steps
    start: int  # agents of the steps valued at the given action only
    given_only: List[bool]  # per step: valued at the given action only
    given: Optional[_Routes]  # [start, 1] the given actions' routes, None if start == 0
    given_pool: Optional[Tensor]  # [start, 2, 1]
    table: Optional[_Routes]  # every candidate, one row per agent (by step)
    pool: Optional[Tensor]  # [m, 2, S] whether each changed row is pooled
    valid: Optional[Tensor]  # [reached - start, S] available and not padding


class _Trace(NamedTuple):
    """What the steps of a rollout valued and chose, in step order (phase 3)."""

    values: List[Tensor]  # per step [c, S] (or [c, 1]) candidate values
    logits: List[Tensor]  # per step [c, S] logit-head outputs (with a logit head)
    chosen: List[Tensor]  # per step [c] chosen action rows
    chosen_values: List[Tensor]  # per step [c]
    greedy: List[Tensor]  # per step valued in full [c] argmax action rows
    best: List[Tensor]  # per step valued in full [c] max candidate values
    stats: List[Tuple[Tensor, Dict[str, Tensor]]]  # per step: acting agents, Selection.stats


def _candidates(enc: EncodedState, plan: _Plan, table: Optional[_Routes],
                given_rows: Optional[Tensor], values: str, max_steps: Optional[int]) -> _Candidates:
    """Phase 2: the candidates each step values, with their validity and pooling."""
    idx = enc.index
    steps = len(plan.counts) if max_steps is None else min(len(plan.counts), int(max_steps))
    reached = sum(plan.counts[:steps])
    given_only = [values == "chosen" or (values == "successors" and k == 0)
                  for k in range(steps)]
    start = sum(c for c, only in zip(plan.counts, given_only) if only)
    alive = idx.unit_alive
    if alive is not None:
        alive = torch.cat([alive, alive.new_zeros(1)])

    def pooled(routes: _Routes) -> Tensor:  # [m, 2, S]: the changed row is pooled
        keep = routes.write != idx.num_units if alive is None else alive[routes.write]
        return keep.to(enc.units.dtype)

    pool = valid = None
    if reached > start:
        valid = idx.action_available[table.rows[start:reached]]
        if table.pad is not None:
            valid = valid & ~table.pad[start:reached]
        pool = pooled(table)
        if not bool(valid.any(1).all()):
            i = int(plan.agents[start:reached][~valid.any(1)][0])
            raise ValueError(f"agent {i} (graph {int(idx.agent_batch[i])}) has no available "
                             f"action; every agent needs at least one")
    given = given_pool = None
    if start > 0:
        given = _routes(enc, given_rows[plan.agents[:start]].unsqueeze(1))
        given_pool = pooled(given)
    return _Candidates(steps, reached, start, given_only, given, given_pool, table, pool, valid)


def _message_rows(cand: _Candidates, device: torch.device) -> Tensor:
    """Every message row that the steps of ``cand`` read (with repeats): the given
    actions' of the first ``start`` agents, every entry's of the agents after them."""
    parts = []
    if cand.start > 0:
        parts.append(cand.given.msg)
        if cand.given.extra is not None:
            parts.append(cand.given.extra)
    if cand.reached > cand.start:
        parts.append(cand.table.msg[cand.start:cand.reached])
        if cand.table.extra is not None:
            parts.append(cand.table.extra[cand.start:cand.reached])
    return torch.cat([p.reshape(-1) for p in parts]) if parts else \
        torch.zeros(0, dtype=torch.long, device=device)


def _value_and_select(net: "ACENetwork", enc: EncodedState, plan: _Plan, cand: _Candidates,
                      selector: Selector, generator: Optional[torch.Generator],
                      logit_head: Optional[ValueHead]) -> Tuple[_Trace, Tensor]:
    """Phase 3: step by step, value the acting agents' candidates, let the selector
    choose, and move the SE-states along the choices. Returns the trace and the message
    table the choices index."""
    idx = enc.index
    messages = message_table(enc)
    read = _message_rows(cand, enc.units.device)
    heads = [SuccessorValues(net.value_head, enc.units, idx, messages, read)]
    if logit_head is not None:
        heads.append(SuccessorValues(logit_head, enc.units, idx, messages, read))
    trace = _Trace([], [], [], [], [], [], [])
    first_column = torch.zeros(max(plan.counts, default=0), dtype=torch.long,
                               device=enc.units.device)
    begin = 0
    for step in range(cand.steps):
        c = plan.counts[step]
        acting = slice(begin, begin + c)
        only = cand.given_only[step]
        routes, pool = (cand.given, cand.given_pool) if only else (cand.table, cand.pool)
        extra = None if routes.extra is None else routes.extra[acting]
        args = (plan.graph[acting], routes.read[acting], routes.msg[acting], extra,
                routes.write[acting], pool[acting])
        valid = None if only else cand.valid[begin - cand.start:begin - cand.start + c]
        compact = VALID_ONLY and logit_head is None and valid is not None and not bool(valid.all())
        if compact:  # the available candidates only, one per row
            v, successors, entry = _valid_values(heads[0], args, valid)
        else:
            v, successors = heads[0].values(*args)
        moves = [successors]
        rows = routes.rows[acting]
        trace.values.append(v)
        if only:
            column = first_column[:c]
            trace.chosen.append(rows.view(-1))
            trace.chosen_values.append(v.view(-1))
        else:
            best, arg = v.masked_fill(~valid, float("-inf")).max(1)
            trace.greedy.append(rows.gather(1, arg.unsqueeze(1)).view(-1))
            trace.best.append(best)
            logits = None
            if logit_head is not None:  # the same routes through the second head
                logits, logit_successors = heads[1].values(*args)
                moves.append(logit_successors)
                trace.logits.append(logits)
            column = selector.select_column(
                CandidateTable(rows, v, valid, plan.agents[acting], arg, idx.num_agents, logits),
                generator)
            if isinstance(column, Selection):
                trace.stats.append((plan.agents[acting], column.stats))
                column = column.column
            if column is arg:
                trace.chosen.append(trace.greedy[-1])
                trace.chosen_values.append(best)
            else:
                trace.chosen.append(rows.gather(1, column.unsqueeze(1)).view(-1))
                trace.chosen_values.append(v.gather(1, column.unsqueeze(1)).view(-1))
        if compact:  # the chosen candidates' rows, as a step of one candidate each
            moves = [successors.take(entry.gather(1, column.unsqueeze(1)).view(-1))]
            column = first_column[:c]
        for head, move in zip(heads, moves):
            head.advance(move, column)
        begin += c
    return trace, messages


#: Value only the valid candidates of a step (:func:`_valid_values`); ``False`` values
#: the whole ``[agents, S]`` grid and masks it, the same values (a test compares them).
VALID_ONLY = True


def _valid_values(head: SuccessorValues, args: Tuple[Tensor, ...], valid: Tensor
                  ) -> Tuple[Tensor, Successors, Tensor]:
    """:meth:`SuccessorValues.values` of the valid entries of a step's ``[c, S]``
    candidates only, each as a row of its own: the values ``[c, S]`` (NaN where not
    valid), the successors of the valid entries, and each valid entry's row among them
    (``[c, S]``; not meaningful elsewhere). The padding and unavailable actions of a battle (attacks
    out of range, a dead agent's every action but no-op) are half of its candidates."""
    graph, read, msg, extra, write, pool = args
    c, S = valid.shape
    agent, col = valid.nonzero(as_tuple=True)  # [K], agent-major

    def entries(t: Tensor) -> Tensor:  # [c, 2, S] -> [K, 2, 1]
        return t[agent, :, col].unsqueeze(-1)

    v, successors = head.values(graph.index_select(0, agent), entries(read), entries(msg),
                                None if extra is None else extra[agent, col].unsqueeze(1),
                                entries(write), entries(pool), single=False)
    full = v.new_full((c, S), float("nan")).index_put((agent, col), v.view(-1))
    return full, successors, valid.view(-1).cumsum(0).view(c, S) - 1  # rows in nonzero's order


def _assemble(enc: EncodedState, plan: _Plan, cand: _Candidates, trace: _Trace,
              messages: Tensor, with_logits: bool) -> Rollout:
    """Phase 4: the trace, from step order to the batch's action and agent order."""
    idx = enc.index
    n, A = idx.num_agents, idx.action_kind.numel()
    device = enc.units.device
    nan = float("nan")
    start, reached = cand.start, cand.reached
    # candidate values: the chosen ones of the first steps, then every valid entry
    cand_values = enc.units.new_full((A,), nan)
    parts = []  # (action rows, values)
    only = sum(cand.given_only)  # steps valued at the given action only
    if start > 0:
        parts.append((cand.given.rows.view(-1), torch.cat(trace.values[:only]).view(-1)))
    if reached > start:
        parts.append((cand.table.rows[start:reached][cand.valid],
                      torch.cat(trace.values[only:])[cand.valid]))
    for rows, vals in parts:
        if bool(torch.isnan(vals).any()):
            raise FloatingPointError(NAN_VALUES)
        cand_values = cand_values.index_put((rows,), vals)
    cand_logits = None
    if with_logits:
        cand_logits = enc.units.new_full((A,), nan)
        if reached > 0:
            logits = torch.cat(trace.logits)[cand.valid]
            if bool(torch.isnan(logits).any()):
                raise FloatingPointError("the logit head produced NaN logits (diverged "
                                         "parameters or inputs); no action can be chosen")
            cand_logits = cand_logits.index_put((cand.table.rows[:reached][cand.valid],), logits)

    chosen_ids = torch.full((n,), -1, dtype=torch.long, device=device)
    chosen_value = enc.units.new_full((n,), nan)
    greedy_ids = torch.full((n,), -1, dtype=torch.long, device=device)
    max_value = enc.units.new_full((n,), nan)
    chosen = None
    if reached > 0:
        chosen = torch.cat(trace.chosen)
        chosen_ids[plan.agents[:reached]] = chosen
        chosen_value = chosen_value.index_put((plan.agents[:reached],),
                                              torch.cat(trace.chosen_values))
    if reached > start:
        greedy_ids[plan.agents[start:reached]] = torch.cat(trace.greedy)
        max_value = max_value.index_put((plan.agents[start:reached],), torch.cat(trace.best))
    slots = torch.where(chosen_ids >= 0, idx.action_slot[chosen_ids.clamp(min=0)],
                        torch.full_like(chosen_ids, -1))
    selection = None
    if trace.stats:
        acting = torch.cat([agents for agents, _ in trace.stats])
        selection = {}
        for name in trace.stats[0][1]:
            vals = torch.cat([stats[name] for _, stats in trace.stats])
            selection[name] = vals.new_full((n,), nan).index_put((acting,), vals)
    final_units = apply_actions(enc.units, enc, chosen, messages) if reached > 0 else enc.units
    return Rollout(actions=slots, action_ids=chosen_ids, rank=plan.rank.clone(),  # the plan
                   chosen_value=chosen_value, max_value=max_value, greedy_ids=greedy_ids,
                   candidate_values=cand_values, next_agent=plan.next_agent.clone(),
                   first_agent=plan.first_agent.clone(), final_units=final_units, encoded=enc,
                   candidate_logits=cand_logits, selection=selection)


def sequential_rollout(
    net: "ACENetwork",
    data: Union[HeteroData, Batch],
    order: Union[str, Tensor] = "default",
    selector: Optional[Selector] = None,
    generator: Optional[torch.Generator] = None,
    max_steps: Optional[int] = None,
    check: bool = True,
    values: str = "all",
    logit_head: Optional[ValueHead] = None,
) -> Rollout:
    r"""Sequential decision with rollout for a batch of states.

    Args:
        net (ACENetwork): The value network.
        data (HeteroData or Batch): The states.
        order (str or Tensor, optional): Decision order, see :func:`agent_ranks`.
            (default: :obj:`"default"`)
        selector (Selector, optional): How each agent chooses from its valued
            candidates (:mod:`acegnn.nn.selectors`). (default: :class:`Greedy`)
        generator (torch.Generator, optional): Source of randomness (order, selector).
        max_steps (int, optional): Stop after this many agents per graph.
            (default: all agents)
        check (bool, optional): Validate the input. (default: :obj:`True`)
        values (str, optional): Which candidates to value: ``"all"``; ``"chosen"``, the
            SE-states the given actions lead to; ``"successors"``, ``"chosen"`` for the
            first agent and ``"all"`` after it. The last two need a :class:`Forced`
            selector; where only the chosen candidate is valued, ``max_value``,
            ``greedy_ids`` and the other candidates are NaN / ``-1``.
            (default: :obj:`"all"`)
        logit_head (ValueHead, optional): A second head (ACE-PPO's logit encoder) that
            reads the same candidates: its outputs go to the selector and to
            :attr:`Rollout.candidate_logits`. Needs ``values="all"``. (default: none)

    Returns:
        Rollout: Unavailable candidates are never chosen and read NaN in
        ``candidate_values``.

    Raises:
        ValueError: ``values`` is unknown or does not fit ``logit_head`` or ``selector``;
            with ``check``, the batch does not fit the network's schema.
    """
    if values not in ("all", "chosen", "successors"):
        raise ValueError(f"values must be 'all', 'chosen' or 'successors' (got {values!r})")
    if logit_head is not None and values != "all":
        raise ValueError(f"a logit head reads every candidate: it needs values='all' "
                         f"(got {values!r})")
    selector = GREEDY if selector is None else selector
    batch = as_batch(data)

    def given(index: UnitIndex) -> Optional[Tensor]:  # the rows valuing only them reads
        selector.start(index)
        return selector.known_rows()

    enc = net.encode(batch, check=check, passive_rows=given if values == "chosen" else None)
    plan, table = _decision(net, batch, enc, order, generator, table=values != "chosen")
    selector.start(enc.index)
    given_rows = selector.known_rows()
    if values != "all" and given_rows is None:
        raise ValueError(f"values={values!r} needs a selector whose actions are known "
                         f"before valuing (Forced) (got {selector!r})")
    cand = _candidates(enc, plan, table, given_rows, values, max_steps)
    trace, messages = _value_and_select(net, enc, plan, cand, selector, generator, logit_head)
    return _assemble(enc, plan, cand, trace, messages, logit_head is not None)

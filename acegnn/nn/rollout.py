r"""Decision with rollout (paper "Bidirectional Action-Dependent Q-learning").

Agents of every state decide one after another. At each step the acting agent's
available actions are rolled out to candidate SE-states, all candidates of the batch
are valued together, and the chosen action's messages are added before the next agent
decides. The state is encoded once for the whole sequence.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Batch, HeteroData
from torch_geometric.utils import scatter

from acegnn.graph.index import UnitIndex
from acegnn.nn.se_state import EncodedState, apply_actions, candidate_rows
from acegnn.nn.selectors import Candidates, Greedy, Selector

GREEDY = Greedy()

if TYPE_CHECKING:  # pragma: no cover
    from acegnn.nn.ace import ACENetwork
    from acegnn.nn.value_head import ValueHead


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


def _advance(head: "ValueHead", units: Tensor, hidden: Tensor, enc: EncodedState, chosen: Tensor):
    """Move to the chosen SE-state: only the actor and target rows change, so only
    their value-head hidden rows are recomputed."""
    idx = enc.index
    units = apply_actions(units, enc, chosen)
    changed = torch.cat([idx.action_actor[chosen], idx.action_target[chosen]])
    changed = changed[changed >= 0]
    return units, hidden.index_put((changed,), head.unit_hidden(units[changed]))


def sequential_rollout(
    net: "ACENetwork",
    data: Union[HeteroData, Batch],
    order: Union[str, Tensor] = "default",
    selector: Optional[Selector] = None,
    generator: Optional[torch.Generator] = None,
    max_steps: Optional[int] = None,
    check: bool = True,
    values: str = "all",
) -> Rollout:
    r"""Sequential decision with rollout for a batch of states.

    Args:
        net (ACENetwork): The value network.
        data (HeteroData or Batch): The states.
        order (str or Tensor, optional): Decision order, see :func:`agent_ranks`.
            (default: :obj:`"default"`)
        selector (Selector, optional): How each agent chooses from its valued
            candidates (:mod:`acegnn.nn.selectors`): :class:`Greedy`,
            :class:`EpsilonGreedy`, :class:`Forced` (teacher forcing, for learning from
            replayed transitions) or your own. (default: :class:`Greedy`)
        generator (torch.Generator, optional): Source of randomness (order, selector).
        max_steps (int, optional): Stop after this many agents per graph (``1`` values
            only the first agent's candidates, as the Bellman target of the last agent
            needs at the next state). (default: all agents)
        check (bool, optional): Validate the input. (default: :obj:`True`)
        values (str, optional): Which candidates to value. ``"all"``: every one.
            ``"chosen"`` (needs a :class:`Forced` selector): only the SE-states the given actions lead
            to, all that the predicted side of a TD loss needs, at about one candidate
            per agent. ``"successors"`` (needs a :class:`Forced` selector): ``"chosen"`` for the first
            agent and ``"all"`` after it, all that Eq. 1 targets inside a state need.
            Where only the chosen candidate is valued, ``max_value``, ``greedy_ids``
            and the other candidates are NaN / ``-1``. (default: :obj:`"all"`)
    """
    if values not in ("all", "chosen", "successors"):
        raise ValueError(f"values must be 'all', 'chosen' or 'successors' (got {values!r})")
    selector = GREEDY if selector is None else selector
    enc = net.encode(data, check=check)
    idx = enc.index
    head = net.value_head
    n, A, B = idx.num_agents, idx.action_kind.numel(), idx.num_graphs
    device = enc.units.device
    rank = agent_ranks(idx, order, generator)
    selector.start(idx)
    forced = selector.known_rows()
    if values != "all" and forced is None:
        raise ValueError(f"values={values!r} needs a selector whose actions are known "
                         f"before valuing (Forced) (got {selector!r})")

    full_steps = int(rank.max()) + 1 if n > 0 else 0  # agents of the largest graph
    num_steps = full_steps if max_steps is None else min(full_steps, int(max_steps))
    # Candidates grouped by step, inside a step by graph (action rows are graph-major).
    cand = idx.action_available.nonzero().view(-1)
    cand_step = rank[idx.action_agent[cand]]
    cand = cand[torch.argsort(cand_step * (A + 1) + cand)]
    cand_counts = torch.bincount(cand_step, minlength=num_steps)[:num_steps].tolist()
    cand_by_step = cand[: sum(cand_counts)].split(cand_counts)
    agent_by_rank = torch.argsort(rank * (n + 1) + torch.arange(n, device=device))
    agent_counts = torch.bincount(rank, minlength=num_steps)[:num_steps].tolist()
    agents_by_step = agent_by_rank[: sum(agent_counts)].split(agent_counts)

    # next_agent / first_agent from the ranks
    pos_of = torch.full((B, full_steps + 1), -1, dtype=torch.long, device=device)
    pos_of[idx.agent_batch, rank] = torch.arange(n, device=device)
    next_agent = pos_of[idx.agent_batch, rank + 1] if n > 0 else rank
    first_agent = pos_of[:, 0]

    nan = float("nan")
    cand_values = enc.units.new_full((A,), nan)
    chosen_value = enc.units.new_full((n,), nan)
    max_value = enc.units.new_full((n,), nan)
    chosen_ids = torch.full((n,), -1, dtype=torch.long, device=device)
    greedy_ids = torch.full((n,), -1, dtype=torch.long, device=device)

    units = enc.units
    hidden = head.unit_hidden(units)
    for k in range(num_steps):
        c, acting = cand_by_step[k], agents_by_step[k]
        only_chosen = values == "chosen" or (values == "successors" and k == 0)
        if only_chosen:
            c = forced[acting]
        base = head.pool_base(units, idx, hidden)
        rows = candidate_rows(units, enc, c)
        v = head.candidate_values(base, idx, idx.action_batch[c], rows)  # [C]
        cand_values = cand_values.index_put((c,), v)
        if only_chosen:
            if bool(torch.isnan(v).any()):
                raise FloatingPointError(NAN_VALUES)
            chosen_ids[acting] = c
            chosen_value = chosen_value.index_put((acting,), v)
            units, hidden = _advance(head, units, hidden, enc, c)
            continue
        seg = idx.action_agent[c]
        vmax = scatter(v, seg, dim=0, dim_size=n, reduce="max")
        if bool(torch.isnan(vmax[acting]).any()):
            raise FloatingPointError(NAN_VALUES)
        pos = torch.arange(c.numel(), device=device)
        is_max = v == vmax[seg]
        first = torch.full((n,), c.numel(), dtype=torch.long, device=device)
        first = first.scatter_reduce(0, seg, torch.where(is_max, pos, c.numel()), reduce="amin")
        if bool((first[acting] >= c.numel()).any()):
            i = int(acting[first[acting] >= c.numel()][0])
            raise ValueError(f"agent {i} (graph {int(idx.agent_batch[i])}) has no available "
                             f"action; every agent needs at least one")
        greedy = c[first[acting]]
        chosen = selector.select(Candidates(c, v, seg, acting, greedy, n), generator)
        greedy_ids[acting] = greedy
        chosen_ids[acting] = chosen
        max_value = max_value.index_put((acting,), vmax[acting])
        chosen_value = chosen_value.index_put((acting,), cand_values[chosen])
        units, hidden = _advance(head, units, hidden, enc, chosen)

    slots = torch.where(chosen_ids >= 0, idx.action_slot[chosen_ids.clamp(min=0)],
                        torch.full_like(chosen_ids, -1))
    return Rollout(actions=slots, action_ids=chosen_ids, rank=rank, chosen_value=chosen_value,
                   max_value=max_value, greedy_ids=greedy_ids, candidate_values=cand_values,
                   next_agent=next_agent, first_agent=first_agent, final_units=units,
                   encoded=enc)

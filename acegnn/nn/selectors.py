r"""How an agent's action is chosen from the values of its candidate SE-states.

The decision with rollout (:func:`acegnn.nn.rollout.sequential_rollout`) values every
candidate of the agents deciding at a step and hands them to a :class:`Selector`, which
returns the chosen action-table rows. Valuing is the rollout's; choosing is the
selector's, so a new learner adds a selector, not a branch in the rollout:

* :class:`Greedy`: the argmax candidate (ties: the lowest row);
* :class:`EpsilonGreedy`: with probability :math:`\epsilon` a uniformly random
  available action, else the greedy one;
* :class:`Forced`: given actions (teacher forcing, to learn from replayed transitions);
  the only selector whose choices are known before valuing, which lets the rollout value
  only the chosen candidates (``values="chosen"``);
* :class:`Softmax`: the policy of ACE-PPO, a softmax over the candidates' logits (a
  rollout with a ``logit_head``), sampled, greedy or teacher-forced; it returns every
  acting agent's log-probability and entropy with its choice.

:meth:`Selector.start` is called once per rollout, before the first step. The rollout
holds a step's candidates as a :class:`CandidateTable` (one row per acting agent) and
calls :meth:`Selector.select_column`, which returns the chosen columns, or a
:class:`Selection` with per-agent figures the rollout returns in
:attr:`~acegnn.nn.rollout.Rollout.selection`; a selector that only implements
:meth:`Selector.select` gets the flat :class:`Candidates` of the table.
"""
from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Union

import torch
from torch import Tensor

from acegnn.graph.index import UnitIndex


class Candidates(NamedTuple):
    """The valued candidates of one decision step, over the whole batch."""

    rows: Tensor  # [C] action-table rows of the candidates
    values: Tensor  # [C] V of the SE-state each candidate leads to
    agent: Tensor  # [C] agent (index into the batch's agents) of each candidate
    acting: Tensor  # [k] the agents deciding at this step
    greedy: Tensor  # [k] the argmax row of each acting agent
    num_agents: int  # agents in the batch


class CandidateTable(NamedTuple):
    """The same candidates as the rollout holds them: one row per acting agent, its
    action rows in increasing order, padded to the widest agent (``valid`` marks the
    entries that are candidates)."""

    rows: Tensor  # [k, S] action-table rows
    values: Tensor  # [k, S] V of each entry's SE-state; meaningless where not valid
    valid: Tensor  # [k, S] bool: the entry is a candidate (an available action)
    acting: Tensor  # [k] the agents deciding at this step
    greedy: Tensor  # [k] column of the argmax candidate (ties: the lowest row)
    num_agents: int  # agents in the batch
    logits: Optional[Tensor] = None  # [k, S] logit of each entry; None without a logit head

    def candidates(self) -> Candidates:
        """The flat :class:`Candidates` of the table."""
        agent = self.acting.unsqueeze(1).expand_as(self.rows)
        greedy = self.rows.gather(1, self.greedy.unsqueeze(1)).squeeze(1)
        return Candidates(self.rows[self.valid], self.values[self.valid], agent[self.valid],
                          self.acting, greedy, self.num_agents)

    def column(self, rows: Tensor) -> Tensor:
        """``[k]`` column of each acting agent's chosen action row ``rows`` ``[k]``."""
        return ((self.rows == rows.unsqueeze(1)) & self.valid).to(torch.uint8).argmax(1)


class Selection(NamedTuple):
    """A step's choice with what the selector computed for it, per acting agent."""

    column: Tensor  # [k] the chosen column of each acting agent
    stats: Dict[str, Tensor]  # name -> [k] (e.g. Softmax: log_prob, entropy)


class Selector:
    """Chooses the acting agents' actions from their valued candidates (greedy here).

    A selector implements :meth:`select` on flat candidates; the rollout calls
    :meth:`select_column`, which a selector may implement on the table directly.
    """

    def start(self, index: UnitIndex) -> None:
        """Called once per rollout with the batch's index, before the first step."""

    def known_rows(self) -> Optional[Tensor]:
        """``[num_agents]`` rows chosen before any valuing (teacher forcing), else
        :obj:`None`."""
        return None

    def select(self, cands: Candidates, generator: Optional[torch.Generator] = None) -> Tensor:
        """``[k]`` chosen rows, one per acting agent (in ``cands.acting`` order)."""
        return cands.greedy

    def select_column(self, table: CandidateTable,
                      generator: Optional[torch.Generator] = None) -> Union[Tensor, Selection]:
        """``[k]`` column of ``table`` each acting agent chooses (or a :class:`Selection`
        that adds per-agent figures); by default :meth:`select` on
        ``table.candidates()``."""
        return table.column(self.select(table.candidates(), generator))

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}()"


class Greedy(Selector):
    """The greedy choice: the candidate of highest value."""

    def select_column(self, table: CandidateTable,
                      generator: Optional[torch.Generator] = None) -> Tensor:
        return table.greedy


class EpsilonGreedy(Selector):
    r"""Greedy, except that with probability :math:`\epsilon` an agent takes a uniformly
    random available action.

    Args:
        epsilon (float): The exploration probability, in ``[0, 1]``.
    """

    def __init__(self, epsilon: float) -> None:
        if not 0.0 <= float(epsilon) <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1] (got {epsilon})")
        self.epsilon = float(epsilon)

    def select(self, cands: Candidates, generator: Optional[torch.Generator] = None) -> Tensor:
        if self.epsilon <= 0:
            return cands.greedy
        c, seg, acting, n = cands.rows, cands.agent, cands.acting, cands.num_agents
        device = c.device
        explore = torch.rand(acting.numel(), generator=generator).to(device) < self.epsilon
        # a uniform random candidate per agent: the one with the largest random key
        key = torch.rand(c.numel(), generator=generator).to(device)
        best = torch.full((n,), -1.0, device=device).scatter_reduce(0, seg, key, reduce="amax")
        pos = torch.arange(c.numel(), device=device)
        pick = torch.full((n,), c.numel(), dtype=torch.long, device=device).scatter_reduce(
            0, seg, torch.where(key == best[seg], pos, c.numel()), reduce="amin")
        return torch.where(explore, c[pick[acting]], cands.greedy)

    def select_column(self, table: CandidateTable,
                      generator: Optional[torch.Generator] = None) -> Tensor:
        """As :meth:`select`, on the table: the random candidate is the valid entry with
        the largest random key."""
        if self.epsilon <= 0:
            return table.greedy
        k, S = table.rows.shape
        device = table.rows.device
        explore = torch.rand(k, generator=generator).to(device) < self.epsilon
        key = torch.rand(k, S, generator=generator).to(device).masked_fill_(~table.valid, -1.0)
        return torch.where(explore, key.argmax(1), table.greedy)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(epsilon={self.epsilon})"


class Forced(Selector):
    """Takes given actions (teacher forcing).

    Args:
        actions (Tensor): ``[num_agents]`` action slots, one per agent of the batch;
            each must be available to its agent.
    """

    def __init__(self, actions: Tensor) -> None:
        self.actions = actions
        self.rows: Optional[Tensor] = None

    def start(self, index: UnitIndex) -> None:
        self.rows = forced_rows(index, self.actions)

    def known_rows(self) -> Optional[Tensor]:
        return self.rows

    def select(self, cands: Candidates, generator: Optional[torch.Generator] = None) -> Tensor:
        return self.rows[cands.acting]

    def select_column(self, table: CandidateTable,
                      generator: Optional[torch.Generator] = None) -> Tensor:
        return table.column(self.rows[table.acting])


class Softmax(Selector):
    r"""The policy of ACE-PPO (paper Appendix, "ACE-PPO"): agent :math:`i+1` takes action
    :math:`a` at SE-state :math:`s_{a_{1:i}}` with probability

    .. math::
        \pi(a \mid s_{a_{1:i}}) = \frac{e^{l(a \mid s_{a_{1:i}})}}
            {\sum_{\tilde a \in \mathcal{A}_{i+1}} e^{l(\tilde a \mid s_{a_{1:i}})}}

    over its available actions :math:`\mathcal{A}_{i+1}`, with :math:`l` the logits a rollout
    with a ``logit_head`` puts in :attr:`CandidateTable.logits`. Each step returns a
    :class:`Selection` with ``log_prob`` (of the action taken) and ``entropy`` (of the
    agent's distribution), differentiable when autograd is on: the rollout's
    ``selection["log_prob"]`` and ``selection["entropy"]``, ``[num_agents]``.

    Args:
        actions (Tensor, optional): ``[num_agents]`` action slots to take instead of
            sampling (teacher forcing: the log-probabilities of replayed actions).
        greedy (bool, optional): Take the most probable action (ties: the lowest row)
            instead of sampling. (default: :obj:`False`)
    """

    def __init__(self, actions: Optional[Tensor] = None, greedy: bool = False) -> None:
        if actions is not None and greedy:
            raise ValueError("Softmax takes given actions or the greedy ones, not both")
        self.actions, self.greedy = actions, greedy
        self.rows: Optional[Tensor] = None

    def start(self, index: UnitIndex) -> None:
        self.rows = None if self.actions is None else forced_rows(index, self.actions)

    def known_rows(self) -> Optional[Tensor]:
        return self.rows

    def select_column(self, table: CandidateTable,
                      generator: Optional[torch.Generator] = None) -> Selection:
        if table.logits is None:
            raise ValueError("the Softmax selector needs a rollout with a logit head "
                             "(sequential_rollout(..., logit_head=...))")
        logits = table.logits.masked_fill(~table.valid, float("-inf"))  # [k, S]
        log_p = torch.log_softmax(logits, dim=1)
        if self.rows is not None:
            col = table.column(self.rows[table.acting])
        elif self.greedy:
            col = logits.argmax(1)
        else:  # Gumbel-max: argmax of logits plus Gumbel noise samples the softmax
            u = torch.rand(logits.shape, generator=generator).to(logits.device)
            col = (logits - torch.log(-torch.log(u.clamp_(min=1e-20)))).argmax(1)
        log_p = log_p.masked_fill(~table.valid, 0.0)  # finite gradients: p is 0 there
        entropy = -(log_p.exp() * table.valid.to(log_p.dtype) * log_p).sum(1)
        return Selection(col, {"log_prob": log_p.gather(1, col.unsqueeze(1)).squeeze(1),
                               "entropy": entropy})

    def __repr__(self) -> str:
        mode = "forced" if self.actions is not None else "greedy" if self.greedy else "sample"
        return f"{self.__class__.__name__}({mode})"


def forced_rows(index: UnitIndex, actions: Tensor) -> Tensor:
    """Action-table rows of given per-agent slots; raises on invalid actions."""
    n = index.num_agents
    actions = actions.to(index.agents.device).long().view(-1)
    if actions.numel() != n:
        raise ValueError(f"actions must hold one slot per agent ({n}) (got {actions.numel()})")
    num_slots = int(index.action_slot.max()) + 1 if index.action_slot.numel() else 1
    table = torch.full((n, num_slots), -1, dtype=torch.long, device=actions.device)
    table[index.action_agent, index.action_slot] = torch.arange(index.action_slot.numel(),
                                                                device=actions.device)
    in_range = (actions >= 0) & (actions < num_slots)
    rows = table[torch.arange(n, device=actions.device), actions.clamp(0, num_slots - 1)]
    ok = in_range & (rows >= 0)
    ok = ok & index.action_available[rows.clamp(min=0)]
    if not bool(ok.all()):
        i = int((~ok).nonzero()[0])
        raise ValueError(f"invalid action {int(actions[i])} for agent {i} (graph "
                         f"{int(index.agent_batch[i])}): not in its action list or not available")
    return rows

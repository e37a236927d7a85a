r"""The SE-state update (paper Eq. 2): where action messages go and how they are added.

This is the one place that turns chosen actions into unit embeddings of the
sequentially expanded state :math:`s_{a_{1:i}}`:

* the **active** message :math:`e_a^a(a_k)` is added to the acting unit;
* the **passive** message :math:`e_a^p(a_k)` is added to the target unit, for targeted
  actions when passive embeddings are on.

Everything else (decision with rollout, the naive reference) calls these functions.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor

from acegnn.graph.index import UnitIndex


class EncodedState(NamedTuple):
    """A batch of states encoded once: the base of every SE-state of the sequence."""

    index: UnitIndex
    units: Tensor  # [num_units, H] unit embeddings e_u(u_j) of s^t
    active: Tensor  # [num_kinds, H] active embedding of each kind
    passive: Optional[Tensor]  # [num_agents, num_targeted, H] or None
    passive_col: Tensor  # [num_kinds] column of a kind in ``passive``, -1 if untargeted


class Messages(NamedTuple):
    """Messages of a set of actions (one entry per action)."""

    actor: Tensor  # [K] flat row of the acting unit
    active: Tensor  # [K, H]
    target: Tensor  # [K] flat row of the target unit, -1 where no passive message
    passive: Tensor  # [K, H] zero where no passive message


def action_messages(enc: EncodedState, actions: Tensor) -> Messages:
    """The active and passive messages of ``actions`` (rows of the action table)."""
    idx = enc.index
    kind = idx.action_kind[actions]
    actor = idx.action_actor[actions]
    active = enc.active[kind]
    target = idx.action_target[actions]
    if enc.passive is None:
        target = torch.full_like(target, -1)
        passive = torch.zeros_like(active)
    else:
        col = enc.passive_col[kind]
        has = (target >= 0) & (col >= 0)
        target = torch.where(has, target, torch.full_like(target, -1))
        passive = enc.passive[idx.action_agent[actions], col.clamp(min=0)]
        passive = passive * has.unsqueeze(-1).to(passive.dtype)
    return Messages(actor, active, target, passive)


def apply_actions(units: Tensor, enc: EncodedState, actions: Tensor) -> Tensor:
    """Unit embeddings after adding the messages of ``actions`` (out of place)."""
    m = action_messages(enc, actions)
    has = m.target >= 0
    rows = torch.cat([m.actor, m.target[has]])
    msgs = torch.cat([m.active, m.passive[has]])
    return units.index_add(0, rows, msgs)


class CandidateRows(NamedTuple):
    """The unit rows that differ between a SE-state and one candidate successor.

    Only the acting unit and the target unit change; when the target is the actor
    both messages land on the actor row and ``has_target`` is False.
    """

    actor: Tensor  # [C] flat row
    actor_emb: Tensor  # [C, H] new embedding of the actor row
    target: Tensor  # [C] flat row (valid where has_target)
    target_emb: Tensor  # [C, H] new embedding of the target row
    has_target: Tensor  # [C] bool


def candidate_rows(units: Tensor, enc: EncodedState, actions: Tensor) -> CandidateRows:
    """For each candidate action, the changed rows of the successor SE-state."""
    m = action_messages(enc, actions)
    on_self = m.target == m.actor
    self_msg = m.passive * on_self.unsqueeze(-1).to(m.passive.dtype)
    actor_emb = units[m.actor] + m.active + self_msg
    has_target = (m.target >= 0) & ~on_self
    target = m.target.clamp(min=0)
    target_emb = units[target] + m.passive
    return CandidateRows(m.actor, actor_emb, target, target_emb, has_target)

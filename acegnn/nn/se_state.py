r"""The SE-state update (paper Eq. 2): where action messages go and how they are added.

This is the one place that turns chosen actions into unit embeddings of the
sequentially expanded state :math:`s_{a_{1:i}}`:

* the **active** message :math:`e_a^a(a_k)` is added to the acting unit;
* the **passive** message :math:`e_a^p(a_k)` is added to the target unit, for targeted
  actions when passive embeddings are on.

With pair messages (``model.messages: pair``) a targeted action's active and passive
messages are its own rows, computed from the pair (actor, target)
(:class:`acegnn.nn.action_encoder.PairEncoder`).

Everything else (decision with rollout, the naive reference) calls these functions.
:func:`message_routes` says where each message goes as rows of one
:func:`message_table`; the decision with rollout follows the same routes in the value
encoder's pre-activations (:class:`acegnn.nn.value_head.SuccessorValues`).
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from acegnn.graph.index import UnitIndex


class EncodedState(NamedTuple):
    """A batch of states encoded once: the base of every SE-state of the sequence."""

    index: UnitIndex
    units: Tensor  # [num_units, H] unit embeddings e_u(u_j) of s^t
    active: Tensor  # [num_kinds, H] active embedding of each kind
    passive: Optional[Tensor]  # [P, num_targeted, H] or None, P: agents with a targeted action
    passive_col: Tensor  # [num_kinds] column of a kind in ``passive``, -1 if untargeted
    passive_block: Optional[Tensor]  # [num_agents] row of each agent in ``passive``, -1 if none
    pair: Optional[Tensor] = None  # [R, c, H] pair messages of the targeted actions, c = 2
    # (active, passive) or 1 (active only); None without pair messages
    pair_row: Optional[Tensor] = None  # [A] row of each action in ``pair``, -1 if untargeted


class Messages(NamedTuple):
    """Messages of a set of actions (one entry per action)."""

    actor: Tensor  # [K] flat row of the acting unit
    active: Tensor  # [K, H]
    target: Tensor  # [K] flat row of the target unit, -1 where no passive message
    passive: Tensor  # [K, H] zero where no passive message


class MessageRoutes(NamedTuple):
    """Where the messages of a set of actions go, and which rows of
    :func:`message_table` they are."""

    actor: Tensor  # [K] flat row of the acting unit
    active: Tensor  # [K] row of the active message (the action's kind)
    target: Tensor  # [K] flat row of the target unit, -1 where no passive message
    passive: Tensor  # [K] row of the passive message; the table's zero row where none


def targeted_columns(index: UnitIndex, passive_col: Tensor,
                     actions: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """For ``actions`` (rows of the action table; default: all of them) the column of
    each one's kind among the targeted kinds (-1 if untargeted) and whether it sends a
    message to a target (a targeted kind with a target)."""
    kind, target = index.action_kind, index.action_target
    if actions is not None:
        kind, target = kind[actions], target[actions]
    col = passive_col[kind]
    return col, (target >= 0) & (col >= 0)


def message_table(enc: EncodedState) -> Tensor:
    """Every message of the batch as the rows of one matrix: the active embedding of each
    kind, the passive table flattened (``P x num_targeted`` rows, none without passive
    embeddings), the pair messages (their active rows, then their passive rows; none
    without pair messages), then a zero row (:func:`zero_row`)."""
    H = enc.active.size(1)
    parts = [enc.active]
    if enc.passive is not None:
        parts.append(enc.passive.reshape(-1, H))
    if enc.pair is not None:
        parts.append(enc.pair.transpose(0, 1).reshape(-1, H))
    parts.append(enc.active.new_zeros(1, H))
    return torch.cat(parts)


def _passive_count(enc: EncodedState) -> int:
    return 0 if enc.passive is None else enc.passive.size(0) * enc.passive.size(1)


def zero_row(enc: EncodedState) -> int:
    """The zero row of :func:`message_table`: where actions without a passive message
    route it."""
    pairs = 0 if enc.pair is None else enc.pair.size(0) * enc.pair.size(1)
    return enc.active.size(0) + _passive_count(enc) + pairs


def table_layout(enc: EncodedState) -> tuple:
    """What the rows of :func:`message_table` are, as a key: the same key, the same
    routes for the same action table."""
    return tuple(None if t is None else tuple(t.shape) for t in (enc.active, enc.passive, enc.pair))


def message_routes(enc: EncodedState, actions: Tensor) -> MessageRoutes:
    """The routes of ``actions`` (rows of the action table) through :func:`message_table`."""
    idx = enc.index
    kind = idx.action_kind[actions]
    actor = idx.action_actor[actions]
    target = idx.action_target[actions]
    num_kinds, zero = enc.active.size(0), zero_row(enc)
    none = torch.full_like(target, -1)
    if enc.pair is not None:
        pair = enc.pair_row[actions]
        has = pair >= 0
        first = num_kinds + _passive_count(enc)
        active = torch.where(has, first + pair, kind)
        if enc.pair.size(1) == 1:  # active messages only
            return MessageRoutes(actor, active, none, torch.full_like(kind, zero))
        return MessageRoutes(actor, active, torch.where(has, target, none),
                             torch.where(has, first + enc.pair.size(0) + pair,
                                         torch.full_like(kind, zero)))
    if enc.passive is None:
        return MessageRoutes(actor, kind, none, torch.full_like(kind, zero))
    col, has = targeted_columns(idx, enc.passive_col, actions)
    block = enc.passive_block[idx.action_agent[actions]]  # >= 0 where ``has``
    row = num_kinds + block.clamp(min=0) * enc.passive.size(1) + col
    return MessageRoutes(actor, kind, torch.where(has, target, none),
                         torch.where(has, row, torch.full_like(row, zero)))


def action_messages(enc: EncodedState, actions: Tensor,
                    table: Optional[Tensor] = None) -> Messages:
    """The active and passive messages of ``actions`` (rows of the action table);
    ``table`` may pass :func:`message_table` ``(enc)`` when it is built already."""
    r = message_routes(enc, actions)
    table = message_table(enc) if table is None else table
    return Messages(r.actor, table[r.active], r.target, table[r.passive])


def apply_actions(units: Tensor, enc: EncodedState, actions: Tensor,
                  table: Optional[Tensor] = None) -> Tensor:
    """Unit embeddings after adding the messages of ``actions`` (out of place);
    ``table`` as in :func:`action_messages`."""
    r = message_routes(enc, actions)
    table = message_table(enc) if table is None else table
    out = units.index_add(0, r.actor, table[r.active])
    return out.index_add_(0, r.target.clamp(min=0), table[r.passive])  # the zero row where none


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

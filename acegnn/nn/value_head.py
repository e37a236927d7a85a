"""Value encoder: fc + ReLU per unit, pooling over the units of a graph, fc to V."""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import torch
from torch import Tensor, nn
from torch_geometric.utils import scatter

from acegnn.graph.index import UnitIndex
from acegnn.nn.se_state import CandidateRows
from acegnn.nn.unit_encoder import mlp, reset_mlp
from acegnn.utils.compiled import check_compiled

POOLS = {"mean": ("mean",), "sum": ("sum",), "max": ("max",), "mean_max": ("mean", "max"),
         "mean_max_split": ("mean", "max")}


class PoolBase(NamedTuple):
    """Per-graph pooling statistics of one SE-state, shared by all its candidates."""

    hidden: Tensor  # [U, W] per-unit hidden rows of the SE-state
    total: Tensor  # [B, H] sum over the pooled units of the mean's (sum's) columns
    count: Tensor  # [B] pooled units per graph (the alive ones)
    top: Tensor  # [B, 3, H] the 3 largest pooled values of the max's columns


def top3(dense: Tensor) -> Tensor:
    """The three largest values along dim 1 of ``dense`` ``[B, n, H]`` -> ``[B, 3, H]``,
    in decreasing order, a value repeated as often as it occurs (``-inf`` where ``n < 3``).

    Without autograd each row of dim 1 is inserted into the running three in turn:
    ``topk`` along a short dimension that is not the last is several times slower on
    CPU. With autograd ``topk`` stays, as its backward pass is the faster."""
    n = dense.size(1)
    if dense.requires_grad and torch.is_grad_enabled():
        top = dense.topk(min(3, n), dim=1).values
        return torch.cat([top, top.new_full((top.size(0), 3 - top.size(1), top.size(2)),
                                            float("-inf"))], dim=1) if n < 3 else top
    first = dense[:, 0]
    second = third = torch.full_like(first, float("-inf"))
    for j in range(1, n):
        row = dense[:, j]
        third = torch.maximum(third, torch.minimum(second, row))
        second = torch.maximum(second, torch.minimum(first, row))
        first = torch.maximum(first, row)
    return torch.stack([first, second, third], dim=1)


def max_without(top: Tensor, value: Tensor) -> Tuple[Tensor, Tensor]:
    """The two largest of a multiset whose three largest are ``top`` ``[..., 3, H]``, once
    one element of value ``value`` ``[..., H]`` is taken out: ``(first, second)``.

    Only values are compared: where ``value`` equals another element's, either may be
    the one taken out; the values are the same, and a gradient goes to the slot kept."""
    r1, r2, r3 = top.unbind(dim=-2)
    first = torch.where(value == r1, r2, r1)
    second = torch.where((value == r1) | (value == r2), r3, r2)
    return first, second


def _as_graphs(rows: Tensor, index: UnitIndex) -> Optional[Tensor]:
    """The unit rows ``[U, H]`` as ``[B, units, H]``, a view, where every graph has as
    many units (every battle map, football); ``None`` otherwise."""
    B = index.num_graphs
    size = int(index.unit_count.max()) if B > 0 else 0
    return rows.view(B, size, -1) if B > 0 and index.num_units == B * size else None


def _padded(rows: Tensor, index: UnitIndex) -> Tuple[Tensor, Tensor]:
    """The unit rows ``[U, H]`` of graphs of several sizes as ``[B, max units, H]``,
    zero-padded, and which entries are pooled units ``[B, max units]`` (the alive ones;
    not the padding)."""
    B = index.num_graphs
    size = max(int(index.unit_count.max()) if B > 0 else 0, 1)
    pos = torch.arange(index.num_units, device=rows.device) - index.unit_ptr[index.unit_batch]
    dense = rows.new_zeros(B, size, rows.size(1))
    dense[index.unit_batch, pos] = rows
    keep = torch.zeros(B, size, dtype=torch.bool, device=rows.device)
    keep[index.unit_batch, pos] = True if index.unit_alive is None else index.unit_alive
    return dense, keep


def _alive_count(index: UnitIndex) -> Tensor:
    """The pooled (alive) units of each graph ``[B]``."""
    if index.unit_alive is None:
        return index.unit_count
    return torch.bincount(index.unit_batch[index.unit_alive], minlength=index.num_graphs)


class _MaxOverUnits(torch.autograd.Function):
    """:func:`max_over_units` with autograd: ``amax``'s gradient (shared equally by the
    rows that tie for a maximum), computed in about half the time on CPU: ``amax``'s
    own backward converts the ``[B, units, H]`` mask to floats to count the ties, where
    a byte sum does."""

    @staticmethod
    def forward(ctx, dense: Tensor) -> Tensor:
        top = dense.transpose(1, 2).amax(-1)
        ctx.save_for_backward(dense, top)
        return top

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        dense, top = ctx.saved_tensors
        mask = dense == top.unsqueeze(1)
        ties = mask.view(torch.uint8).sum(1, dtype=torch.uint8 if dense.size(1) < 256 else torch.int32)
        return torch.where(mask, (grad / ties).unsqueeze(1), 0.0)


def max_over_units(dense: Tensor) -> Tensor:
    """The maximum over dim 1 of ``dense`` ``[B, units, H]`` -> ``[B, H]``: the max
    along the last dimension of its transpose (about a third faster on CPU than along
    dim 1), with :class:`_MaxOverUnits`'s backward."""
    if torch.is_grad_enabled() and dense.requires_grad:
        return _MaxOverUnits.apply(dense)
    return dense.transpose(1, 2).amax(-1)


def _no_unit_to_zero(pooled: Tensor) -> Tensor:
    """Max pooling over no unit (every unit of a graph dead) reads 0, not -inf."""
    return pooled.masked_fill(torch.isinf(pooled) & (pooled < 0), 0.0)


def dense_pool_stats(summed: Tensor, maxed: Tensor, alive: Optional[Tensor], with_max: bool
                     ) -> Tuple[Tensor, Tensor]:
    """:meth:`ValueHead.pool_base`'s sum ``[B, H]`` of the pooled rows of ``summed`` ``[B,
    units, H]`` and three largest values ``[B, 3, H']`` (empty without ``with_max``) of those
    of ``maxed`` ``[B, units, H']`` (column views of one tensor: the columns each reduction
    pools), ``alive`` ``[B, units]`` (the rows pooled) or ``None`` (every row); compiled
    (:func:`compiled`, without autograd) it is one pass over the rows."""
    if alive is None:
        total, rows = summed.sum(1), maxed
    else:
        keep = alive.unsqueeze(-1)
        total = (summed * keep.to(summed.dtype)).sum(1)
        rows = maxed.masked_fill(~keep, float("-inf"))
    return total, top3(rows) if with_max else summed.new_zeros(0)


class ValueHead(nn.Module):
    r"""The paper's value encoder ('fc-relu' per unit, then 'pooling-fc').

    .. math::
        V = w^\top \mathrm{pool}_{j \in \mathrm{alive}}\,\mathrm{ReLU}(W e_u(u_{j,a_{1:i}}) + b) + c

    Units that are not alive (:attr:`UnitIndex.unit_alive`) are left out of the
    pooling; without alive flags every unit is pooled.

    Args:
        hidden (int): Embedding width.
        pool (str, optional): ``"mean"``, ``"sum"``, ``"max"``, ``"mean_max"``
            (both, concatenated) or ``"mean_max_split"`` (the official football code's:
            the per-unit MLP ``2 * hidden`` wide, its inner layers ``hidden``, the first
            ``hidden`` outputs mean-pooled, the last ``hidden`` max-pooled,
            concatenated). (default: :obj:`"mean"`)
        layers (int, optional): Depth of the per-unit MLP and of the readout after
            pooling (``layers - 1`` hidden fc + ReLU, then fc). (default: :obj:`1`)
    """

    def __init__(self, hidden: int, pool: str = "mean", layers: int = 1) -> None:
        super().__init__()
        if pool not in POOLS:
            raise ValueError(f"unknown pool '{pool}' (choose from {sorted(POOLS)})")
        self.hidden, self.pool, self.layers = hidden, pool, layers
        self.reduces: Tuple[str, ...] = POOLS[pool]
        split = pool == "mean_max_split"  # per-unit rows 2H wide, pooled in halves
        self.width = 2 * hidden if split else hidden
        """Width of the per-unit rows (:meth:`unit_hidden`)."""
        whole, first, last = slice(None), slice(None, hidden), slice(hidden, None)
        self.columns = {r: (last if r == "max" else first) if split else whole
                        for r in ("mean", "sum", "max")}
        """The columns of the per-unit rows that each reduction pools: all of them, or with
        a split pool the first ``hidden`` for the mean and the last ``hidden`` for the max."""
        self.unit_mlp = mlp(hidden, self.width, layers, width=hidden)
        pooled = hidden * len(self.reduces)
        readout = [mlp(pooled, hidden, layers - 1)] if layers > 1 else []
        self.out = nn.Sequential(*readout, nn.Linear(hidden if layers > 1 else pooled, 1))
        self.compiled = False
        """Value candidates without autograd through compiled kernels (:func:`compiled`;
        ``train.compile``). Not a parameter: a checkpoint does not record it."""

    def reset_parameters(self) -> None:
        reset_mlp(self.unit_mlp)
        for m in self.out.modules():
            if isinstance(m, nn.Linear):
                m.reset_parameters()

    def unit_hidden(self, units: Tensor) -> Tensor:
        """Per-unit 'fc-relu' of the value encoder ``[U, H] -> [U, width]``."""
        return self.unit_mlp(units)

    # unit_hidden(e) == hidden_of_pre(pre_hidden(e)), and the first fc is linear:
    # pre_hidden(e + m) == pre_hidden(e) + message_pre(m).
    def pre_hidden(self, units: Tensor) -> Tensor:
        """Pre-activation of the first fc of :meth:`unit_hidden`: ``W e + b``."""
        return self.unit_mlp[0](units)

    def message_pre(self, messages: Tensor) -> Tensor:
        """What adding ``messages`` to unit embeddings adds to :meth:`pre_hidden`: ``W m``."""
        return messages.matmul(self.unit_mlp[0].weight.t())

    def hidden_of_pre(self, pre: Tensor) -> Tensor:
        """The rest of :meth:`unit_hidden` after its first fc (``pre`` is not changed)."""
        h = torch.relu(pre)
        for i in range(2, len(self.unit_mlp)):
            h = self.unit_mlp[i](h)
        return h

    @property
    def linear_readout(self) -> bool:
        """V is affine in every unit's hidden row: sum or mean pooling into a single fc
        (``layers=1``). Then ``V = w^T pool(h) + c`` needs only the scalars ``w^T h_j``."""
        return self.layers == 1 and self.pool in ("sum", "mean")

    def forward(self, units: Tensor, index: UnitIndex) -> Tensor:
        """V of whole SE-states from their unit embeddings ``[U, H]`` -> ``[B]``."""
        return self.pooled_value(self.unit_hidden(units), index)

    def pooled_value(self, h: Tensor, index: UnitIndex) -> Tensor:
        """V of whole SE-states from the per-unit rows ``h`` ``[U, H]`` of
        :meth:`unit_hidden` -> ``[B]``: the pooling over the alive units, then the readout.
        Where every graph has as many units (every battle map, football) the graphs'
        rows are pooled as a ``[B, units, H]`` view (the max by :func:`max_over_units`).

        ``h`` is a ReLU's output, so the units left out are zeroed for the max as for
        the mean: no row is below 0, so a zero row changes no maximum, and a graph
        without alive units pools to 0 either way. The gradient reaches the same
        parameters: a zeroed row passes none back, nor does a row that the ReLU set to
        0 (a maximum of 0)."""
        B, alive = index.num_graphs, index.unit_alive
        rows = h if alive is None else h * alive.unsqueeze(-1).to(h.dtype)
        dense = _as_graphs(rows, index)
        pooled = []
        for r in self.reduces:
            cols = self.columns[r]
            if r == "max":
                pooled.append(max_over_units(dense[..., cols]) if dense is not None else
                              scatter(rows[:, cols], index.unit_batch, dim=0, dim_size=B,
                                      reduce="max"))
                continue
            total = dense[..., cols].sum(1) if dense is not None else \
                scatter(rows[:, cols], index.unit_batch, dim=0, dim_size=B, reduce="sum")
            if r == "mean":
                total = total / _alive_count(index).to(h.dtype).clamp(min=1).unsqueeze(-1)
            pooled.append(total)
        return self.out(torch.cat(pooled, dim=-1)).squeeze(-1)

    # Candidate evaluation without re-encoding ---------------------------------------
    def pool_base(self, units: Optional[Tensor], index: UnitIndex,
                  hidden: Optional[Tensor] = None, count: Optional[Tensor] = None,
                  fast: bool = False) -> PoolBase:
        """Statistics of the current SE-state that candidates reuse.

        ``hidden`` may pass precomputed ``unit_hidden(units)`` (``units`` is then not read),
        ``count`` the alive units of each graph (:func:`_alive_count`). The sums and maxima
        come from :func:`dense_pool_stats`: over a view of the rows where the graphs have
        one size (compiled with ``fast``), else over the rows zero-padded (:func:`_padded`).
        """
        h = self.unit_hidden(units) if hidden is None else hidden
        alive = index.unit_alive
        count = _alive_count(index) if count is None else count
        dense = _as_graphs(h, index)
        if dense is not None:
            keep = None if alive is None else alive.view(dense.shape[:2])
            pool = compiled(dense_pool_stats) if fast else dense_pool_stats
        else:  # graphs of several sizes (or none): zero-padded, the padding left out
            dense, keep = _padded(h, index)
            pool = dense_pool_stats
        summed = dense[..., self.columns[self.reduces[0]]]  # read where a mean or sum is
        maxed = dense[..., self.columns["max"]]
        total, top = pool(summed, maxed, keep, "max" in self.reduces)
        return PoolBase(h, total, count, top)

    def candidate_values(self, base: PoolBase, index: UnitIndex, graph: Tensor,
                         rows: CandidateRows) -> Tensor:
        """V of every candidate successor SE-state ``[C]``.

        Only the actor and target rows change, so their hidden values are the only
        matrix work: ``(C + U) x H^2`` per step. Sum/mean pooling adjusts the shared
        total; max pooling takes, per feature, the largest of the graph's top-3 values
        that do not belong to a changed row, then the new rows. A changed row of a unit
        that is not alive stays out of the pooling.
        """
        C = graph.numel()
        has_t = rows.has_target
        new = self.unit_hidden(torch.cat([rows.actor_emb, rows.target_emb[has_t]]))
        h_t = new.new_zeros(C, new.size(1))
        h_t[has_t] = new[C:]
        return self.hidden_values(base, index, graph, rows.actor, new[:C].unsqueeze(1),
                                  rows.target.unsqueeze(1), h_t.unsqueeze(1),
                                  has_t.unsqueeze(1)).squeeze(1)

    def hidden_values(self, base: PoolBase, index: UnitIndex, graph: Tensor, actor: Tensor,
                      h_actor: Tensor, target: Tensor, h_target: Tensor,
                      has_target: Tensor) -> Tensor:
        """:meth:`candidate_values` from the new hidden rows of the changed units, for
        ``c`` actors with ``S`` candidates each: the actor's new rows ``h_actor``
        ``[c, S, H]`` at flat row ``actor`` ``[c]`` (of graph ``graph`` ``[c]``), and,
        where ``has_target`` ``[c, S]``, the target's ``h_target`` ``[c, S, H]`` at row
        ``target`` ``[c, S]`` (any valid row elsewhere). Returns ``[c, S]``.

        What does not depend on the candidate (the pooled rest of the graph without the
        actor) is computed once per actor."""
        return pooled_values(self, base, index.unit_alive, graph, actor,
                             h_actor, target, h_target, has_target)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.hidden}, pool={self.pool}, layers={self.layers})"


def pooled_values(head: "ValueHead", base: PoolBase, alive: Optional[Tensor], graph: Tensor,
                  actor: Tensor, h_actor: Tensor, target: Tensor, h_target: Tensor,
                  has_target: Tensor) -> Tensor:
    """:meth:`ValueHead.hidden_values` on the one tensor of the batch's index it reads
    (``alive``: :attr:`UnitIndex.unit_alive`), so that it can be compiled
    (:func:`compiled`)."""
    c = h_actor.size(0)
    pool_a = None if alive is None else alive[actor].unsqueeze(-1)  # [c, 1]
    keep_t = (has_target if alive is None else has_target & alive[target]).unsqueeze(-1)
    old_actor, old_target = base.hidden[actor], base.hidden[target]  # [c, W], [c, S, W]
    pooled = []
    for r in head.reduces:  # each on the columns it pools
        cols = head.columns[r]
        h_a, h_t = h_actor[..., cols], h_target[..., cols]  # [c, S, H]
        old_a, old_t = old_actor[..., cols], old_target[..., cols]  # [c, H], [c, S, H]
        if r in ("sum", "mean"):
            if pool_a is not None:
                h_a, old_a = h_a * pool_a.unsqueeze(1).to(h_a.dtype), old_a * pool_a.to(h_a.dtype)
            keep = keep_t.to(h_a.dtype)
            rest = (base.total[graph] - old_a).unsqueeze(1)  # [c, 1, H]
            total = rest + h_a - old_t * keep + h_t * keep
            if r == "mean":
                count = base.count[graph].clamp(min=1).view(c, 1, 1).to(total.dtype)
                total = total / count
            pooled.append(total)
        else:
            if pool_a is not None:
                old_a = old_a.masked_fill(~pool_a, float("-inf"))
                h_a = h_a.masked_fill(~pool_a.unsqueeze(1), float("-inf"))
            # the graph's largest values per feature without the actor's old row ...
            first, second = max_without(base.top[graph], old_a)  # [c, H] each
            # ... and without the target's: the second where the target's old value is
            # the first (a value only the rows that are pooled have)
            rest = torch.where(keep_t & (old_t == first.unsqueeze(1)),
                               second.unsqueeze(1), first.unsqueeze(1))  # [c, S, H]
            h_t_max = torch.where(keep_t, h_t, torch.full_like(h_t, float("-inf")))
            best = torch.maximum(torch.maximum(rest, h_a), h_t_max)
            pooled.append(best if alive is None else _no_unit_to_zero(best))
    return head.out(torch.cat(pooled, dim=-1)).squeeze(-1)


def gathered_pre(pre: Tensor, msg: Tensor, read: Tensor, msg_rows: Tensor,
                 extra: Optional[Tensor]) -> Tensor:
    """First-fc pre-activations of the changed rows of ``c x S`` candidates
    ``[c, 2, S, H]``: row ``read`` ``[c, 2, S]`` of ``pre`` plus its message's ``W m``, row
    ``msg_rows`` ``[c, 2, S]`` of the table ``msg``, plus on the actor row a second
    message's, row ``extra`` ``[c, S]``, where given."""
    c, _, S = read.shape
    out = pre.index_select(0, read.reshape(-1)).add_(
        msg.index_select(0, msg_rows.reshape(-1))).view(c, 2, S, -1)
    if extra is not None:
        out[:, 0] += msg.index_select(0, extra.reshape(-1)).view(c, S, -1)
    return out


def successor_scores(pre: Tensor, msg: Tensor, read: Tensor, msg_rows: Tensor,
                     extra: Optional[Tensor], weight: Tensor) -> Tensor:
    """``w^T relu(p)`` of :func:`gathered_pre`'s rows ``[c, 2, S]`` (a linear readout's
    one-layer unit MLP); compiled, the ``[c, 2, S, H]`` rows are never stored."""
    return torch.relu(gathered_pre(pre, msg, read, msg_rows, extra)).matmul(weight)


_COMPILED: dict = {}


class CompiledKernel:
    """``fn`` compiled (:func:`compiled`), checked against ``fn`` itself on its first call
    with each pattern of sizes 0 and 1 of its tensor arguments (where ``torch.compile``
    builds another kernel): a kernel that disagrees beyond float rounding raises
    (:func:`acegnn.utils.compiled.check_compiled`) instead of training on wrong values."""

    def __init__(self, fn) -> None:
        self.fn, self.kernel, self.checked = fn, torch.compile(fn, dynamic=True), set()

    def __call__(self, *args):
        out = self.kernel(*args)
        key = tuple(tuple(n < 2 for n in a.shape) for a in args if isinstance(a, Tensor))
        if key not in self.checked:
            check_compiled(f"kernel {self.fn.__name__}", out, self.fn(*args), "train.compile")
            self.checked.add(key)
        return out


def compiled(fn) -> CompiledKernel:
    """``fn`` compiled by ``torch.compile`` (dynamic shapes), once per process, and
    checked against ``fn`` where it builds a kernel (:class:`CompiledKernel`).

    :class:`SuccessorValues` runs its kernels (:func:`gathered_pre`,
    :func:`successor_scores`, :func:`pooled_values`, :func:`dense_pool_stats`) through
    this where the head's ``compiled`` flag is set (``train.compile``) and autograd is
    off: the valuation of every candidate in a decision and in the TD targets, the
    largest memory-bound part of an update. The values are those of the plain functions
    to float rounding."""
    if fn not in _COMPILED:
        _COMPILED[fn] = CompiledKernel(fn)
    return _COMPILED[fn]


def use_compiled(module: nn.Module, on: bool = True) -> int:
    """Set the ``compiled`` flag of every :class:`ValueHead` in ``module``; how many
    there are."""
    heads = [m for m in module.modules() if isinstance(m, ValueHead)]
    for m in heads:
        m.compiled = bool(on)
    return len(heads)


class Successors(NamedTuple):
    """A step's candidate successors as :meth:`SuccessorValues.values` valued them, for
    :meth:`SuccessorValues.advance`."""

    pre: Optional[Tensor]  # [c, 2, S, H] first-fc pre-activations of the changed rows,
    # None where compiled kernels did not keep them (computed again for the chosen ones)
    read: Tensor  # [c, 2, S] rows read: actor; target (the actor's where none)
    msg: Tensor  # [c, 2, S] message rows added to them
    extra: Optional[Tensor]  # [c, S] second message on the actor row, or None
    score: Optional[Tensor]  # [c, 2, S] the new rows' scores (linear readout), else None
    change: Optional[Tensor]  # [c, S] change of the pooled score sum (linear readout)
    write: Tensor  # [c, 2, S] the rows they replace
    graph: Tensor  # [c] graph of each acting agent
    hidden: Optional[Tensor] = None  # [U + 1, H] the successor's hidden rows, where each
    # agent had one candidate (S = 1) and its successor was pooled whole

    def take(self, rows: Tensor) -> "Successors":
        """The successors of candidate rows ``rows`` ``[c]`` (each a row of the first
        dimension), one per agent: a step's chosen candidates where they were valued as
        rows of their own (:meth:`SuccessorValues.values` with ``single=False``)."""
        if self.hidden is not None:
            raise ValueError("successors pooled whole are already one per agent")
        return Successors(*(None if t is None else t.index_select(0, rows) for t in self[:-1]))


def transformed_messages(head: ValueHead, messages: Tensor, read: Optional[Tensor] = None
                         ) -> Tensor:
    """:meth:`ValueHead.message_pre` of the rows ``read`` ``[K]`` (repeats allowed) of
    ``messages`` ``[M, H]``, each once, at their rows of an ``[M, W]`` table (``W`` the
    first fc's outputs) that is zero elsewhere; of every row without ``read``."""
    if read is None:
        return head.message_pre(messages)
    used = torch.unique(read)
    out = head.message_pre(messages.index_select(0, used))
    return out.new_zeros(messages.size(0), out.size(1)).index_copy(0, used, out)


class SuccessorValues:
    r"""V of the candidate successors of one SE-state after another, without re-encoding.

    It keeps the value encoder's first-fc pre-activations
    :math:`p_j = W e_j + b` of every unit of the current SE-state. A candidate that adds
    message :math:`m` to row :math:`j` reads :math:`p_j + W m`, then the ReLU and the
    later layers. Every message that a step reads is transformed once
    (:meth:`ValueHead.message_pre`).
    With :attr:`ValueHead.linear_readout` it keeps one scalar :math:`w^\top h_j` per unit
    and the per-graph sums of the pooled ones.

    Rows are the flat unit rows plus a spare row ``num_units``, never pooled, that takes
    the writes of candidates that change no target. The pre-activations are updated in
    place; without autograd the rest of the state is too.

    Args:
        head (ValueHead): The value encoder, or a second head of its structure
            (ACE-PPO's logit encoder).
        units (Tensor): ``[U, H]`` unit embeddings of the first SE-state.
        index (UnitIndex): The batch's indexing.
        messages (Tensor): ``[M, H]`` every message a candidate may add (the rows of
            :func:`acegnn.nn.se_state.message_table`).
        read (Tensor, optional): The message rows that :meth:`values` will read (any
            order, repeats allowed): only they are transformed, once each; the other rows
            of the transformed table are zero. A rollout on ``s'`` to its first agent
            reads a fifth of a battle's messages, and a marine never its passive
            ``heal`` row. (default: every row)

    Shapes (of :meth:`values`, ``c`` agents with ``S`` candidates each):
        - **read, write, msg, pool:** ``[c, 2, S]``: per candidate its actor (``[:, 0]``)
          and target (``[:, 1]``) rows to read and to write, message rows, and whether
          the new row is pooled (alive; ``False`` for a target that is not changed).
        - **extra:** ``[c, S]`` or ``None``: a second message on the actor row (a passive
          message to the actor itself).
        - **output:** ``[c, S]``.
    """

    def __init__(self, head: ValueHead, units: Tensor, index: UnitIndex, messages: Tensor,
                 read: Optional[Tensor] = None) -> None:
        self.head, self.index = head, index
        self.pre = head.pre_hidden(torch.cat([units, units.new_zeros(1, units.size(1))]))
        self.msg = transformed_messages(head, messages, read)
        self.inplace = not (torch.is_grad_enabled() and (
            self.pre.requires_grad or self.msg.requires_grad))
        self.scalar = head.linear_readout
        h = head.hidden_of_pre(self.pre)
        B, U, alive = index.num_graphs, index.num_units, index.unit_alive
        if self.scalar:
            fc = head.out[0]
            self.bias = fc.bias[0]
            self.score = h.matmul(fc.weight[0])  # [U + 1] w^T h_j
            pooled = self.score[:U] if alive is None else self.score[:U] * alive.to(h.dtype)
            self.total = h.new_zeros(B).index_add(0, index.unit_batch, pooled)
            self.count = None
            if head.pool == "mean":
                self.count = _alive_count(index).clamp(min=1).to(h.dtype)
        else:
            self.hidden = h
            self.alive_count: Optional[Tensor] = None  # [B], once needed

    def _put(self, t: Tensor, rows: Tensor, new: Tensor) -> Tensor:
        return t.index_copy_(0, rows, new) if self.inplace else t.index_copy(0, rows, new)

    def values(self, graph: Tensor, read: Tensor, msg: Tensor, extra: Optional[Tensor],
               write: Tensor, pool: Tensor, single: bool = True) -> Tuple[Tensor, "Successors"]:
        """V of the successors ``[c, S]`` of the current SE-state (``graph`` ``[c]``: the
        graph of each acting agent), and the :class:`Successors` that :meth:`advance`
        moves the chosen ones along. With ``S == 1`` and ``single`` (one successor per
        agent: the given actions) each is pooled whole; without ``single`` the rows are
        candidates of their own, valued against the statistics they share, as where
        ``S > 1`` (the valid candidates of a step, one per row)."""
        c, _, S = read.shape
        fast = self.head.compiled and not torch.is_grad_enabled()
        if self.scalar:
            weight = self.head.out[0].weight[0]
            pre = None
            if fast:
                score = compiled(successor_scores)(self.pre, self.msg, read, msg, extra, weight)
            else:
                pre = gathered_pre(self.pre, self.msg, read, msg, extra)
                score = self.head.hidden_of_pre(pre).matmul(weight)
            rows = read.reshape(-1)
            change = (score - self.score.index_select(0, rows).view(c, 2, S)).mul_(pool).sum(1)
            total = self.total.index_select(0, graph).unsqueeze(1) + change  # [c, S]
            if self.count is not None:
                total = total.div_(self.count.index_select(0, graph).unsqueeze(1))
            return total.add_(self.bias), Successors(pre, read, msg, extra, score, change, write, graph)
        index = self.index
        pre = (compiled(gathered_pre) if fast else gathered_pre)(self.pre, self.msg, read, msg,
                                                                  extra)
        if S == 1 and single:  # one successor per agent (the given actions): pool it whole, as
            # cheap as the statistics that candidates share and without their top-k
            hidden = self._put(self.hidden, write.reshape(-1),
                               self.head.hidden_of_pre(pre.reshape(2 * c, -1)))
            v = self.head.pooled_value(hidden[:index.num_units], index).index_select(0, graph)
            return v.unsqueeze(1), Successors(pre, read, msg, extra, None, None, write, graph,
                                              hidden)
        changed = write[:, 1] != index.num_units  # [c, S] the candidate changes a target row
        h = self._hidden(pre, changed)
        base = self._pool_base(fast)
        # every candidate of an agent has the agent as its actor (padding repeats one)
        args = (self.head, base, index.unit_alive, graph, read[:, 0, 0],
                h[:, 0], read[:, 1], h[:, 1], changed)
        v = compiled(pooled_values)(*args) if fast else pooled_values(*args)
        return v, Successors(None if fast else pre, read, msg, extra, None, None, write,
                             graph)

    def _pool_base(self, fast: bool) -> PoolBase:
        """The pooling statistics of the current SE-state (:meth:`ValueHead.pool_base`),
        the alive count once per rollout."""
        if self.alive_count is None:  # the alive units do not change along a rollout
            self.alive_count = _alive_count(self.index)
        return self.head.pool_base(None, self.index, self.hidden[:self.index.num_units],
                                   self.alive_count, fast)

    def _hidden(self, pre: Tensor, changed: Tensor) -> Tensor:
        """The rest of the unit MLP on ``pre`` ``[c, 2, S, H]`` -> ``[c, 2, S, width]``, on
        the target rows only where ``changed`` ``[c, S]`` (zero elsewhere: no candidate
        reads them)."""
        deep = len(self.head.unit_mlp) > 2  # more than the ReLU after the first fc
        if not deep or bool(changed.all()):
            return self.head.hidden_of_pre(pre)
        target = pre.new_zeros(pre.shape[:1] + pre.shape[2:-1] + (self.head.width,))
        if bool(changed.any()):
            target = target.index_put((changed,), self.head.hidden_of_pre(pre[:, 1][changed]))
        return torch.stack([self.head.hidden_of_pre(pre[:, 0]), target], dim=1)

    def advance(self, successors: "Successors", col: Tensor) -> None:
        """Move every acting agent's SE-state to its successor in column ``col`` ``[c]``
        of ``successors`` (what :meth:`values` returned for this step); where the
        compiled kernels kept no rows, the chosen candidates' ``2c`` are computed again."""
        pre, read, msg, extra, score, change, write, graph, hidden = successors
        c, _, S = write.shape
        entry = torch.arange(0, c * S, S, device=col.device).add_(col)  # [c] in [c, S]
        both = (entry + torch.arange(0, c * S, S, device=col.device)).unsqueeze(1)
        both = torch.cat([both, both + S], 1).view(-1)  # [2c] actor, target in [c, 2, S]

        def pick(t: Tensor) -> Tensor:  # [c, 2, S] -> the chosen column [c, 2, 1]
            return t.reshape(-1).index_select(0, both).view(c, 2, 1)

        if pre is None:
            chosen_extra = None if extra is None else extra.reshape(-1).index_select(0, entry).view(c, 1)
            pre = gathered_pre(self.pre, self.msg, pick(read), pick(msg),
                               chosen_extra).view(2 * c, -1)  # [2c, H]
        else:
            pre = pre.reshape(-1, pre.size(-1)).index_select(0, both)
        rows = write.reshape(-1).index_select(0, both)
        # in place with autograd too: no backward pass reads this table's values (its
        # readers keep the indices of the rows they gather; the ReLU keeps its output)
        self.pre = self.pre.index_copy_(0, rows, pre)
        if self.scalar:
            self.score = self._put(self.score, rows, score.reshape(-1).index_select(0, both))
            step = change.reshape(-1).index_select(0, entry)
            self.total = self.total.index_add_(0, graph, step) if self.inplace else \
                self.total.index_add(0, graph, step)
        elif hidden is not None:  # the one successor, pooled whole by values()
            self.hidden = hidden
        else:
            self.hidden = self._put(self.hidden, rows, self.head.hidden_of_pre(pre))

"""Interaction-aware action embedding (paper "Network Representation")."""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from acegnn.graph.index import UnitIndex
from acegnn.graph.schema import EdgeType, GraphSchema
from acegnn.nn.se_state import targeted_columns
from acegnn.nn.unit_encoder import mlp, reset_mlp


class ActionEncoder(nn.Module):
    r"""Active and passive action embeddings.

    * **active** :math:`e_a^a`: a learnable vector per action kind, added to the acting
      unit;
    * **passive** :math:`e_a^p`: fc + ReLU over the acting unit's node features, one
      output per targeted kind (``hidden x num_targeted_kinds`` outputs), added to the
      target unit.

    With ``pairs`` (the official SMAC code's action encoder) a targeted action's two
    messages come instead from one :class:`PairEncoder` over the pair (actor, target):
    its active message replaces the kind's vector, its passive message the table above.

    Args:
        schema (GraphSchema): The environment's schema.
        hidden (int): Embedding width.
        passive (bool, optional): Use passive embeddings. :obj:`False` is the paper's
            ACE-w/o-IA ablation: targeted actions then only carry their active part.
            (default: :obj:`True`)
        layers (int, optional): Depth of the passive encoder. (default: :obj:`1`)
        width (int, optional): Width of its inner layers. (default: :obj:`None`,
            ``hidden``)
        pairs (bool, optional): Targeted actions' messages from a :class:`PairEncoder`.
            (default: :obj:`False`)
        embedded (bool, optional): The passive encoder reads the acting unit's
            embedding (``hidden`` wide, the unit encoder's output) instead of its node
            features: the official football code's ``_action_encoder``; :meth:`passive_table`
            is then given the embeddings. (default: :obj:`False`)

    Shapes:
        - **passive_table output:** ``[P, num_targeted_kinds, hidden]`` for the ``P``
          agents that have a targeted action, and their rows ``[num_agents]``
    """

    def __init__(self, schema: GraphSchema, hidden: int, passive: bool = True,
                 layers: int = 1, width: Optional[int] = None, pairs: bool = False,
                 embedded: bool = False) -> None:
        super().__init__()
        self.schema, self.hidden = schema, hidden
        self.targeted = schema.targeted_kinds
        self.passive = passive and len(self.targeted) > 0
        self.pairs = pairs and len(self.targeted) > 0
        self.embedded = embedded
        self.active = nn.Parameter(torch.empty(schema.num_kinds, hidden))
        # kind -> column of the passive table (-1 for untargeted kinds)
        col = torch.full((schema.num_kinds,), -1, dtype=torch.long)
        col[list(self.targeted)] = torch.arange(len(self.targeted))
        self.register_buffer("passive_col", col, persistent=False)
        self.passive_encoders = nn.ModuleDict({
            t: mlp(hidden if embedded else schema.node_types[t], hidden * len(self.targeted),
                   layers, width=width or hidden)
            for t in schema.agent_types
        }) if self.passive and not self.pairs else nn.ModuleDict()
        self.pair_encoder = PairEncoder(schema, hidden, 2 if self.passive else 1, layers,
                                        width) if self.pairs else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.active, std=0.1)
        for m in self.passive_encoders.values():
            reset_mlp(m)
        if self.pair_encoder is not None:
            reset_mlp(self.pair_encoder.mlp)

    def passive_table(self, x_dict: Dict[str, Tensor], index: UnitIndex,
                      actions: Optional[Tensor] = None) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """Passive embeddings for every targeted kind, computed once per state from each
        agent's row of ``x_dict`` (its node features, or its embedding with ``embedded``), of the
        agents that have an action with a target in the state (football: the ball owner):
        ``(table [P, num_targeted_kinds, hidden], block [num_agents])``, ``block`` the
        row of ``table`` of each agent (-1 for the others, whose messages no action
        reads); ``(None, None)`` when passive embeddings are off.

        ``actions`` (rows of the batch's action table) restricts the table to the
        entries those actions read: the encoder's last layer then computes only their
        kinds' outputs (one ``hidden``-wide slice of it per kind), the other entries are
        zero. That is what valuing given actions needs (teacher forcing, a target
        network's final SE-state), at a fraction of the last layer's cost. ``block`` is
        the same either way."""
        if not self.passive or self.pairs:
            return None, None
        k = len(self.targeted)
        aims = torch.zeros(index.num_agents, dtype=torch.bool, device=index.agents.device)
        aims[index.action_agent[index.action_target >= 0]] = True
        block = torch.where(aims, torch.cumsum(aims, 0) - 1, torch.full_like(index.agents, -1))
        first = x_dict[self.schema.agent_types[0]]
        table = first.new_zeros(int(aims.sum()), k, self.hidden)
        need = None
        if actions is not None:
            need = torch.zeros(index.num_agents, k, dtype=torch.bool, device=aims.device)
            col, has = targeted_columns(index, self.passive_col, actions)
            need[index.action_agent[actions][has], col[has]] = True
        for t, enc in self.passive_encoders.items():
            rows = index.flat[t]
            if rows.numel() == 0:
                continue
            pos = torch.searchsorted(index.agents, rows)  # agent position of each unit of t
            keep = aims[pos] if need is None else need[pos].any(1)
            if need is None or not bool(keep.any()):
                # encoded even when no row is kept: the parameters then get zero gradients
                out = enc(x_dict[t][keep]).view(-1, k, self.hidden)
                table = table.index_put((block[pos[keep]],), out)
                continue
            table = self._needed_entries(table, enc, x_dict[t][keep], block[pos[keep]],
                                         need[pos[keep]])
        return table, block

    def _needed_entries(self, table: Tensor, enc: nn.Sequential, x: Tensor, agent: Tensor,
                        need: Tensor) -> Tensor:
        """``table`` with the entries ``need`` ``[n, k]`` of the table rows ``agent`` ``[n]``
        (node features ``x``) filled: the layers before the last once per agent, then the
        last layer's ``hidden`` outputs of each needed kind."""
        h = enc[:-2](x)  # every layer but the last fc + ReLU
        row, col = need.nonzero(as_tuple=True)
        out = _SlicedLinear.apply(h.index_select(0, row), col, enc[-2].weight, enc[-2].bias,
                                  self.hidden)
        return table.index_put((agent[row], col), torch.relu(out))

    def pair_table(self, units: Tensor, index: UnitIndex, edge_index: Dict[EdgeType, Tensor],
                   edge_attr: Dict[EdgeType, Tensor], actions: Optional[Tensor] = None
                   ) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """The messages of every targeted action of the batch from its pair (actor,
        target): ``(table [R, c, hidden], row [A])``, ``c`` 2 (active, passive) or 1
        (active only, without passive embeddings), ``row`` the table row of each action
        of the action table (-1 for untargeted ones); ``(None, None)`` without ``pairs``.
        ``units`` are the state's unit embeddings ``[num_units, hidden]``.

        ``actions`` restricts the computed rows to those actions' (the others are zero;
        ``row`` is the same either way), as in :meth:`passive_table`."""
        if not self.pairs:
            return None, None
        col, targeted = targeted_columns(index, self.passive_col)
        row = torch.where(targeted, torch.cumsum(targeted, 0) - 1,
                          torch.full_like(index.action_target, -1))
        count = int(targeted.sum())
        need = targeted.nonzero().squeeze(1)
        if actions is not None:
            need = actions[targeted[actions]].unique()
        out = self.pair_encoder(units, index.action_actor[need], index.action_target[need],
                                col[need], index, edge_index, edge_attr)
        c = self.pair_encoder.messages
        if need.numel() == count:  # every row, in action order
            return out.view(count, c, self.hidden), row
        table = out.new_zeros(count, c, self.hidden)
        return table.index_put((row[need],), out.view(-1, c, self.hidden)), row

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.hidden}, kinds={self.schema.num_kinds}, "
                f"passive={self.passive}, pairs={self.pairs}, embedded={self.embedded})")


class PairEncoder(nn.Module):
    r"""Messages of targeted actions from the pair they join (the official SMAC code's
    action encoder): an MLP over the actor's and the target's unit embeddings, the
    features of the actor's edge to the target and the action's kind,

    .. math::
        [m^a, m^p] = \mathrm{MLP}\big([e_u(\mathrm{actor}), e_u(\mathrm{target}),
            x_{e_1}, \dots, x_{e_T}, \mathrm{onehot}(k)]\big),

    with :math:`x_{e_t}` the features of the edge ``actor -> target`` of the ``t``-th edge
    type out of an agent type (zeros where there is none), :math:`k` the action's kind
    among the targeted ones, ``layers`` fc + ReLU, and the output split into the active
    message :math:`m^a` (to the actor) and the passive one :math:`m^p` (to the target).
    The official SMAC code reads the pair's relation embedding where this reads the
    edge's raw features, and no kind (each of its units has one targeted kind); its
    football code, where every action of the ball's owner targets the ball, has one
    output per kind, which the kind's one-hot stands for here.

    The first layer is computed per unit, per edge and per kind, then gathered per pair.

    Args:
        schema (GraphSchema): The environment's schema.
        hidden (int): Embedding and message width.
        messages (int): 2 (active and passive) or 1 (active only).
        layers (int, optional): fc + ReLU layers. (default: :obj:`1`)
        width (int, optional): Width of the inner layers. (default: ``hidden``)
    """

    def __init__(self, schema: GraphSchema, hidden: int, messages: int, layers: int = 1,
                 width: Optional[int] = None) -> None:
        super().__init__()
        self.hidden, self.messages = hidden, messages
        self.edge_types = [et for et in schema.edge_types if et[0] in schema.agent_types]
        dims = [schema.edge_types[et] for et in self.edge_types]
        starts = [2 * hidden + sum(dims[:i]) for i in range(len(dims))]
        self.columns = [slice(a, a + d) for a, d in zip(starts, dims)]
        self.kind_start = 2 * hidden + sum(dims)
        inputs = self.kind_start + len(schema.targeted_kinds)
        self.mlp = mlp(inputs, messages * hidden, layers, width=width or hidden)

    def forward(self, units: Tensor, actor: Tensor, target: Tensor, kind: Tensor,
                index: UnitIndex, edge_index: Dict[EdgeType, Tensor],
                edge_attr: Dict[EdgeType, Tensor]) -> Tensor:
        """``[R, messages * hidden]`` messages of the pairs ``(actor[r], target[r])``
        (flat unit rows) of actions of targeted kind ``kind[r]`` (the position among the
        schema's targeted kinds)."""
        fc, H = self.mlp[0], self.hidden
        pre = F.linear(units, fc.weight[:, :H]).index_select(0, actor) + \
            F.linear(units, fc.weight[:, H:2 * H], fc.bias).index_select(0, target) + \
            fc.weight[:, self.kind_start:].t().index_select(0, kind)
        key = actor * index.num_units + target
        for et, cols in zip(self.edge_types, self.columns):
            ei = edge_index.get(et)
            if ei is None or ei.numel() == 0 or key.numel() == 0:
                continue
            edge_key = index.flat[et[0]][ei[0]] * index.num_units + index.flat[et[2]][ei[1]]
            sorted_key, order = torch.sort(edge_key)
            pos = torch.searchsorted(sorted_key, key).clamp(max=sorted_key.numel() - 1)
            hit = (sorted_key[pos] == key).nonzero().squeeze(1)
            x = edge_attr[et].index_select(0, order[pos[hit]])
            pre = pre.index_add(0, hit, F.linear(x, fc.weight[:, cols]))
        return self.mlp[2:](torch.relu(pre))


class _SlicedLinear(torch.autograd.Function):
    """``out[e] = x[e] W_c^T + b_c`` with ``W_c``, ``b_c`` the ``c = col[e]``-th slice of
    ``width`` output rows of a linear layer: one product per slice read, and one gradient
    of the weight (slicing it under autograd would add a zero-filled gradient of the whole
    weight per slice)."""

    @staticmethod
    def forward(ctx, x: Tensor, col: Tensor, weight: Tensor, bias: Tensor,
                width: int) -> Tensor:
        order = torch.argsort(col, stable=True)
        cols, counts = torch.unique_consecutive(col[order], return_counts=True)
        groups = list(zip(cols.tolist(), order.split(counts.tolist())))
        out = x.new_empty(x.size(0), width)
        for c, e in groups:
            w = slice(c * width, (c + 1) * width)
            out[e] = torch.addmm(bias[w], x[e], weight[w].t())
        ctx.save_for_backward(x, weight)
        ctx.groups, ctx.width = groups, width
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors
        width = ctx.width
        grad_x = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        grad_w = grad_b = None
        if ctx.needs_input_grad[2]:  # zero where no slice is read, filled below elsewhere
            unread = torch.ones(weight.size(0) // width, dtype=torch.bool)
            unread[[c for c, _ in ctx.groups]] = False
            grad_w = torch.empty_like(weight)
            grad_w.view(-1, width, weight.size(1))[unread.to(weight.device)] = 0
        if ctx.needs_input_grad[3]:
            grad_b = weight.new_zeros(weight.size(0))
        for c, e in ctx.groups:
            w, g = slice(c * width, (c + 1) * width), grad[e]
            if grad_x is not None:
                grad_x[e] = g.mm(weight[w])
            if grad_w is not None:
                torch.mm(g.t(), x[e], out=grad_w[w])
            if grad_b is not None:
                grad_b[w] = g.sum(0)
        return grad_x, None, grad_w, grad_b, None

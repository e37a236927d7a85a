"""Interaction-aware action embedding (paper "Network Representation")."""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from acegnn.graph.index import UnitIndex
from acegnn.graph.schema import GraphSchema
from acegnn.nn.unit_encoder import mlp, reset_mlp


class ActionEncoder(nn.Module):
    r"""Active and passive action embeddings.

    * **active** :math:`e_a^a`: a learnable vector per action kind, added to the acting
      unit;
    * **passive** :math:`e_a^p`: fc + ReLU over the acting unit's node features, one
      output per targeted kind (``hidden x num_targeted_kinds`` outputs), added to the
      target unit.

    Args:
        schema (GraphSchema): The environment's schema.
        hidden (int): Embedding width.
        passive (bool, optional): Use passive embeddings. :obj:`False` is the paper's
            ACE-w/o-IA ablation: targeted actions then only carry their active part.
            (default: :obj:`True`)
        layers (int, optional): Depth of the passive encoder. (default: :obj:`1`)
        width (int, optional): Width of its inner layers. (default: :obj:`None`,
            ``hidden``)

    Shapes:
        - **passive_table output:** ``[P, num_targeted_kinds, hidden]`` for the ``P``
          agents that have a targeted action, and their rows ``[num_agents]``
    """

    def __init__(self, schema: GraphSchema, hidden: int, passive: bool = True,
                 layers: int = 1, width: Optional[int] = None) -> None:
        super().__init__()
        self.schema, self.hidden = schema, hidden
        self.targeted = schema.targeted_kinds
        self.passive = passive and len(self.targeted) > 0
        self.active = nn.Parameter(torch.empty(schema.num_kinds, hidden))
        # kind -> column of the passive table (-1 for untargeted kinds)
        col = torch.full((schema.num_kinds,), -1, dtype=torch.long)
        col[list(self.targeted)] = torch.arange(len(self.targeted))
        self.register_buffer("passive_col", col, persistent=False)
        self.passive_encoders = nn.ModuleDict({
            t: mlp(schema.node_types[t], hidden * len(self.targeted), layers, width=width or hidden)
            for t in schema.agent_types
        }) if self.passive else nn.ModuleDict()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.active, std=0.1)
        for m in self.passive_encoders.values():
            reset_mlp(m)

    def passive_table(self, x_dict: Dict[str, Tensor], index: UnitIndex,
                      actions: Optional[Tensor] = None) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """Passive embeddings for every targeted kind, computed once per state, of the
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
        if not self.passive:
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
            col = self.passive_col[index.action_kind[actions]]
            has = (index.action_target[actions] >= 0) & (col >= 0)
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

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.hidden}, kinds={self.schema.num_kinds}, "
                f"passive={self.passive})")


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

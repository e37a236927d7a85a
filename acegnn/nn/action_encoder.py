"""Interaction-aware action embedding (paper "Network Representation")."""
from __future__ import annotations

from typing import Dict, Optional

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
        - **passive_table output:** ``[num_agents, num_targeted_kinds, hidden]``
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

    def passive_table(self, x_dict: Dict[str, Tensor], index: UnitIndex) -> Optional[Tensor]:
        """Passive embeddings of every agent for every targeted kind, computed once per
        state. ``None`` when passive embeddings are off. Only agents with an action that
        has a target in this state are encoded (football: the ball owner); the others'
        rows are zero, and no action's message reads them."""
        if not self.passive:
            return None
        k = len(self.targeted)
        table = x_dict[self.schema.agent_types[0]].new_zeros(index.num_agents, k, self.hidden)
        aims = torch.zeros(index.num_agents, dtype=torch.bool, device=table.device)
        aims[index.action_agent[index.action_target >= 0]] = True
        for t, enc in self.passive_encoders.items():
            rows = index.flat[t]
            if rows.numel() == 0:
                continue
            pos = torch.searchsorted(index.agents, rows)  # agent position of each unit of t
            keep = aims[pos]
            # encoded even when no row is kept: the parameters then get zero gradients
            table = table.index_put((pos[keep],), enc(x_dict[t][keep]).view(-1, k, self.hidden))
        return table

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.hidden}, kinds={self.schema.num_kinds}, "
                f"passive={self.passive})")

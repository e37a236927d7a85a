"""Value encoder: fc + ReLU per unit, pooling over the units of a graph, fc to V."""
from __future__ import annotations

from typing import NamedTuple, Tuple

import torch
from torch import Tensor, nn
from torch_geometric.utils import scatter

from acegnn.graph.index import UnitIndex
from acegnn.nn.se_state import CandidateRows
from acegnn.nn.unit_encoder import mlp, reset_mlp

POOLS = {"mean": ("mean",), "sum": ("sum",), "max": ("max",), "mean_max": ("mean", "max")}


class PoolBase(NamedTuple):
    """Per-graph pooling statistics of one SE-state, shared by all its candidates."""

    hidden: Tensor  # [U, H] per-unit hidden of the SE-state
    total: Tensor  # [B, H] sum over the pooled units (for mean/sum)
    count: Tensor  # [B] pooled units per graph (the alive ones)
    top: Tensor  # [B, k, H] the k largest hidden values per feature (for max), k <= 3
    top_pos: Tensor  # [B, k, H] their position inside the graph


def _no_unit_to_zero(pooled: Tensor) -> Tensor:
    """Max pooling over no unit (every unit of a graph dead) reads 0, not -inf."""
    return pooled.masked_fill(torch.isinf(pooled) & (pooled < 0), 0.0)


class ValueHead(nn.Module):
    r"""The paper's value encoder ('fc-relu' per unit, then 'pooling-fc').

    .. math::
        V = w^\top \mathrm{pool}_{j \in \mathrm{alive}}\,\mathrm{ReLU}(W e_u(u_{j,a_{1:i}}) + b) + c

    Units that are not alive (:attr:`UnitIndex.unit_alive`) are left out of the
    pooling; without alive flags every unit is pooled.

    Args:
        hidden (int): Embedding width.
        pool (str, optional): ``"mean"``, ``"sum"``, ``"max"`` or ``"mean_max"``
            (both, concatenated). (default: :obj:`"mean"`)
        layers (int, optional): Depth of the per-unit MLP and of the readout after
            pooling (``layers - 1`` hidden fc + ReLU, then fc). (default: :obj:`1`)
    """

    def __init__(self, hidden: int, pool: str = "mean", layers: int = 1) -> None:
        super().__init__()
        if pool not in POOLS:
            raise ValueError(f"unknown pool '{pool}' (choose from {sorted(POOLS)})")
        self.hidden, self.pool, self.layers = hidden, pool, layers
        self.reduces: Tuple[str, ...] = POOLS[pool]
        self.unit_mlp = mlp(hidden, hidden, layers)
        pooled = hidden * len(self.reduces)
        readout = [mlp(pooled, hidden, layers - 1)] if layers > 1 else []
        self.out = nn.Sequential(*readout, nn.Linear(hidden if layers > 1 else pooled, 1))

    def reset_parameters(self) -> None:
        reset_mlp(self.unit_mlp)
        for m in self.out.modules():
            if isinstance(m, nn.Linear):
                m.reset_parameters()

    def unit_hidden(self, units: Tensor) -> Tensor:
        """Per-unit 'fc-relu' of the value encoder ``[U, H] -> [U, H]``."""
        return self.unit_mlp(units)

    def forward(self, units: Tensor, index: UnitIndex) -> Tensor:
        """V of whole SE-states from their unit embeddings ``[U, H]`` -> ``[B]``."""
        h = self.unit_hidden(units)
        B, alive = index.num_graphs, index.unit_alive
        if alive is None:
            pooled = [scatter(h, index.unit_batch, dim=0, dim_size=B, reduce=r)
                      for r in self.reduces]
            return self.out(torch.cat(pooled, dim=-1)).squeeze(-1)
        keep = alive.unsqueeze(-1)
        pooled = []
        for r in self.reduces:
            if r == "max":
                top = scatter(h.masked_fill(~keep, float("-inf")), index.unit_batch, dim=0,
                              dim_size=B, reduce="max")
                pooled.append(_no_unit_to_zero(top))
                continue
            total = scatter(h * keep.to(h.dtype), index.unit_batch, dim=0, dim_size=B, reduce="sum")
            if r == "mean":
                count = scatter(alive.to(h.dtype), index.unit_batch, dim=0, dim_size=B, reduce="sum")
                total = total / count.clamp(min=1).unsqueeze(-1)
            pooled.append(total)
        return self.out(torch.cat(pooled, dim=-1)).squeeze(-1)

    # Candidate evaluation without re-encoding ---------------------------------------
    def pool_base(self, units: Tensor, index: UnitIndex, hidden: Tensor = None) -> PoolBase:
        """Statistics of the current SE-state that candidates reuse.

        ``hidden`` may pass precomputed ``unit_hidden(units)``.
        """
        h = self.unit_hidden(units) if hidden is None else hidden
        B, alive = index.num_graphs, index.unit_alive
        pooled_h = h if alive is None else h * alive.unsqueeze(-1).to(h.dtype)
        total = scatter(pooled_h, index.unit_batch, dim=0, dim_size=B, reduce="sum")
        count = index.unit_count if alive is None else \
            torch.bincount(index.unit_batch[alive], minlength=B)
        if "max" in self.reduces:
            pos = torch.arange(index.num_units, device=h.device) - index.unit_ptr[index.unit_batch]
            size = max(int(index.unit_count.max()) if B > 0 else 0, 1)
            dense = h.new_full((B, size, h.size(1)), float("-inf"))
            rows = h if alive is None else h.masked_fill(~alive.unsqueeze(-1), float("-inf"))
            dense[index.unit_batch, pos] = rows  # [B, max_units, H]
            top, top_pos = dense.topk(min(3, size), dim=1)
        else:
            top = top_pos = h.new_zeros(0)
        return PoolBase(h, total, count, top, top_pos)

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
        h_a, h_t = new[:C], new.new_zeros(C, self.hidden)
        h_t[has_t] = new[C:]
        pool_t = has_t
        old_a = base.hidden[rows.actor]
        if index.unit_alive is not None:
            pool_a = index.unit_alive[rows.actor].unsqueeze(-1)
            pool_t = has_t & index.unit_alive[rows.target]
            h_a_sum, old_a = h_a * pool_a.to(h_a.dtype), old_a * pool_a.to(h_a.dtype)
            h_a_max = h_a.masked_fill(~pool_a, float("-inf"))
        else:
            h_a_sum = h_a_max = h_a
        old_t = base.hidden[rows.target] * pool_t.unsqueeze(-1).to(new.dtype)
        h_t_sum = h_t * pool_t.unsqueeze(-1).to(new.dtype)
        pooled = []
        for r in self.reduces:
            if r in ("sum", "mean"):
                total = base.total[graph] - old_a + h_a_sum - old_t + h_t_sum
                if r == "mean":
                    total = total / base.count[graph].clamp(min=1).unsqueeze(-1).to(total.dtype)
                pooled.append(total)
            else:
                start = index.unit_ptr[graph]
                pos_a = (rows.actor - start).view(C, 1, 1)
                pos_t = torch.where(has_t, rows.target - start, torch.full_like(start, -1)).view(C, 1, 1)
                top, top_pos = base.top[graph], base.top_pos[graph]  # [C, k, H]
                keep = (top_pos != pos_a) & (top_pos != pos_t)
                rest = torch.where(keep, top, torch.full_like(top, float("-inf"))).amax(dim=1)
                h_t_max = torch.where(pool_t.unsqueeze(-1), h_t, torch.full_like(h_t, float("-inf")))
                best = torch.maximum(torch.maximum(rest, h_a_max), h_t_max)
                pooled.append(best if index.unit_alive is None else _no_unit_to_zero(best))
        return self.out(torch.cat(pooled, dim=-1)).squeeze(-1)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.hidden}, pool={self.pool}, layers={self.layers})"

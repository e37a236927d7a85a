"""Building a batch directly from dense per-state tensors (no per-state Python objects).

Environments whose states all have the same units (per type) and the same relation
structure -- Spiders-and-Fly, SMAX with dead units kept as nodes -- build their graph
batches here: the edge structure and action lists are shared, features are stacked.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Mapping, Optional

import torch
from torch import Tensor
from torch_geometric.data import Batch, HeteroData

from acegnn.graph.index import (UnitIndex, check_available, check_features,
                                compute_unit_index, state_flags, store_of)
from acegnn.graph.schema import ACTION, EdgeType, GraphSchema


def _tile(B: int, n: int, device) -> tuple:
    """``batch`` vector and ``ptr`` of ``B`` graphs with ``n`` elements each."""
    batch = torch.arange(B, device=device).repeat_interleave(n)
    ptr = torch.arange(B + 1, device=device) * n
    return batch, ptr


class DenseLayout:
    """The structure shared by every state of a dense environment: units per type,
    local edges and the action table. Batches of it differ only in features and
    availability, so the tiled index tensors of a batch size are built once and shared
    by every batch of that size (they are never written to). The same holds for the
    flat unit and action indexing of :func:`acegnn.graph.index.unit_index`: it is
    computed (and validated) once per batch size and reused for batches that still hold
    the layout's index tensors; only availability and features are read anew.

    Args:
        schema (GraphSchema): The environment's schema.
        num_nodes (Mapping[str, int]): Units per node type in every state.
        edge_index (Mapping[EdgeType, Tensor]): ``{e: [2, E_e]}`` local edge indices.
        actions (Mapping[str, Tensor]): The action table of one state (see
            :func:`acegnn.graph.dense_actions`); its ``available`` field is ignored.
        cache_size (int, optional): Batch sizes whose tiling is kept. (default: :obj:`8`)
        validate (bool, optional): Check the structure now, and let batches reuse the
            indexing; without, batches are indexed (and checked) from scratch like any
            other. (default: :obj:`True`)
    """

    def __init__(self, schema: GraphSchema, num_nodes: Mapping[str, int],
                 edge_index: Mapping[EdgeType, Tensor], actions: Mapping[str, Tensor],
                 cache_size: int = 8, validate: bool = True) -> None:
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise ValueError(f"cache_size must be a positive integer (got {cache_size!r})")
        self.schema = schema
        self.num_nodes = {t: int(num_nodes[t]) for t in schema.node_types}
        self.edge_index = {et: edge_index[et].clone() for et in schema.edge_types}
        self.actions = {k: v.clone() for k, v in actions.items() if k != "available"}
        self.num_actions = int(actions["kind"].numel())
        self.cache_size = cache_size
        self._tiles: Dict[tuple, dict] = {}
        self._lock = threading.Lock()  # the cache is shared by threads (train.overlap)
        self.validated = False
        if not validate:
            return
        # Validate the structure once (kinds, actors, targets), on one blank state.
        x = {t: torch.zeros(1, n, schema.node_types[t]) for t, n in self.num_nodes.items()}
        ea = {et: torch.zeros(1, ei.size(1), schema.edge_types[et])
              for et, ei in self.edge_index.items()}
        compute_unit_index(schema, self.batch(x, ea, torch.ones(1, self.num_actions, dtype=torch.bool)),
                           check=True)
        self._tiles.clear()
        self.validated = True

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _tiled(self, B: int, device) -> dict:
        with self._lock:
            return self._tiled_unlocked(B, device)

    def _tiled_unlocked(self, B: int, device) -> dict:
        key = (B, str(device))
        tiles = self._tiles.get(key)
        if tiles is not None:
            return tiles
        shared = []  # (store key, attribute, tensor) of every tensor batches share
        for t, n in self.num_nodes.items():
            batch, ptr = _tile(B, n, device)
            shared += [(t, "batch", batch), (t, "ptr", ptr)]
        for et, ei in self.edge_index.items():
            ei = ei.to(device)
            E = ei.size(1)
            step = torch.arange(B, device=device).repeat_interleave(E)
            offset = torch.stack([step * self.num_nodes[et[0]], step * self.num_nodes[et[2]]])
            shared.append((et, "edge_index", ei.repeat(1, B) + offset))  # [2, B * E]
        shared += [(ACTION, k, v.to(device).repeat(B)) for k, v in self.actions.items()]
        a_batch, a_ptr = _tile(B, self.num_actions, device)
        shared += [(ACTION, "batch", a_batch), (ACTION, "ptr", a_ptr)]
        by_store: Dict[Any, list] = {}  # store -> (attribute, tensor, version at tiling)
        for store, attr, tensor in shared:
            by_store.setdefault(store, []).append((attr, tensor, tensor._version))
        tiles = {"by_store": list(by_store.items())}
        if len(self._tiles) >= self.cache_size:
            self._tiles.pop(next(iter(self._tiles)))
        self._tiles[key] = tiles
        return tiles

    def batch(self, x: Mapping[str, Tensor], edge_attr: Mapping[EdgeType, Tensor],
              available: Tensor, alive: Optional[Mapping[str, Tensor]] = None,
              target_on: Optional[Tensor] = None) -> Batch:
        """A batch of ``B`` states: ``x`` ``{t: [B, n_t, F_t]}``, ``edge_attr``
        ``{e: [B, E_e, F_e]}``, ``available`` ``[B, num_actions]`` and optionally
        ``alive`` ``{t: [B, n_t]}`` bool (units that are not alive influence nothing) and
        ``target_on`` ``[B, num_actions]`` bool (an action whose flag is off has no
        target in that state; see :func:`acegnn.graph.index.state_flags`). Its index tensors are shared with the
        other batches of its size: treat them as read-only (an in-place write is
        noticed, and the layout then tiles that size anew)."""
        B = available.size(0)
        if available.dim() != 2 or available.size(1) != self.num_actions:
            raise ValueError(f"available must be [B, {self.num_actions}] (one flag per action "
                             f"of the layout), got {tuple(available.shape)}")
        for t, n in self.num_nodes.items():
            if x[t].dim() != 3 or x[t].shape[:2] != (B, n):
                raise ValueError(f"node type '{t}' features must be [{B}, {n}, F] (B states, "
                                 f"{n} units each), got {tuple(x[t].shape)}")
        for et, ei in self.edge_index.items():
            if edge_attr[et].dim() != 3 or edge_attr[et].shape[:2] != (B, ei.size(1)):
                raise ValueError(f"edge type {et} features must be [{B}, {ei.size(1)}, F] "
                                 f"(B states, {ei.size(1)} edges each), got {tuple(edge_attr[et].shape)}")
        tiles = self._tiled(B, available.device)
        stores: Dict[Any, dict] = {}  # store -> its attributes, in the order they are set
        for t in self.schema.node_types:
            stores[t] = {"x": x[t].reshape(B * self.num_nodes[t], x[t].size(2))}
        for t, flags in (alive or {}).items():
            if flags.shape != (B, self.num_nodes[t]):
                raise ValueError(f"node type '{t}' alive flags must be [{B}, {self.num_nodes[t]}] "
                                 f"(got {tuple(flags.shape)})")
            stores[t]["alive"] = flags.reshape(-1).bool()
        for et in self.schema.edge_types:
            ea = edge_attr[et]
            stores[et] = {"edge_attr": ea.reshape(B * ea.size(1), ea.size(2))}
        for key, held in tiles["by_store"]:
            stores.setdefault(key, {}).update((attr, tensor) for attr, tensor, _ in held)
        stores[ACTION].update(available=available.reshape(B * self.num_actions).bool(),
                              num_nodes=B * self.num_actions)
        if target_on is not None:
            if target_on.shape != available.shape:
                raise ValueError(f"target_on must be [B, {self.num_actions}] like available "
                                 f"(got {tuple(target_on.shape)})")
            stores[ACTION]["target_on"] = target_on.reshape(-1).bool()
        out = Batch(_base_cls=HeteroData)
        for key, attrs in stores.items():
            out[key]._mapping.update(attrs)  # a new store: what setting each attribute does
        out._num_graphs = B
        if self.validated:
            object.__setattr__(out, "_dense_layout", self)
        return out

    def _entry(self, batch: Batch) -> Optional[dict]:
        """The cache entry of a batch's size if the batch still holds its shared tensors
        and none of them was written to since (then the entry is dropped)."""
        key = (int(batch.num_graphs), str(store_of(batch, ACTION).kind.device))
        tiles = self._tiles.get(key)
        if tiles is None:
            return None
        if any(t._version != v for _, held in tiles["by_store"] for _, t, v in held):
            with self._lock:  # written in place: no batch may reuse it
                self._tiles.pop(key, None)
            return None
        for store, held in tiles["by_store"]:
            mapping = store_of(batch, store)._mapping
            if any(mapping.get(attr) is not tensor for attr, tensor, _ in held):
                return None
        return tiles

    def unit_index(self, batch: Batch, check: bool) -> Optional[UnitIndex]:
        """The flat indexing of a batch made by :meth:`batch`, from the cache; ``None``
        if the batch no longer holds the layout's index tensors (index it from scratch)."""
        tiles = self._entry(batch)
        if tiles is None:
            return None
        B = int(batch.num_graphs)
        if any(store_of(batch, t).x.size(0) != B * n for t, n in self.num_nodes.items()):
            return None  # features replaced by ones of other units: from scratch
        idx = tiles.get("index")
        if idx is None:  # the structure was validated in __init__
            idx = tiles["index"] = compute_unit_index(self.schema, batch, check=False,
                                                      per_state=False)
        if check:  # the edge indices are the layout's, checked in __init__
            check_features(self.schema, batch, edges=False)
        available = store_of(batch, ACTION).available.bool()
        if check:
            check_available(idx, available)
        return idx._replace(action_available=available,
                            **state_flags(self.schema, batch, idx))

    def cached(self, batch: Batch, key, build: Callable[[], Any]) -> Any:
        """``build()``, kept per batch size for batches of this layout that still hold
        its index tensors (for anything that depends only on the structure)."""
        tiles = self._entry(batch)
        if tiles is None:
            return build()
        if key not in tiles:
            tiles[key] = build()
        return tiles[key]


def layout_of(batch: Batch, schema: GraphSchema) -> Optional[DenseLayout]:
    """The validated :class:`DenseLayout` a batch was built by, if it has ``schema``."""
    layout = batch.__dict__.get("_dense_layout")
    if layout is not None and (layout.schema is schema or layout.schema == schema):
        return layout
    return None


def dense_batch(
    schema: GraphSchema,
    x: Mapping[str, Tensor],
    edge_index: Mapping[EdgeType, Tensor],
    edge_attr: Mapping[EdgeType, Tensor],
    actions: Mapping[str, Tensor],
    available: Tensor,
) -> Batch:
    """A batch of ``B`` states with the same units and relations.

    Args:
        schema (GraphSchema): The environment's schema.
        x (Mapping[str, Tensor]): ``{t: [B, n_t, F_t]}`` node features.
        edge_index (Mapping[EdgeType, Tensor]): ``{e: [2, E_e]}`` local edge indices,
            the same in every state.
        edge_attr (Mapping[EdgeType, Tensor]): ``{e: [B, E_e, F_e]}`` edge features.
        actions (Mapping[str, Tensor]): The action table of one state (see
            :func:`acegnn.graph.dense_actions`), the same in every state except for
            availability.
        available (Tensor): ``[B, num_actions]`` availability per state.

    Returns:
        A :class:`~torch_geometric.data.Batch` equal to collating ``B`` states built with
        :func:`acegnn.graph.build_state`. Environments that build many batches keep a
        :class:`DenseLayout` instead, which reuses the index tensors.
    """
    layout = DenseLayout(schema, {t: x[t].size(1) for t in schema.node_types}, edge_index,
                         actions, cache_size=1, validate=False)
    return layout.batch(x, edge_attr, available)

"""States as typed graphs: the schema, building and batching states, flat indexing."""
from acegnn.graph.dense import DenseLayout
from acegnn.graph.index import UnitIndex, unit_index
from acegnn.graph.schema import ACTION, ActionKind, EdgeType, GraphSchema
from acegnn.graph.state import (as_batch, build_state, cat_actions, collate, dense_actions,
                                full_edges, only_noop)

__all__ = [
    "ACTION", "ActionKind", "DenseLayout", "EdgeType", "GraphSchema", "UnitIndex", "unit_index", "as_batch",
    "build_state", "cat_actions", "collate", "dense_actions", "full_edges", "only_noop",
]

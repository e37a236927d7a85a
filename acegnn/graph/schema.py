"""The env-agnostic graph schema: which unit types, relations and action kinds exist.

An environment describes itself once with a :class:`GraphSchema`; every state it emits
is a :class:`torch_geometric.data.HeteroData` that follows it (see
:func:`acegnn.graph.build_state`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Tuple

EdgeType = Tuple[str, str, str]

#: Name of the HeteroData node store that holds the action table of a state.
ACTION = "action"

#: Fields of the action table, one entry per action of every controlled unit.
ACTION_FIELDS = ("kind", "actor_type", "actor", "target_type", "target", "slot", "available")


@dataclass(frozen=True)
class ActionKind:
    """One kind of action.

    Args:
        name (str): Name of the kind, e.g. ``"move_north"`` or ``"attack"``.
        targeted (bool, optional): Whether an action of this kind acts on a target unit
            (attack, heal, the ball). Targeted kinds carry a passive embedding added to
            the target unit. (default: :obj:`False`)
    """

    name: str
    targeted: bool = False


@dataclass(frozen=True)
class GraphSchema:
    """Unit types, relation types and action kinds of an environment.

    Args:
        node_types (Mapping[str, int]): Node type -> node feature width. The order is the
            order of units inside a graph.
        edge_types (Mapping[EdgeType, int]): ``(src, rel, dst)`` -> edge feature width.
        agent_types (Sequence[str]): Node types controlled by the learner. Every unit of
            these types is an agent and needs an action list.
        action_kinds (Sequence[ActionKind]): All action kinds; an action refers to its
            kind by index into this list.
    """

    node_types: Mapping[str, int]
    edge_types: Mapping[EdgeType, int]
    agent_types: Tuple[str, ...]
    action_kinds: Tuple[ActionKind, ...]
    node_type_names: Tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_types", dict(self.node_types))
        object.__setattr__(self, "edge_types", {tuple(k): v for k, v in self.edge_types.items()})
        object.__setattr__(self, "agent_types", tuple(self.agent_types))
        object.__setattr__(self, "action_kinds", tuple(self.action_kinds))
        object.__setattr__(self, "node_type_names", tuple(self.node_types))
        if not self.node_types:
            raise ValueError("GraphSchema needs at least one node type (got none)")
        if ACTION in self.node_types:
            raise ValueError(f"'{ACTION}' is reserved for the action table and cannot be a node type")
        for name, dim in self.node_types.items():
            if not isinstance(dim, int) or dim <= 0:
                raise ValueError(f"node type '{name}' needs a positive feature width (got {dim!r})")
        for et, dim in self.edge_types.items():
            if len(et) != 3 or et[0] not in self.node_types or et[2] not in self.node_types:
                raise ValueError(f"edge type {et} must be (src, rel, dst) with known node types "
                                 f"{list(self.node_types)}")
            if not isinstance(dim, int) or dim <= 0:
                raise ValueError(f"edge type {et} needs a positive feature width (got {dim!r})")
        if not self.agent_types:
            raise ValueError("GraphSchema needs at least one agent type (got none)")
        for t in self.agent_types:
            if t not in self.node_types:
                raise ValueError(f"agent type '{t}' is not a node type {list(self.node_types)}")
        if not self.action_kinds:
            raise ValueError("GraphSchema needs at least one action kind (got none)")
        names = [k.name for k in self.action_kinds]
        if len(set(names)) != len(names):
            raise ValueError(f"action kind names must be unique (got {names})")

    # Derived lookups -------------------------------------------------------------------
    def node_type_index(self, name: str) -> int:
        if name not in self.node_types:
            raise ValueError(f"unknown node type '{name}' (known: {list(self.node_types)})")
        return self.node_type_names.index(name)

    def kind_index(self, name: str) -> int:
        for i, k in enumerate(self.action_kinds):
            if k.name == name:
                return i
        raise ValueError(f"unknown action kind '{name}' (known: {[k.name for k in self.action_kinds]})")

    @property
    def num_kinds(self) -> int:
        return len(self.action_kinds)

    @property
    def targeted_kinds(self) -> Tuple[int, ...]:
        """Indices of the kinds that have a target unit and a passive embedding."""
        return tuple(i for i, k in enumerate(self.action_kinds) if k.targeted)

    def metadata(self) -> Tuple[list, list]:
        """``(node_types, edge_types)`` in PyG's ``data.metadata()`` form."""
        return list(self.node_types), list(self.edge_types)

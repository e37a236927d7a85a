"""Random SMAC-like states, for tests and benchmarks of the network and the rollout.

Allies (agent-controlled) and enemies are units on a plane; every ordered pair of
distinct units is an edge whose features are the distance on the two axes. Each ally
can stop, move in four directions, attack any enemy and heal any other ally.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch_geometric.data import HeteroData

from acegnn.graph import ActionKind, GraphSchema, build_state, dense_actions, full_edges

ALLY_FEATURES = 6
ENEMY_FEATURES = 5
EDGE_FEATURES = 2
MOVES = ("stop", "north", "south", "east", "west")


def smac_like_schema(heal: bool = True) -> GraphSchema:
    """Schema with ``ally``/``enemy`` unit types, all-pairs relations, and the actions
    stop, 4 moves, attack (target: an enemy) and, if ``heal``, heal (target: an ally)."""
    kinds = [ActionKind(m) for m in MOVES] + [ActionKind("attack", targeted=True)]
    if heal:
        kinds.append(ActionKind("heal", targeted=True))
    types = ("ally", "enemy")
    return GraphSchema(
        node_types={"ally": ALLY_FEATURES, "enemy": ENEMY_FEATURES},
        edge_types={(s, "near", d): EDGE_FEATURES for s in types for d in types},
        agent_types=("ally",),
        action_kinds=kinds,
    )


def random_state(schema: GraphSchema, num_agents: int, num_enemies: int,
                 generator: Optional[torch.Generator] = None, mask_prob: float = 0.0,
                 dtype: torch.dtype = torch.float32) -> HeteroData:
    """A random state: random features and positions, SMAC-like action lists.

    Slots: ``0..4`` stop and moves, ``5..5+num_enemies-1`` attack enemy ``j``, then
    (if the schema has heal) heal ally ``j``. Each slot is unavailable with probability
    ``mask_prob``; stop is always available.
    """
    g = generator
    pos = {"ally": torch.rand(num_agents, 2, generator=g), "enemy": torch.rand(num_enemies, 2, generator=g)}
    x = {"ally": torch.randn(num_agents, ALLY_FEATURES, generator=g).to(dtype),
         "enemy": torch.randn(num_enemies, ENEMY_FEATURES, generator=g).to(dtype)}
    x["ally"][:, :2] = pos["ally"].to(dtype)
    x["enemy"][:, :2] = pos["enemy"].to(dtype)
    ei, ea = {}, {}
    for et in schema.edge_types:
        s, _, d = et
        e = full_edges(pos[s].size(0), pos[d].size(0), same=s == d)
        ei[et] = e
        ea[et] = (pos[d][e[1]] - pos[s][e[0]]).to(dtype)
    heal = "heal" in [k.name for k in schema.action_kinds]
    kinds = list(range(len(MOVES))) + [schema.kind_index("attack")] * num_enemies
    targets = [-1] * len(MOVES) + list(range(num_enemies))
    ttypes = [None] * len(MOVES) + ["enemy"] * num_enemies
    if heal:
        kinds += [schema.kind_index("heal")] * num_agents
        targets += list(range(num_agents))
        ttypes += ["ally"] * num_agents
    num_slots = len(kinds)
    available = torch.rand(num_agents, num_slots, generator=g) >= mask_prob
    available[:, 0] = True
    target = torch.tensor(targets).expand(num_agents, num_slots).clone()
    if heal:  # no self-heal
        self_slot = len(MOVES) + num_enemies + torch.arange(num_agents)
        available[torch.arange(num_agents), self_slot] = False
    actions = dense_actions(schema, "ally", torch.tensor(kinds), available, target, ttypes)
    return build_state(schema, x, ei, ea, actions)

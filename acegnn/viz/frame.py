"""What is drawn: one state and the sequential decision made in it, as plain arrays.

:func:`frames` turns a graph batch and the :class:`~acegnn.nn.rollout.Rollout` made on
it into one :class:`Frame` per state. Everything the figures, animations and the HTML
page show comes from a frame; nothing here imports a drawing library.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.envs.base import Scene
from acegnn.graph.schema import GraphSchema
from acegnn.nn.rollout import Rollout


@dataclass(eq=False)
class Frame:
    """One state with its decision. Units are numbered ``0..U-1`` in the state's flat
    unit order (node types in schema order); agents ``0..n-1`` in the state's agent
    order; valued candidates ``0..C-1``. ``agents``, ``action_target`` and
    ``cand_target`` hold unit numbers; ``cand_agent`` agent numbers; ``chosen`` and
    ``greedy`` candidate numbers.

    The drawings leave out a unit that is not ``alive``, its label and every edge that
    has it as an end (:attr:`live_edges`). A dead agent keeps its one candidate, the
    forced no-op, in the candidate values.

    Shapes:
        - units: ``unit_type``, ``unit_local``, ``is_agent``, ``can_act``, ``emb_norm``,
          ``alive`` ``[U]``; ``pos`` ``[U, 2]``; ``features`` a list of ``U`` arrays
        - ``edges`` ``[2, E]`` (source unit, destination unit), every edge type of the
          state, those with a dead end included
        - agents: ``agents`` (their unit), ``order`` (decision rank), ``action`` (chosen
          slot), ``action_kind``, ``action_target`` (unit or ``-1``), ``chosen`` and
          ``greedy`` (candidate index) ``[n]``
        - candidates: ``cand_agent``, ``cand_slot``, ``cand_kind``, ``cand_target``,
          ``cand_value`` ``[C]``
    """

    type_names: Tuple[str, ...]
    kind_names: Tuple[str, ...]
    unit_type: np.ndarray
    unit_local: np.ndarray
    pos: np.ndarray
    is_agent: np.ndarray
    can_act: np.ndarray
    features: List[np.ndarray]
    emb_norm: np.ndarray
    edges: np.ndarray
    agents: np.ndarray
    order: np.ndarray
    action: np.ndarray
    action_kind: np.ndarray
    action_target: np.ndarray
    chosen: np.ndarray
    greedy: np.ndarray
    cand_agent: np.ndarray
    cand_slot: np.ndarray
    cand_kind: np.ndarray
    cand_target: np.ndarray
    cand_value: np.ndarray
    scene: Optional[Scene] = None
    step: int = 0
    """Step of the episode (0: its first state)."""
    reward: float = float("nan")
    """Reward of the step taken from this state (NaN where unknown)."""
    info: dict = field(default_factory=dict)
    alive: Optional[np.ndarray] = None
    """``[U]`` bool: the units that count (:attr:`UnitIndex.unit_alive
    <acegnn.graph.index.UnitIndex>`); all :obj:`True` when :obj:`None` is given (a task
    without alive flags)."""

    def __post_init__(self) -> None:
        U = int(np.asarray(self.unit_type).size)
        if self.alive is None:
            self.alive = np.ones(U, dtype=bool)
        else:
            self.alive = np.asarray(self.alive, dtype=bool)
            if self.alive.shape != (U,):
                raise ValueError(f"alive must have shape ({U},), one flag per unit "
                                 f"(got {self.alive.shape})")

    @property
    def num_units(self) -> int:
        return int(self.unit_type.size)

    @property
    def num_dead(self) -> int:
        """Units that are not alive (not drawn)."""
        return int((~self.alive).sum())

    @property
    def live_edges(self) -> np.ndarray:
        """``[E]`` bool: the edges whose two ends are alive, those that carry a message
        (the only ones drawn)."""
        return self.alive[self.edges[0]] & self.alive[self.edges[1]]

    @property
    def num_agents(self) -> int:
        return int(self.agents.size)

    def unit_name(self, u: int) -> str:
        """``"type j"``, e.g. ``"spider 1"``."""
        return f"{self.type_names[self.unit_type[u]]} {self.unit_local[u]}"

    def candidates_of(self, agent: int) -> np.ndarray:
        """Candidate indices of ``agent``, in slot order."""
        c = np.nonzero(self.cand_agent == agent)[0]
        return c[np.argsort(self.cand_slot[c], kind="stable")]

    def agents_by_order(self) -> np.ndarray:
        """Agents in the order they decided."""
        return np.argsort(self.order, kind="stable")


def circle_positions(index) -> Tensor:
    """Units of each graph on a unit circle, node types one after another: the layout of
    a task without positions.

    Args:
        index (UnitIndex): The batch's unit index (:func:`~acegnn.graph.unit_index`).

    Returns:
        ``[num_units, 2]`` positions in the flat unit order, on the index's device.
    """
    counts = index.unit_count.to(torch.float)
    local = torch.arange(index.num_units, device=index.unit_batch.device) - \
        index.unit_ptr[index.unit_batch]
    angle = 2 * torch.pi * local / counts[index.unit_batch].clamp(min=1)
    return torch.stack([torch.cos(angle), torch.sin(angle)], dim=1)


def frames(schema: GraphSchema, graphs: Batch, ro: Rollout, positions: Optional[Tensor] = None,
           scene: Optional[Scene] = None, noop: Optional[int] = None) -> List[Frame]:
    """One :class:`Frame` per state of ``graphs``, from the rollout ``ro`` made on them.

    Args:
        schema (GraphSchema): The task's schema.
        graphs (Batch): The states.
        ro (Rollout): A rollout on ``graphs`` valuing every candidate
            (``values="all"``, the default).
        positions (Tensor, optional): ``[num_units, 2]`` drawing positions in the flat
            unit order (a task's :meth:`~acegnn.envs.VecTask.unit_positions`); units on
            circles when :obj:`None`.
        scene (Scene, optional): The task's background.
        noop (int, optional): The task's no-op slot: an agent whose only available
            action it is is drawn as one that cannot act.

    Returns:
        One frame per graph. Its :attr:`Frame.alive` is the batch's
        :attr:`UnitIndex.unit_alive <acegnn.graph.index.UnitIndex>` (all :obj:`True`
        where the batch has no alive flags).

    Raises:
        ValueError: ``ro`` did not value every candidate, or ``positions`` has another
            shape.
    """
    idx = ro.encoded.index
    if bool((ro.greedy_ids < 0).any()):
        raise ValueError("frames need a rollout that valued every candidate of every agent "
                         "(values='all', no max_steps)")
    cpu = lambda t: t.detach().cpu()  # noqa: E731
    pos = cpu(circle_positions(idx) if positions is None else positions).float()
    if pos.shape != (idx.num_units, 2):
        raise ValueError(f"positions must have shape ({idx.num_units}, 2) (got {tuple(pos.shape)})")
    U = idx.num_units
    unit_type = torch.empty(U, dtype=torch.long)
    unit_local = torch.empty(U, dtype=torch.long)
    feats: List[Optional[np.ndarray]] = [None] * U
    for ti, t in enumerate(schema.node_types):
        rows = cpu(idx.flat[t])
        unit_type[rows] = ti
        local = torch.arange(rows.numel()) - cpu(graphs[t].ptr)[cpu(graphs[t].batch)]
        unit_local[rows] = local
        x = cpu(graphs[t].x).numpy()
        for r, f in zip(rows.tolist(), x):
            feats[r] = f
    src, dst = [], []
    for et in schema.edge_types:
        ei = cpu(graphs[et].edge_index)
        src.append(cpu(idx.flat[et[0]])[ei[0]])
        dst.append(cpu(idx.flat[et[2]])[ei[1]])
    src = torch.cat(src) if src else torch.zeros(0, dtype=torch.long)
    dst = torch.cat(dst) if dst else torch.zeros(0, dtype=torch.long)
    edge_graph = cpu(idx.unit_batch)[src]
    emb_norm = cpu(ro.encoded.units).norm(dim=1)
    alive = torch.ones(U, dtype=torch.bool) if idx.unit_alive is None else cpu(idx.unit_alive).bool()
    is_agent = torch.zeros(U, dtype=torch.bool)
    is_agent[cpu(idx.agents)] = True
    avail = cpu(idx.action_available)
    n_avail = torch.bincount(cpu(idx.action_agent)[avail], minlength=idx.num_agents)
    can_act = torch.ones(U, dtype=torch.bool)
    if noop is not None:
        only_noop = (n_avail == 1) & torch.zeros(idx.num_agents, dtype=torch.bool).index_put(
            (cpu(idx.action_agent)[avail & (cpu(idx.action_slot) == noop)],), torch.tensor(True))
        can_act[cpu(idx.agents)[only_noop]] = False
    valued = ~torch.isnan(cpu(ro.candidate_values))
    out = []
    agent_batch, ptr = cpu(idx.agent_batch), cpu(idx.unit_ptr)
    for g in range(idx.num_graphs):
        u0, u1 = int(ptr[g]), int(ptr[g + 1])
        agents = torch.nonzero(agent_batch == g).view(-1)
        a0 = int(agents[0]) if agents.numel() else 0
        cand = torch.nonzero(valued & (cpu(idx.action_batch) == g)).view(-1)
        pos_in_cand = torch.full((cpu(idx.action_kind).numel(),), -1, dtype=torch.long)
        pos_in_cand[cand] = torch.arange(cand.numel())
        target = cpu(idx.action_target)
        local_target = lambda rows: torch.where(target[rows] >= 0, target[rows] - u0, -1)  # noqa: E731
        chosen_rows = cpu(ro.action_ids)[agents]
        e = edge_graph == g
        out.append(Frame(
            type_names=tuple(schema.node_type_names),
            kind_names=tuple(k.name for k in schema.action_kinds),
            unit_type=unit_type[u0:u1].numpy(), unit_local=unit_local[u0:u1].numpy(),
            pos=pos[u0:u1].numpy(), is_agent=is_agent[u0:u1].numpy(),
            can_act=can_act[u0:u1].numpy(), features=feats[u0:u1],
            emb_norm=emb_norm[u0:u1].numpy(),
            edges=torch.stack([src[e] - u0, dst[e] - u0]).numpy(),
            agents=(cpu(idx.agents)[agents] - u0).numpy(),
            order=cpu(ro.rank)[agents].numpy(),
            action=cpu(ro.actions)[agents].numpy(),
            action_kind=cpu(idx.action_kind)[chosen_rows].numpy(),
            action_target=local_target(chosen_rows).numpy(),
            chosen=pos_in_cand[chosen_rows].numpy(),
            greedy=pos_in_cand[cpu(ro.greedy_ids)[agents]].numpy(),
            cand_agent=(cpu(idx.action_agent)[cand] - a0).numpy(),
            cand_slot=cpu(idx.action_slot)[cand].numpy(),
            cand_kind=cpu(idx.action_kind)[cand].numpy(),
            cand_target=local_target(cand).numpy(),
            cand_value=cpu(ro.candidate_values)[cand].numpy(),
            scene=scene, alive=alive[u0:u1].numpy()))
    return out

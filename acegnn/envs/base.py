"""The interface between environments and learners.

A :class:`VecTask` steps many environments at once and turns their observations into
graph batches. Observations are plain tensors (batch first), so the replay buffer can
hold them compactly and graphs are built only when a batch is sampled.
"""
from __future__ import annotations

import abc
from typing import Dict, NamedTuple, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.graph.schema import GraphSchema

ObsSpec = Dict[str, Tuple[Tuple[int, ...], torch.dtype]]


class Transition(NamedTuple):
    """One step of every environment."""

    reward: Tensor  # [num_envs] float
    terminated: Tensor  # [num_envs] bool: true end, no bootstrap
    truncated: Tensor  # [num_envs] bool: time limit, bootstrap from next_obs
    next_obs: Dict[str, Tensor]  # true next observations (before any auto-reset)


class VecTask(abc.ABC):
    """Vectorised cooperative multi-agent task whose states are graphs.

    Subclasses set :attr:`schema`, :attr:`num_envs`, :attr:`n_agents` and
    :attr:`obs_spec` and implement the methods below. Every state has
    :attr:`n_agents` agents; agent ``i`` of state ``b`` is row ``b * n_agents + i`` of
    the rollout's per-agent tensors.
    """

    schema: GraphSchema
    num_envs: int
    n_agents: int
    obs_spec: ObsSpec  # name -> (per-env shape, storage dtype)

    @abc.abstractmethod
    def observe(self) -> Dict[str, Tensor]:
        """Current observations ``{name: [num_envs, *shape]}``."""

    @abc.abstractmethod
    def step(self, actions: Tensor) -> Transition:
        """Step with ``[num_envs, n_agents]`` action ids; finished envs auto-reset."""

    @abc.abstractmethod
    def graphs(self, obs: Dict[str, Tensor]) -> Batch:
        """Graph batch of observations ``{name: [B, *shape]}``."""

    @abc.abstractmethod
    def state_dict(self) -> dict:
        """Everything needed to continue the same trajectories (for resume)."""

    @abc.abstractmethod
    def load_state_dict(self, state: dict) -> None:
        ...

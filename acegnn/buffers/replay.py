"""Uniform replay of transitions, held as preallocated tensors."""
from __future__ import annotations

from typing import Dict, NamedTuple, Optional

import torch
from torch import Tensor

from acegnn.envs.base import ObsSpec


class ReplaySample(NamedTuple):
    """A sample of transitions (batch first)."""

    obs: Dict[str, Tensor]
    actions: Tensor  # [B, n_agents] long
    reward: Tensor  # [B] float
    terminated: Tensor  # [B] bool (no bootstrap)
    next_obs: Dict[str, Tensor]


def _check_fits(name: str, value: Tensor, dtype: torch.dtype) -> None:
    """Refuse integer observations that the storage dtype of the ``obs_spec`` would wrap
    (e.g. a position of 200 stored as ``int8``)."""
    if dtype.is_floating_point or dtype == torch.bool or value.numel() == 0:
        return
    info = torch.iinfo(dtype)
    lo, hi = value.min().item(), value.max().item()
    if lo < info.min or hi > info.max:
        raise ValueError(f"{name} holds values in [{lo}, {hi}], which its storage dtype "
                         f"{dtype} cannot hold (range [{info.min}, {info.max}]); widen the "
                         f"task's obs_spec")


class ReplayBuffer:
    """Circular buffer of ``capacity`` transitions.

    Memory is allocated once: ``capacity x (2 x obs bytes + n_agents x 8 + 5)`` bytes
    (see :attr:`nbytes`). Observations keep the storage dtype of the task's
    ``obs_spec`` (e.g. int8 positions); graphs are built from a sample, not stored.

    Args:
        capacity (int): Maximum number of transitions; the oldest are overwritten.
        obs_spec (ObsSpec): ``{name: (shape, dtype)}`` of one observation.
        n_agents (int): Agents per transition.
    """

    def __init__(self, capacity: int, obs_spec: ObsSpec, n_agents: int) -> None:
        if not isinstance(capacity, int) or capacity <= 0:
            raise ValueError(f"capacity must be a positive int (got {capacity!r})")
        self.capacity, self.n_agents = capacity, n_agents
        self.obs_spec = dict(obs_spec)
        self.obs = {k: torch.zeros((capacity,) + tuple(s), dtype=d) for k, (s, d) in obs_spec.items()}
        self.next_obs = {k: torch.zeros_like(v) for k, v in self.obs.items()}
        self.actions = torch.zeros(capacity, n_agents, dtype=torch.long)
        self.reward = torch.zeros(capacity)
        self.terminated = torch.zeros(capacity, dtype=torch.bool)
        self.pos, self.size = 0, 0

    @property
    def nbytes(self) -> int:
        tensors = list(self.obs.values()) + list(self.next_obs.values()) + [
            self.actions, self.reward, self.terminated]
        return sum(t.numel() * t.element_size() for t in tensors)

    def __len__(self) -> int:
        return self.size

    def add(self, obs: Dict[str, Tensor], actions: Tensor, reward: Tensor, terminated: Tensor,
            next_obs: Dict[str, Tensor]) -> None:
        """Append ``N`` transitions (batch first)."""
        n = actions.size(0)
        if not bool(torch.isfinite(reward).all()):
            raise ValueError("reward has NaN or infinite values; refusing to store them")
        if actions.shape != (n, self.n_agents) or reward.shape != (n,) or terminated.shape != (n,):
            raise ValueError(f"expected actions [{n}, {self.n_agents}], reward and terminated [{n}] "
                             f"(got {tuple(actions.shape)}, {tuple(reward.shape)}, "
                             f"{tuple(terminated.shape)})")
        for k, (shape, dtype) in self.obs_spec.items():
            for name, o in (("obs", obs), ("next_obs", next_obs)):
                if k not in o or tuple(o[k].shape) != (n, *shape):
                    raise ValueError(f"{name}['{k}'] must have shape {(n, *shape)} "
                                     f"(got {tuple(o[k].shape) if k in o else 'nothing'})")
                _check_fits(f"{name}['{k}']", o[k], dtype)
        if n > self.capacity:  # only the newest rows fit
            keep = slice(n - self.capacity, n)
            obs = {k: v[keep] for k, v in obs.items()}
            next_obs = {k: v[keep] for k, v in next_obs.items()}
            actions, reward, terminated = actions[keep], reward[keep], terminated[keep]
            self.pos = (self.pos + n - self.capacity) % self.capacity
            n = self.capacity
        idx = (self.pos + torch.arange(n)) % self.capacity
        for k in self.obs:
            self.obs[k][idx] = obs[k].to(self.obs[k].dtype).cpu()
            self.next_obs[k][idx] = next_obs[k].to(self.next_obs[k].dtype).cpu()
        self.actions[idx] = actions.cpu().long()
        self.reward[idx] = reward.cpu().float()
        self.terminated[idx] = terminated.cpu().bool()
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator: Optional[torch.Generator] = None) -> ReplaySample:
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = torch.randint(self.size, (batch_size,), generator=generator)
        return ReplaySample({k: v[idx] for k, v in self.obs.items()}, self.actions[idx], self.reward[idx],
                     self.terminated[idx], {k: v[idx] for k, v in self.next_obs.items()})

    def state_dict(self) -> dict:
        n = self.size
        return {"capacity": self.capacity, "pos": self.pos, "size": n,
                "obs": {k: v[:n].clone() for k, v in self.obs.items()},
                "next_obs": {k: v[:n].clone() for k, v in self.next_obs.items()},
                "actions": self.actions[:n].clone(), "reward": self.reward[:n].clone(),
                "terminated": self.terminated[:n].clone()}

    def load_state_dict(self, state: dict) -> None:
        """Restore a saved buffer. A buffer of another capacity may take a saved one that
        never wrapped around and whose rows fit (a run resumed with a changed sample
        budget); the rows keep their places, so sampling continues exactly as in a buffer
        that had had this capacity from the start."""
        resized = state["size"] < state["capacity"] and state["size"] <= self.capacity
        if state["capacity"] != self.capacity and not resized:
            raise ValueError(f"checkpoint buffer capacity {state['capacity']} differs from "
                             f"{self.capacity} and its {state['size']} transitions "
                             f"{'wrapped around' if state['size'] >= state['capacity'] else 'do not fit'}")
        n = state["size"]
        for k in self.obs:
            self.obs[k][:n] = state["obs"][k]
            self.next_obs[k][:n] = state["next_obs"][k]
        self.actions[:n], self.reward[:n] = state["actions"], state["reward"]
        self.terminated[:n] = state["terminated"]
        self.pos, self.size = state["pos"] % self.capacity, n

r"""Replay of transitions, held as preallocated tensors, sampled uniformly or in
proportion to a priority, and the window that turns each environment's steps into
``n``-step transitions before they are stored.

An ``n``-step transition of step :math:`t` (``algo.nstep``) holds

.. math::
    R_t = \sum_{k<m} \gamma^k r_{t+k}, \qquad
    \text{discount}_t = \begin{cases} 0 & \text{the episode terminated at } t+m-1 \\
                                      \gamma^m & \text{otherwise} \end{cases}

and the state :math:`s_{t+m}` to bootstrap from, with :math:`m = n`, or fewer where
the episode ended first (terminated, truncated at a time limit, or lost with its engine),
beside :math:`s_{t+1}` (auxiliary losses read it).
"""
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
    terminated: Tensor  # [B] bool: s_{t+1} is terminal
    next_obs: Dict[str, Tensor]  # s_{t+1}
    boot_obs: Optional[Dict[str, Tensor]] = None  # s_{t+m} (nstep > 1 only)
    discount: Optional[Tensor] = None  # [B] float: gamma^m, or 0 (nstep > 1 only)
    index: Optional[Tensor] = None  # [B] long: the rows drawn (prioritized replay only)
    weight: Optional[Tensor] = None  # [B] float: importance-sampling weights (prioritized only)


def _check_obs(obs_spec: ObsSpec, n: int, named: Dict[str, Dict[str, Tensor]]) -> None:
    """Refuse observations of ``n`` rows that do not fit ``obs_spec`` (``named``:
    ``{"obs": obs, ...}``, for the messages)."""
    for k, (shape, dtype) in obs_spec.items():
        for name, o in named.items():
            if k not in o or tuple(o[k].shape) != (n, *shape):
                raise ValueError(f"{name}['{k}'] must have shape {(n, *shape)} "
                                 f"(got {tuple(o[k].shape) if k in o else 'nothing'})")
            _check_fits(f"{name}['{k}']", o[k], dtype)


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
    r"""Circular buffer of ``capacity`` transitions, sampled uniformly or, with
    ``alpha > 0``, in proportion to a priority (Schaul et al., 2016, proportional
    variant).

    Prioritized: row :math:`i` has a priority :math:`p_i` (a new row the largest
    given so far, 1 before any; :attr:`priority` holds :math:`p_i^\alpha`) and is drawn
    with probability
    :math:`P(i) = p_i^\alpha / \sum_j p_j^\alpha`, one draw in each of ``B`` equal
    slices of the cumulative sum (stratified); the sample's importance-sampling weights
    are :math:`w_i = (N P(i))^{-\beta} / \max_j (N P(j))^{-\beta}` over the ``N``
    rows held, so that every weight is at most 1. :meth:`update_priorities` sets the
    priorities of drawn rows, :math:`p_i = |\delta_i| + \epsilon`.

    Memory is allocated once: ``capacity x (2 x obs bytes + n_agents x 8 + 5)`` bytes,
    with ``nstep > 1`` another ``obs bytes + 4`` per transition (see :attr:`nbytes`).
    Observations keep the storage dtype of the task's ``obs_spec`` (e.g. int8
    positions); graphs are built from a sample, not stored.

    Args:
        capacity (int): Maximum number of transitions; the oldest are overwritten.
        obs_spec (ObsSpec): ``{name: (shape, dtype)}`` of one observation.
        n_agents (int): Agents per transition.
        nstep (int, optional): With ``nstep > 1`` every transition also holds the state
            it bootstraps from and its discount (:class:`NStepWindow`). (default: :obj:`1`)
        alpha (float, optional): The priority exponent; 0 draws uniformly (and keeps no
            priorities). (default: :obj:`0.0`)
        priority_eps (float, optional): :math:`\epsilon`, added to every priority's
            absolute TD error, so that no row becomes impossible to draw.
            (default: :obj:`1e-6`)
    """

    def __init__(self, capacity: int, obs_spec: ObsSpec, n_agents: int, nstep: int = 1,
                 alpha: float = 0.0, priority_eps: float = 1e-6) -> None:
        if not isinstance(capacity, int) or capacity <= 0:
            raise ValueError(f"capacity must be a positive int (got {capacity!r})")
        if not alpha >= 0 or not priority_eps > 0:
            raise ValueError(f"the priority exponent must be >= 0 and its epsilon > 0 "
                             f"(got {alpha!r}, {priority_eps!r})")
        self.capacity, self.n_agents, self.nstep = capacity, n_agents, nstep
        self.alpha, self.priority_eps = float(alpha), float(priority_eps)
        # prioritized: each row's p_i^alpha (float64: their cumulative sum is drawn from),
        # and the largest p_i given so far
        self.priority: Optional[Tensor] = None
        self.max_priority = 1.0
        if alpha > 0:
            self.priority = torch.zeros(capacity, dtype=torch.float64)
        self.obs_spec = dict(obs_spec)
        self.obs = {k: torch.zeros((capacity,) + tuple(s), dtype=d) for k, (s, d) in obs_spec.items()}
        self.next_obs = {k: torch.zeros_like(v) for k, v in self.obs.items()}
        self.actions = torch.zeros(capacity, n_agents, dtype=torch.long)
        self.reward = torch.zeros(capacity)
        self.terminated = torch.zeros(capacity, dtype=torch.bool)
        self.boot_obs: Optional[Dict[str, Tensor]] = None
        self.discount: Optional[Tensor] = None
        if nstep > 1:
            self.boot_obs = {k: torch.zeros_like(v) for k, v in self.obs.items()}
            self.discount = torch.zeros(capacity)
        self.pos, self.size = 0, 0

    @property
    def nbytes(self) -> int:
        tensors = list(self.obs.values()) + list(self.next_obs.values()) + [
            self.actions, self.reward, self.terminated]
        if self.boot_obs is not None:
            tensors += list(self.boot_obs.values()) + [self.discount]
        if self.priority is not None:
            tensors.append(self.priority)
        return sum(t.numel() * t.element_size() for t in tensors)

    def __len__(self) -> int:
        return self.size

    def add(self, obs: Dict[str, Tensor], actions: Tensor, reward: Tensor, terminated: Tensor,
            next_obs: Dict[str, Tensor], boot_obs: Optional[Dict[str, Tensor]] = None,
            discount: Optional[Tensor] = None) -> None:
        """Append ``N`` transitions (batch first); ``boot_obs`` and ``discount`` are
        given exactly when the buffer was made with ``nstep > 1``."""
        n = actions.size(0)
        if not bool(torch.isfinite(reward).all()):
            raise ValueError("reward has NaN or infinite values; refusing to store them")
        if actions.shape != (n, self.n_agents) or reward.shape != (n,) or terminated.shape != (n,):
            raise ValueError(f"expected actions [{n}, {self.n_agents}], reward and terminated [{n}] "
                             f"(got {tuple(actions.shape)}, {tuple(reward.shape)}, "
                             f"{tuple(terminated.shape)})")
        named = {"obs": obs, "next_obs": next_obs}
        if (boot_obs is None) != (self.boot_obs is None) or (discount is None) != (self.discount is None):
            raise ValueError(f"a buffer of nstep={self.nstep} takes boot_obs and discount "
                             f"{'with' if self.nstep > 1 else 'without'} its transitions")
        if boot_obs is not None:
            named["boot_obs"] = boot_obs
            if discount.shape != (n,):
                raise ValueError(f"expected discount [{n}] (got {tuple(discount.shape)})")
        _check_obs(self.obs_spec, n, named)
        rows = {"actions": actions, "reward": reward, "terminated": terminated, "discount": discount}
        if n > self.capacity:  # only the newest rows fit
            keep = slice(n - self.capacity, n)
            named = {name: {k: v[keep] for k, v in o.items()} for name, o in named.items()}
            rows = {name: v[keep] if v is not None else None for name, v in rows.items()}
            self.pos = (self.pos + n - self.capacity) % self.capacity
            n = self.capacity
        idx = (self.pos + torch.arange(n)) % self.capacity
        for name, o in named.items():
            store = getattr(self, name)
            for k in store:
                store[k][idx] = o[k].to(store[k].dtype).cpu()
        self.actions[idx] = rows["actions"].cpu().long()
        self.reward[idx] = rows["reward"].cpu().float()
        self.terminated[idx] = rows["terminated"].cpu().bool()
        if self.discount is not None:
            self.discount[idx] = rows["discount"].cpu().float()
        if self.priority is not None:
            self.priority[idx] = self.max_priority ** self.alpha
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator: Optional[torch.Generator] = None,
               beta: float = 1.0) -> ReplaySample:
        """``batch_size`` transitions drawn with replacement: uniformly, or (``alpha >
        0``) by priority with their importance-sampling weights for exponent ``beta``
        and the rows drawn, for :meth:`update_priorities`."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        weight = None
        if self.priority is None:
            idx = torch.randint(self.size, (batch_size,), generator=generator)
        else:
            p = self.priority[:self.size]
            cdf = torch.cumsum(p, 0)
            total = cdf[-1]
            # one draw in each of batch_size equal slices of [0, total)
            u = (torch.arange(batch_size, dtype=torch.float64)
                 + torch.rand(batch_size, generator=generator, dtype=torch.float64))
            idx = torch.searchsorted(cdf, u * (total / batch_size), right=True)
            idx = idx.clamp(max=self.size - 1)  # (u * total rounded up to total)
            # w_i / max_j w_j = (P(i) / min_j P(j))^-beta
            weight = ((p[idx] / p.min()) ** -beta).float()
        pick = lambda d: None if d is None else {k: v[idx] for k, v in d.items()}  # noqa: E731
        return ReplaySample(pick(self.obs), self.actions[idx], self.reward[idx],
                            self.terminated[idx], pick(self.next_obs), pick(self.boot_obs),
                            None if self.discount is None else self.discount[idx],
                            None if weight is None else idx, weight)

    def update_priorities(self, index: Tensor, td_error: Tensor) -> None:
        """Set the priorities of the rows ``index`` (``[B]``, as :meth:`sample` gave
        them) to ``|td_error| + epsilon``; of a row drawn twice, the last one counts."""
        if self.priority is None:
            raise ValueError("a uniform replay buffer (alpha=0) keeps no priorities")
        if index.shape != td_error.shape or index.dim() != 1:
            raise ValueError(f"expected index and td_error [B] of one shape "
                             f"(got {tuple(index.shape)}, {tuple(td_error.shape)})")
        if not bool(torch.isfinite(td_error).all()):
            raise ValueError("td_error has NaN or infinite values; refusing them as priorities")
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= self.size):
            raise ValueError(f"index holds rows outside the {self.size} held")
        p = td_error.detach().to("cpu", torch.float64).abs() + self.priority_eps
        self.priority[index.cpu()] = p ** self.alpha
        if p.numel():
            self.max_priority = max(self.max_priority, float(p.max()))

    def state_dict(self) -> dict:
        n = self.size
        out = {"capacity": self.capacity, "pos": self.pos, "size": n,
               "obs": {k: v[:n].clone() for k, v in self.obs.items()},
               "next_obs": {k: v[:n].clone() for k, v in self.next_obs.items()},
               "actions": self.actions[:n].clone(), "reward": self.reward[:n].clone(),
               "terminated": self.terminated[:n].clone()}
        if self.boot_obs is not None:
            out["boot_obs"] = {k: v[:n].clone() for k, v in self.boot_obs.items()}
            out["discount"] = self.discount[:n].clone()
        if self.priority is not None:
            out["priority"], out["max_priority"] = self.priority[:n].clone(), self.max_priority
            out["priority_power"] = self.alpha  # (the rows hold p_i^alpha)
        return out

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
        if ("boot_obs" in state) != (self.boot_obs is not None):
            raise ValueError(f"checkpoint buffer {'holds' if 'boot_obs' in state else 'lacks'} "
                             f"n-step transitions; this one has nstep={self.nstep}")
        n = state["size"]
        for k in self.obs:
            self.obs[k][:n] = state["obs"][k]
            self.next_obs[k][:n] = state["next_obs"][k]
            if self.boot_obs is not None:
                self.boot_obs[k][:n] = state["boot_obs"][k]
        self.actions[:n], self.reward[:n] = state["actions"], state["reward"]
        self.terminated[:n] = state["terminated"]
        if self.discount is not None:
            self.discount[:n] = state["discount"]
        if self.priority is not None:  # (a uniform buffer's rows: each at priority 1)
            saved = state.get("priority", torch.ones(n, dtype=torch.float64))
            # a checkpoint of commit 15f681c held p_i itself
            power = state.get("priority_power", 1.0 if "priority" in state else self.alpha)
            self.priority[:n] = saved ** (self.alpha / power)
            self.max_priority = state.get("max_priority", 1.0)
        self.pos, self.size = state["pos"] % self.capacity, n


class NStepRows(NamedTuple):
    """``N`` completed ``n``-step transitions (batch first), as
    :meth:`ReplayBuffer.add` takes them."""

    obs: Dict[str, Tensor]  # s_t
    actions: Tensor  # [N, n_agents]
    reward: Tensor  # [N] R_t, the discounted reward of m steps
    terminated: Tensor  # [N] s_{t+1} is terminal
    next_obs: Dict[str, Tensor]  # s_{t+1}
    boot_obs: Dict[str, Tensor]  # s_{t+m}
    discount: Tensor  # [N] gamma^m, or 0 when the episode terminated within the m steps


class NStepWindow:
    r"""Per environment, the last steps whose ``n``-step transition is not complete yet
    (at most ``nstep - 1`` of them between calls); every step leaves it exactly once, as
    an ``n``-step transition (module docstring).

    :meth:`push` adds a step of some environments and returns the transitions it
    completes: the oldest pending step of an environment once ``nstep`` steps are
    pending, and every pending one of an environment whose episode ended at this step
    (terminated: discount 0; truncated at a time limit: discount
    :math:`\gamma^m`, bootstrapping from the true last ``next_obs``). :meth:`flush` ends
    environments' chains where no next step will follow (a dropped step, an engine
    restarted on resume): their pending steps bootstrap from their last ``next_obs``
    as at a time limit.

    Args:
        nstep (int): Steps of the return (``> 1``).
        gamma (float): Discount per step.
        num_envs (int): Environments.
        obs_spec (ObsSpec): ``{name: (shape, dtype)}`` of one observation.
        n_agents (int): Agents per step.
    """

    def __init__(self, nstep: int, gamma: float, num_envs: int, obs_spec: ObsSpec,
                 n_agents: int) -> None:
        if not isinstance(nstep, int) or nstep < 2:
            raise ValueError(f"an n-step window needs nstep >= 2 (got {nstep!r})")
        self.nstep, self.gamma, self.num_envs = nstep, gamma, num_envs
        self.obs_spec = dict(obs_spec)
        shape = (num_envs, nstep)  # [E, n]: slot 0 holds an environment's oldest pending step
        self.obs = {k: torch.zeros(shape + tuple(s), dtype=d) for k, (s, d) in obs_spec.items()}
        self.next_obs = {k: torch.zeros_like(v) for k, v in self.obs.items()}
        self.actions = torch.zeros(shape + (n_agents,), dtype=torch.long)
        self.reward = torch.zeros(shape)
        self.count = torch.zeros(num_envs, dtype=torch.long)  # pending steps per environment
        # gamma^k, k = 0..n, computed once in double precision
        self.powers = (gamma ** torch.arange(nstep + 1, dtype=torch.float64)).float()

    def __len__(self) -> int:
        return int(self.count.sum())

    def push(self, env: Tensor, obs: Dict[str, Tensor], actions: Tensor, reward: Tensor,
             terminated: Tensor, truncated: Tensor, next_obs: Dict[str, Tensor]) -> NStepRows:
        """Add one step of the environments ``env`` (``[k]``, distinct; the other
        arguments batch first, ``k`` rows) and return the transitions it completes."""
        k = env.size(0)
        if actions.shape != (k, self.actions.size(2)) or reward.shape != (k,) \
                or terminated.shape != (k,) or truncated.shape != (k,):
            raise ValueError(f"expected actions [{k}, {self.actions.size(2)}], reward, "
                             f"terminated and truncated [{k}] (got {tuple(actions.shape)}, "
                             f"{tuple(reward.shape)}, {tuple(terminated.shape)}, "
                             f"{tuple(truncated.shape)})")
        if not bool(torch.isfinite(reward).all()):
            raise ValueError("reward has NaN or infinite values; refusing to store them")
        _check_obs(self.obs_spec, k, {"obs": obs, "next_obs": next_obs})
        env = env.long().cpu()
        slot = self.count[env]  # [k] where the new step goes (< nstep)
        for name, o in (("obs", obs), ("next_obs", next_obs)):
            store = getattr(self, name)
            for key in store:
                store[key][env, slot] = o[key].to(store[key].dtype).cpu()
        self.actions[env, slot] = actions.cpu().long()
        self.reward[env, slot] = reward.cpu().float()
        self.count[env] += 1
        terminated = terminated.cpu().bool()
        ended = terminated | truncated.cpu().bool()
        full = self.count[env] == self.nstep
        take = torch.where(ended, self.count[env], full.long())  # [k] steps completed
        return self._emit(env, take, terminated)

    def flush(self, env: Tensor) -> NStepRows:
        """Complete every pending step of the environments ``env`` (``[k]``, distinct),
        bootstrapping from their last ``next_obs`` with :math:`\\gamma^m`."""
        env = env.long().cpu()
        return self._emit(env, self.count[env], torch.zeros(env.size(0), dtype=torch.bool))

    def _emit(self, env: Tensor, take: Tensor, terminated: Tensor) -> NStepRows:
        """The transitions of the ``take`` oldest pending steps of each ``env``, whose
        chains end at the newest pending step (terminal where ``terminated``); they
        leave the window."""
        count = self.count[env]
        row_env = env.repeat_interleave(take)  # [N]
        first = torch.cumsum(take, 0) - take  # [k] the first row of each env
        i = torch.arange(row_env.size(0)) - first.repeat_interleave(take)  # [N] slot
        last = (count - 1).clamp(min=0).repeat_interleave(take)  # [N] the chain's newest slot
        m = last - i + 1  # [N] steps of each return
        j = torch.arange(self.nstep)
        later = (i.unsqueeze(1) + j).clamp(max=self.nstep - 1)  # [N, n] slots i, i+1, ...
        rewards = self.reward[row_env.unsqueeze(1), later] * (j < m.unsqueeze(1))  # [N, n]
        ret = (rewards * self.powers[:self.nstep]).sum(1)
        ends = terminated.repeat_interleave(take)
        discount = torch.where(ends, torch.zeros(()), self.powers[m])
        rows = NStepRows(
            obs={k: v[row_env, i] for k, v in self.obs.items()}, actions=self.actions[row_env, i],
            reward=ret, terminated=ends & (i == last),
            next_obs={k: v[row_env, i] for k, v in self.next_obs.items()},
            boot_obs={k: v[row_env, last] for k, v in self.next_obs.items()}, discount=discount)
        # the steps left move to the front of their environment's window
        src = (j + take.unsqueeze(1)).clamp(max=self.nstep - 1)  # [k, n]
        for store in (self.obs, self.next_obs, {"actions": self.actions, "reward": self.reward}):
            for v in store.values():
                v[env] = v[env.unsqueeze(1), src]
        self.count[env] = count - take
        return rows

    def state_dict(self) -> dict:
        return {"nstep": self.nstep, "count": self.count.clone(),
                "obs": {k: v.clone() for k, v in self.obs.items()},
                "next_obs": {k: v.clone() for k, v in self.next_obs.items()},
                "actions": self.actions.clone(), "reward": self.reward.clone()}

    def load_state_dict(self, state: dict) -> None:
        if state["nstep"] != self.nstep or state["count"].shape != self.count.shape:
            raise ValueError(f"checkpoint n-step window of nstep={state['nstep']} and "
                             f"{state['count'].numel()} environments does not fit this one "
                             f"(nstep={self.nstep}, {self.num_envs} environments)")
        self.count = state["count"].clone()
        for k in self.obs:
            self.obs[k].copy_(state["obs"][k])
            self.next_obs[k].copy_(state["next_obs"][k])
        self.actions.copy_(state["actions"])
        self.reward.copy_(state["reward"])

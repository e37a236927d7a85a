r"""ACE-DQN: Q-learning on the sequentially expanded MDP (paper Eq. 1).

Every SE-state :math:`s_{a_{1:i}}` of a replayed transition regresses to its own
Bellman target:

.. math::
    \hat V(s_{a_{1:i}}) =
    \begin{cases}
        \gamma_{se} \max_{a_{i+1}} V'(s_{a_{1:i}, a_{i+1}}) & i < n \\
        r + \gamma (1 - d) \max_{a_1} V'(s'_{a_1}) & i = n
    \end{cases}

with :math:`V'` the target network, :math:`d` the termination flag (not set at a time
limit), and :math:`\gamma_{se} = \gamma` as in the paper's Eq. 1 or ``1`` when
``intermediate_discount`` is off. With ``double_q`` the online network selects the
maximising action and the target network values it.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Dict, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.graph.schema import GraphSchema
from acegnn.nn.ace import ACENetwork, ModelConfig
from acegnn.nn.rollout import Rollout

OPTIMIZERS = {"adam": torch.optim.Adam, "rmsprop": torch.optim.RMSprop}
LOSSES = {"mse": F.mse_loss, "huber": F.smooth_l1_loss}
ORDERS = ("default", "random")


@dataclass
class ACEDQNConfig:
    """Hyper-parameters of ACE-DQN (defaults: the paper's Spiders-and-Fly table)."""

    name: str = "ace_dqn"
    lr: float = 5e-4
    """Learning rate."""
    optimizer: str = "adam"
    """``adam`` or ``rmsprop``."""
    weight_decay: float = 0.0
    """L2 weight decay of the optimiser."""
    grad_clip: float = 10.0
    """Max gradient norm (0 turns clipping off)."""
    gamma: float = 0.99
    """Discount per environment step."""
    intermediate_discount: bool = True
    """Discount between SE-states of one step as in Eq. 1 (False: no discount there)."""
    double_q: bool = False
    """Online network selects, target network evaluates."""
    target_theta: float = 0.02
    """Polyak momentum of the target network, applied after every update."""
    loss: str = "mse"
    """``mse`` or ``huber``."""
    order: str = "default"
    """Agent order: ``default`` (fixed) or ``random`` (shuffled per sample, for both
    collection and training)."""

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"algo.optimizer must be one of {sorted(OPTIMIZERS)} (got {self.optimizer!r})")
        if self.loss not in LOSSES:
            raise ValueError(f"algo.loss must be one of {sorted(LOSSES)} (got {self.loss!r})")
        if self.order not in ORDERS:
            raise ValueError(f"algo.order must be one of {list(ORDERS)} (got {self.order!r})")
        for key in ("gamma", "target_theta"):
            v = getattr(self, key)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"algo.{key} must be in [0, 1] (got {v})")
        if self.lr <= 0:
            raise ValueError(f"algo.lr must be positive (got {self.lr})")


class TDTargets(NamedTuple):
    """Per-agent values and Bellman targets of a replayed batch."""

    value: Tensor  # [num_agents] V(s_{a_1:i}) of the online network (with grad)
    target: Tensor  # [num_agents] Eq. 1 target (no grad)
    online: Rollout  # teacher-forced online rollout on s


class ACEDQN:
    """The ACE-DQN learner: value network, target network, optimiser.

    Args:
        schema (GraphSchema): The task's schema.
        cfg (ACEDQNConfig): Algorithm hyper-parameters.
        model (ModelConfig): Network hyper-parameters.
        device (str or torch.device, optional): (default: :obj:`"cpu"`)
    """

    def __init__(self, schema: GraphSchema, cfg: ACEDQNConfig, model: ModelConfig,
                 device="cpu") -> None:
        self.cfg, self.device = cfg, torch.device(device)
        self.net = ACENetwork.from_config(schema, model).to(self.device)
        self.target_net = copy.deepcopy(self.net)
        for p in self.target_net.parameters():
            p.requires_grad_(False)
        self.optimizer = OPTIMIZERS[cfg.optimizer](
            self.net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self._checked = False  # inputs are validated until one batch has passed

    def _check(self) -> bool:
        """Validate the first batch against the schema; a task's later batches share its
        builder, so skipping the checks then saves about a third of a rollout's time."""
        first, self._checked = not self._checked, True
        return first

    # Acting ---------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, graphs: Batch, epsilon: float = 0.0,
            generator: Optional[torch.Generator] = None) -> Tensor:
        """Sequential epsilon-greedy decision; ``[num_agents]`` action ids."""
        return self.net.rollout(graphs.to(self.device), order=self.cfg.order, epsilon=epsilon,
                                generator=generator, check=self._check()).actions

    # Learning -------------------------------------------------------------------------
    def td_targets(self, graphs: Batch, actions: Tensor, reward: Tensor, terminated: Tensor,
                   next_graphs: Batch, generator: Optional[torch.Generator] = None) -> TDTargets:
        """Values of the replayed SE-states and their Eq. 1 targets.

        Args:
            graphs: states ``s``; ``actions`` ``[num_agents]`` the joint actions taken;
            reward, terminated: ``[num_graphs]``; next_graphs: states ``s'``.
        """
        cfg = self.cfg
        graphs, next_graphs = graphs.to(self.device), next_graphs.to(self.device)
        check = self._check()
        online = self.net.rollout(graphs, order=cfg.order, actions=actions, generator=generator,
                                  check=check)
        with torch.no_grad():
            target = self.target_net.rollout(graphs, order=online.rank, actions=actions,
                                             check=False)
            next_t = self.target_net.rollout(next_graphs, order=cfg.order, max_steps=1,
                                             generator=generator, check=check)
            nxt = online.next_agent.clamp(min=0)
            first = next_t.first_agent[online.encoded.index.agent_batch]  # s' agent 1 per agent
            if cfg.double_q:
                next_o = self.net.rollout(next_graphs, order=next_t.rank, max_steps=1, check=False)
                inner = target.candidate_values[online.greedy_ids[nxt]]
                boot = next_t.candidate_values[next_o.greedy_ids[first]]
            else:
                inner = target.max_value[nxt]
                boot = next_t.max_value[first]
            b = online.encoded.index.agent_batch
            reward, terminated = reward.to(self.device), terminated.to(self.device)
            last = reward[b] + cfg.gamma * (~terminated[b]).to(boot.dtype) * boot
            gamma_se = cfg.gamma if cfg.intermediate_discount else 1.0
            td_target = torch.where(online.next_agent >= 0, gamma_se * inner, last)
        return TDTargets(online.chosen_value, td_target, online)

    def update(self, graphs: Batch, actions: Tensor, reward: Tensor, terminated: Tensor,
               next_graphs: Batch, generator: Optional[torch.Generator] = None) -> Dict[str, float]:
        """One gradient step on a replayed batch, then the Polyak target update."""
        try:
            td = self.td_targets(graphs, actions, reward, terminated, next_graphs, generator)
        except FloatingPointError as e:
            raise FloatingPointError(f"the TD loss is NaN: {e}") from None
        td_loss = LOSSES[self.cfg.loss](td.value, td.target)
        if not bool(torch.isfinite(td_loss)):
            raise FloatingPointError(f"the TD loss is {float(td_loss)}; stopping before the "
                                     f"network is corrupted (lower algo.lr or check rewards)")
        self.optimizer.zero_grad(set_to_none=True)
        td_loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.net.parameters(), self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf"))
        self.optimizer.step()
        self.soft_update()
        return {"td_loss": td_loss.item(), "q_mean": td.value.detach().mean().item(),
                "target_mean": float(td.target.mean()), "grad_norm": float(grad_norm)}

    @torch.no_grad()
    def soft_update(self) -> None:
        theta = self.cfg.target_theta
        for p, tp in zip(self.net.parameters(), self.target_net.parameters()):
            tp.lerp_(p, theta)

    # Checkpointing --------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"net": self.net.state_dict(), "target_net": self.target_net.state_dict(),
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        try:
            self.net.load_state_dict(state["net"])
            self.target_net.load_state_dict(state["target_net"])
        except RuntimeError as e:
            raise ValueError(f"the checkpoint does not match this model: {e}") from None
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])

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

from dataclasses import dataclass
from typing import Dict, NamedTuple, Optional

import torch
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.algos.base import QLearner, QLearningConfig
from acegnn.graph.schema import GraphSchema
from acegnn.nn.ace import ACENetwork, ModelConfig
from acegnn.nn.rollout import Rollout
from acegnn.nn.selectors import EpsilonGreedy, Forced

ORDERS = ("default", "random", "sorted")


@dataclass
class ACEDQNConfig(QLearningConfig):
    """Hyper-parameters of ACE-DQN (defaults: the paper's Spiders-and-Fly table)."""

    name: str = "ace_dqn"
    intermediate_discount: bool = True
    """Discount between SE-states of one step as in Eq. 1 (False: no discount there)."""
    order: str = "default"
    """Agent order: ``default`` (the graph's), ``random`` (shuffled per sample, for both
    collection and training) or ``sorted`` (by a key the task gives each agent; battles:
    unit type, then position)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.order not in ORDERS:
            raise ValueError(f"algo.order must be one of {list(ORDERS)} (got {self.order!r})")


class TDTargets(NamedTuple):
    """Per-agent values and Bellman targets of a replayed batch."""

    value: Tensor  # [num_agents] V(s_{a_1:i}) of the online network (with grad)
    target: Tensor  # [num_agents] Eq. 1 target (no grad)
    online: Rollout  # teacher-forced online rollout on s


class ACEDQN(QLearner):
    """The ACE-DQN learner: value network, target network, optimiser.

    Args:
        schema (GraphSchema): The task's schema.
        cfg (ACEDQNConfig): Algorithm hyper-parameters.
        model (ModelConfig): Network hyper-parameters.
        device (str or torch.device, optional): (default: :obj:`"cpu"`)
    """

    config_class = ACEDQNConfig
    model_class = ModelConfig

    def __init__(self, schema: GraphSchema, cfg: ACEDQNConfig, model: ModelConfig,
                 device="cpu", example: Optional[Batch] = None) -> None:
        super().__init__(ACENetwork.from_config(schema, model), cfg, device)
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
        return self.net.rollout(self.on_device(graphs), order=self.cfg.order,
                                selector=EpsilonGreedy(epsilon), generator=generator,
                                check=self._check()).actions

    @torch.no_grad()
    def decide(self, graphs: Batch, generator: Optional[torch.Generator] = None) -> Rollout:
        """The greedy decision with every candidate valued, as :meth:`act` with
        ``epsilon=0`` decides (for drawing it, :mod:`acegnn.viz`)."""
        return self.net.rollout(self.on_device(graphs), order=self.cfg.order,
                                generator=generator, check=self._check())

    # Learning -------------------------------------------------------------------------
    def td_targets(self, graphs: Batch, actions: Tensor, reward: Tensor, terminated: Tensor,
                   next_graphs: Batch, generator: Optional[torch.Generator] = None) -> TDTargets:
        """Values of the replayed SE-states and their Eq. 1 targets.

        Args:
            graphs: states ``s``; ``actions`` ``[num_agents]`` the joint actions taken;
            reward, terminated: ``[num_graphs]``; next_graphs: states ``s'``.
        """
        cfg = self.cfg
        graphs, next_graphs = self.on_device(graphs), self.on_device(next_graphs)
        check = self._check()
        # Only double-Q needs the online values of the other candidates.
        forced = Forced(actions)
        online = self.net.rollout(graphs, order=cfg.order, selector=forced, generator=generator,
                                  check=check, values="all" if cfg.double_q else "chosen")
        if online.rank.numel() == 0:
            raise ValueError("no state of the batch has an agent: nothing to learn from")
        with torch.no_grad():
            target = self.target_net.rollout(graphs, order=online.rank, selector=forced,
                                             check=False, values="successors")
            next_t = self.target_net.rollout(next_graphs, order=cfg.order, max_steps=1,
                                             generator=generator, check=check)
            nxt = online.next_agent.clamp(min=0)
            b = online.encoded.index.agent_batch
            first = next_t.first_agent[b]  # the first agent of s', per agent of s
            has_first = first >= 0
            first = first.clamp(min=0)
            if cfg.double_q:
                next_o = self.net.rollout(next_graphs, order=next_t.rank, max_steps=1, check=False)
                inner = target.candidate_values[online.greedy_ids[nxt]]
                boot = next_t.candidate_values[next_o.greedy_ids[first]] if next_t.rank.numel() else None
            else:
                inner = target.max_value[nxt]
                boot = next_t.max_value[first] if next_t.rank.numel() else None
            # s' without agents (every unit gone): bootstrap from V'(s') of the bare state
            if boot is None or not bool(has_first.all()):
                bare = self.target_net.value(next_t.final_units, next_t.encoded)[b]
                boot = bare if boot is None else torch.where(has_first, boot, bare)
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
        td_loss = self.td_loss(td.value, td.target)
        return {"td_loss": td_loss.item(), "q_mean": td.value.detach().mean().item(),
                "target_mean": td.target.mean().item(), **self.step(td_loss)}

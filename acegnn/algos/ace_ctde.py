r"""ACE-CTDE: ACE-DQN with an individual value per agent for decentralised execution
(paper "Apply ACE to the CTDE scheme", Appendix "ACE-CTDE").

Training is ACE-DQN's, centralised. Beside it, every replayed state :math:`s` distils
the greedy joint action :math:`a^*` of the sequential rollout into the individual value
:math:`Q(o_i, a_i)` (:class:`~acegnn.nn.individual.IndividualQ`):

.. math::
    \hat Q(o_i, a_i) = V\big(s_{a_i, a^*_{-i}}\big), \qquad
    \mathcal{L}_{distill} = \frac{1}{|\mathcal{C}|} \sum_{(i, a_i) \in \mathcal{C}}
        \ell\big(Q(o_i, a_i) - \hat Q(o_i, a_i)\big)

over :math:`\mathcal{C}`, every available action of every live agent, with :math:`\ell`
the TD loss's (``algo.loss``). :math:`a^*` and :math:`V` come from the network named by
``distill_from``, without gradient (:func:`~acegnn.nn.individual.counterfactual_values`).
The loss of a gradient step is
:math:`\mathcal{L}_{TD} (+ w_{aux} \mathcal{L}_{aux}) + w\,\mathcal{L}_{distill}`.

Decentralised execution (:meth:`ACECTDE.act_decentralised`): each agent takes
:math:`\arg\max_{a_i} Q(o_i, a_i)` over its available actions. Evaluations report it as
``dec_*`` beside the centralised policy, whose result decides success. See
docs/ace_ctde.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.algos.ace_dqn import ACEDQN, ACEDQNConfig
from acegnn.algos.base import QLearner
from acegnn.envs.base import Policy
from acegnn.graph.schema import GraphSchema
from acegnn.nn.ace import ModelConfig
from acegnn.nn.individual import SHARES, IndividualQ, counterfactual_values, greedy_actions

DISTILL_FROM = ("online", "target")


@dataclass
class ACECTDEConfig(ACEDQNConfig):
    """Hyper-parameters of ACE-CTDE: ACE-DQN's and the distillation's."""

    name: str = "ace_ctde"
    distill_weight: float = 1.0
    """Weight of the counterfactual distillation loss beside the TD loss (> 0)."""
    share: str = "encoders"
    """What Q(o_i, a_i) shares with V: ``encoders`` (the unit and action encoders; a value
    encoder of its own, of V's structure), ``all`` (the value encoder too) or ``none`` (a
    second network of the same structure)."""
    distill_from: str = "online"
    """The network whose greedy joint action and V make the targets: ``online`` or
    ``target`` (both without gradient)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.distill_weight < float("inf"):
            raise ValueError(f"algo.distill_weight must be finite and > 0 "
                             f"(got {self.distill_weight}); without distillation use "
                             f"algo.name=ace_dqn")
        if self.share not in SHARES:
            raise ValueError(f"algo.share must be one of {list(SHARES)} (got {self.share!r})")
        if self.distill_from not in DISTILL_FROM:
            raise ValueError(f"algo.distill_from must be one of {list(DISTILL_FROM)} "
                             f"(got {self.distill_from!r})")


class ACECTDE(ACEDQN):
    """The ACE-CTDE learner: ACE-DQN's, with the individual value as ``net.individual``
    (trained, clipped, Polyak-copied and saved with the value network).

    Args:
        schema (GraphSchema): The task's schema.
        cfg (ACECTDEConfig): Algorithm hyper-parameters.
        model (ModelConfig): Network hyper-parameters (of V, and of Q's own parts).
        device (str or torch.device, optional): (default: :obj:`"cpu"`)
    """

    config_class = ACECTDEConfig
    model_class = ModelConfig

    def __init__(self, schema: GraphSchema, cfg: ACECTDEConfig, model: ModelConfig,
                 device="cpu", example: Optional[Batch] = None) -> None:
        super().__init__(schema, cfg, model, device, example)
        self.net.add_module("individual", IndividualQ.from_config(self.net, model, cfg.share))
        QLearner.__init__(self, self.net, cfg, device)  # target copy and optimiser of every part

    # Acting ---------------------------------------------------------------------------
    @torch.no_grad()
    def act_decentralised(self, graphs: Batch) -> Tensor:
        """Each agent's greedy action on its own :math:`Q(o_i, \\cdot)`, from its own
        observation and without the others' actions: ``[num_agents]`` action ids."""
        ind = self.net.individual(self.on_device(graphs), check=self._check())
        return ind.index.action_slot[greedy_actions(ind.q, ind.index)]

    def policies(self, seed: int) -> Dict[str, Policy]:
        """The policies evaluated beside the centralised greedy one: ``dec``, the
        decentralised policy (it draws nothing: ``seed`` is not used)."""
        return {"dec": self.act_decentralised}

    # Learning -------------------------------------------------------------------------
    def distill_loss(self, graphs: Batch, generator: Optional[torch.Generator] = None
                     ) -> Tuple[Tensor, Dict[str, float]]:
        r""":math:`\mathcal{L}_{distill}` (module docstring) on states ``graphs`` and its logs:
        ``distill_loss``, ``ind_q_mean`` (mean :math:`Q(o_i, a_i)` over :math:`\mathcal{C}`)
        and ``dec_agree`` (the fraction of live agents whose greedy individual action is
        their action of :math:`a^*`)."""
        cfg = self.cfg
        graphs = self.on_device(graphs)
        teacher = self.net if cfg.distill_from == "online" else self.target_net
        with torch.no_grad():
            best = teacher.rollout(graphs, order=cfg.order, generator=generator, check=False)
            target = counterfactual_values(teacher, best)
        ind = self.net.individual(graphs, check=False)
        idx = ind.index
        live = torch.ones(idx.num_agents, dtype=torch.bool, device=self.device) \
            if idx.unit_alive is None else idx.unit_alive[idx.agents]
        counted = idx.action_available & live[idx.action_agent]
        q, target = ind.q[counted], target[counted]
        if bool(torch.isnan(target).any()) or bool(torch.isnan(q).any()):
            raise FloatingPointError("the distillation loss is NaN: the value network produced "
                                     "NaN values")
        if q.numel() == 0:  # no live agent in the batch
            return ind.q.sum() * 0.0, {"distill_loss": 0.0}
        loss = self.td_loss(q, target)
        agree = greedy_actions(ind.q.detach(), idx) == best.action_ids
        return loss, {"distill_loss": loss.item(), "ind_q_mean": q.detach().mean().item(),
                      "dec_agree": agree[live].float().mean().item()}

    def loss(self, graphs: Batch, actions: Tensor, reward: Tensor, terminated: Tensor,
             next_graphs: Batch, generator: Optional[torch.Generator] = None, *,
             boot_graphs: Optional[Batch] = None, discount: Optional[Tensor] = None,
             weights: Optional[Tensor] = None) -> Tuple[Tensor, Dict[str, float]]:
        """ACE-DQN's loss (``boot_graphs``, ``discount`` and ``weights`` as there) plus
        ``distill_weight`` times :meth:`distill_loss` on the states ``graphs`` (unweighted)."""
        loss, logs = super().loss(graphs, actions, reward, terminated, next_graphs, generator,
                                  boot_graphs=boot_graphs, discount=discount, weights=weights)
        distill, more = self.distill_loss(graphs, generator)
        return loss + self.cfg.distill_weight * distill, {**logs, **more}

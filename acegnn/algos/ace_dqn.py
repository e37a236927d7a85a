r"""ACE-DQN: Q-learning on the sequentially expanded MDP (paper Eq. 1).

Every SE-state :math:`s_{a_{1:i}}` of a replayed transition regresses to its own
Bellman target:

.. math::
    \hat V(s_{a_{1:i}}) =
    \begin{cases}
        \gamma_{se} \max_{a_{i+1}} V'(s_{a_{1:i}, a_{i+1}}) & i < n \\
        r + \gamma (1 - d) \max_{a_1} V'(s'_{a_1}) & i = n
    \end{cases}

with :math:`V'` the target network and :math:`d` the termination flag (not set at a time
limit). :math:`\gamma_{se} = \gamma` as in Eq. 1, or 1 when ``intermediate_discount`` is
off. With ``double_q`` the online network selects the maximising action and the target
network values it.

``nstep > 1`` (:mod:`acegnn.buffers.replay`) replaces the last SE-state's target by the
``m``-step one, :math:`R_t + \gamma_t \max_{a_1} V'(s_{t+m, a_1})`, with
:math:`R_t = \sum_{k<m} \gamma^k r_{t+k}` and the replayed discount
:math:`\gamma_t = \gamma^m` (0 when the episode terminated within the ``m`` steps). The
SE-states inside the step keep :math:`\gamma_{se} V'` of the next SE-state. With
``target="eq1"`` it needs ``intermediate_discount`` off; the mix is refused.

``target="last_agent"`` (the official code's target) regresses every SE-state of the
step to the last agent's target, without discount inside the step:

.. math::
    \hat V(s_{a_{1:i}}) = r + \gamma (1 - d)\, V'(s'_{a'_{1:n}}), \qquad i = 1, \dots, n,
    \qquad a'_k = \arg\max_{a} \tilde V(s'_{a'_{1:k-1}, a})

with :math:`a'` the greedy sequential decision at :math:`s'` of :math:`\tilde V`: the
online network with ``double_q``, :math:`V'` without. With ``nstep > 1`` it bootstraps
likewise.

``aux_weight > 0`` adds the official code's auxiliary loss (:meth:`ACEDQN.aux_loss`):
the loss is :math:`\mathcal{L}_{TD} + w\,\mathcal{L}_{aux}`.

See docs/official_code.md for where the official code's target, ``nstep`` and auxiliary
loss come from and how they differ.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, NamedTuple, Optional, Tuple

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch
from torch_geometric.utils import scatter

from acegnn.algos.base import QLearner, QLearningConfig, check_order
from acegnn.graph.index import UnitIndex, unit_index
from acegnn.graph.schema import GraphSchema
from acegnn.nn.ace import ACENetwork, ModelConfig
from acegnn.nn.init import init_relu_layers
from acegnn.nn.rollout import Rollout
from acegnn.nn.se_state import apply_actions
from acegnn.nn.selectors import EpsilonGreedy, Forced
from acegnn.utils.phases import phase

TARGETS = ("eq1", "last_agent")
AUX_SPANS = ("step", "nstep")


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
    target: str = "eq1"
    """Bellman target: ``eq1`` (the paper's, per SE-state) or ``last_agent`` (the official
    code's: every SE-state of a step regresses to the last agent's target)."""
    aux_weight: float = 0.0
    """Weight of the official code's auxiliary loss, predicting every unit's feature change
    from the final SE-state (0: off, and no prediction head is built)."""
    aux_label_norm: bool = False
    """Divide each auxiliary label by the largest magnitude of its feature's labels among
    the units of its node type in its state (the official code's ``aux_label_norm``)."""
    aux_class_balance: bool = False
    """Average the auxiliary squared errors apart over the zero and the non-zero labels of
    each feature, then the two means (the official code's ``aux_class_balance``)."""
    aux_span: str = "step"
    """What the auxiliary labels span: ``step``, the change from :math:`s_t` to
    :math:`s_{t+1}`, or ``nstep``, the change to the state the n-step target bootstraps
    from, :math:`s_{t+m}` (the official code's: its n-step samples' ``next_obs``). The same
    with ``nstep = 1``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_order(self.order)
        if self.target not in TARGETS:
            raise ValueError(f"algo.target must be one of {list(TARGETS)} (got {self.target!r})")
        if not 0.0 <= self.aux_weight < float("inf"):
            raise ValueError(f"algo.aux_weight must be finite and >= 0 (got {self.aux_weight})")
        if self.aux_span not in AUX_SPANS:
            raise ValueError(f"algo.aux_span must be one of {list(AUX_SPANS)} (got {self.aux_span!r})")
        if self.nstep > 1 and self.target == "eq1" and self.intermediate_discount:
            # Eq. 1 discounts each SE-state (gamma^n_agents per environment step), the
            # n-step return each environment step: the two would mix in one target
            raise ValueError(
                "algo.nstep > 1 with algo.target=eq1 and algo.intermediate_discount=true mixes "
                "two discounts: gamma per SE-state inside a step (Eq. 1) and gamma per "
                "environment step in the n-step return. Set algo.intermediate_discount=false "
                "(gamma per environment step throughout), algo.target=last_agent (the official "
                "code's), or algo.nstep=1")


class NextStateHead(nn.Module):
    r"""The auxiliary prediction head: per node type ``t``, fc + ReLU + fc from a unit's
    embedding to the change of its ``F_t`` node features over the step (the official
    code's ``_local_predictor``, ``hidden -> hidden / 2 -> F_t``).

    Args:
        schema (GraphSchema): The task's schema (node types and feature widths).
        hidden (int): Embedding width.

    Shapes:
        - **input:** ``units`` ``[num_units, hidden]``, flat rows of ``index``
        - **output:** ``{t: [N_t, F_t]}`` in the order of ``batch[t].x``
    """

    def __init__(self, schema: GraphSchema, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        mid = max(hidden // 2, 1)
        self.heads = nn.ModuleDict({t: nn.Sequential(nn.Linear(hidden, mid), nn.ReLU(inplace=True),
                                                     nn.Linear(mid, f))
                                    for t, f in schema.node_types.items()})

    def forward(self, units: Tensor, index: UnitIndex) -> Dict[str, Tensor]:
        return {t: head(units[index.flat[t]]) for t, head in self.heads.items()}

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.hidden}, types={list(self.heads)})"


class TDTargets(NamedTuple):
    """Per-agent values and Bellman targets of a replayed batch."""

    value: Tensor  # [num_agents] V(s_{a_1:i}) of the online network (with grad)
    target: Tensor  # [num_agents] Bellman target, Eq. 1 or the last agent's (no grad)
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
    compiled_kernels = True
    model_class = ModelConfig

    def __init__(self, schema: GraphSchema, cfg: ACEDQNConfig, model: ModelConfig,
                 device="cpu", example: Optional[Batch] = None) -> None:
        net = ACENetwork.from_config(schema, model)
        if cfg.aux_weight > 0:  # trained, clipped and saved with the value network
            net.add_module("aux_head", init_relu_layers(NextStateHead(schema, model.hidden),
                                                        model.init))
        super().__init__(net, cfg, device)

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
                   next_graphs: Batch, generator: Optional[torch.Generator] = None, *,
                   boot_graphs: Optional[Batch] = None,
                   discount: Optional[Tensor] = None) -> TDTargets:
        r"""Values of the replayed SE-states and their targets (Eq. 1, or the last agent's
        with ``target="last_agent"``).

        Args:
            graphs: states ``s``; ``actions`` ``[num_agents]`` the joint actions taken;
            reward, terminated: ``[num_graphs]``; next_graphs: states ``s'``;
            boot_graphs: the states bootstrapped from (``nstep > 1``: :math:`s_{t+m}`;
            ``None``: ``next_graphs``); discount: ``[num_graphs]`` their factor
            (``None``: :math:`\gamma (1 - d)`).
        """
        cfg = self.cfg
        graphs = self.on_device(graphs)
        boot_graphs = self.on_device(next_graphs if boot_graphs is None else boot_graphs)
        check = self._check()
        with phase("online_values"):
            if cfg.double_q and cfg.target == "eq1":  # the online values of every candidate
                online = self.net.rollout(graphs, order=cfg.order, selector=Forced(actions),
                                          generator=generator, check=check, values="all")
            else:
                online = self.net.value_actions(graphs, actions, order=cfg.order,
                                                generator=generator, check=check)
        if online.rank.numel() == 0:
            raise ValueError("no state of the batch has an agent: nothing to learn from")
        with torch.no_grad(), phase("targets"):
            reward = reward.to(self.device)
            discount = self.bootstrap_discount(terminated, discount)
            if cfg.target == "last_agent":
                last = self.last_agent_targets(reward, discount, boot_graphs, generator, check)
                td_target = last[online.encoded.index.agent_batch]
            else:
                td_target = self._eq1_targets(graphs, actions, online, reward, discount,
                                              boot_graphs, generator, check)
        return TDTargets(online.chosen_value, td_target, online)

    def _eq1_targets(self, graphs: Batch, actions: Tensor, online: Rollout, reward: Tensor,
                     discount: Tensor, next_graphs: Batch, generator: Optional[torch.Generator],
                     check: bool) -> Tensor:
        """Eq. 1 per agent ``[num_agents]``; the target network follows the online rollout's
        order on ``s``. ``next_graphs`` are the states bootstrapped from, ``discount``
        ``[num_graphs]`` their factor."""
        cfg = self.cfg
        target = self.target_net.value_actions(graphs, actions, order=online.rank,
                                               successors=True, check=False)
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
        last = reward[b] + discount[b] * boot
        gamma_se = cfg.gamma if cfg.intermediate_discount else 1.0
        return torch.where(online.next_agent >= 0, gamma_se * inner, last)

    def last_agent_targets(self, reward: Tensor, discount: Tensor, next_graphs: Batch,
                           generator: Optional[torch.Generator] = None,
                           check: bool = True) -> Tensor:
        r"""The official code's target per state ``[num_graphs]``:
        :math:`r + \gamma_t V'(s'_{a'_{1:n}})`, :math:`a'` the greedy sequential
        decision at :math:`s'` of the online network (``double_q``) or of :math:`V'`, with
        ``discount`` :math:`\gamma_t` (:meth:`bootstrap_discount`: :math:`\gamma (1 - d)`,
        or the ``n``-step one with :math:`s'` the state after ``m`` steps).
        A state :math:`s'` without agents bootstraps from :math:`V'` of the bare state."""
        cfg = self.cfg
        if cfg.double_q:  # the online decision's final SE-state, valued by V'
            greedy = self.net.rollout(next_graphs, order=cfg.order, generator=generator,
                                      check=check)
            chosen = greedy.action_ids[greedy.action_ids >= 0]
            enc = self.target_net.encode(next_graphs, check=False, passive_rows=lambda _: chosen)
            final_units = apply_actions(enc.units, enc, chosen)
        else:
            final = self.target_net.rollout(next_graphs, order=cfg.order, generator=generator,
                                            check=check)
            enc, final_units = final.encoded, final.final_units
        boot = self.target_net.value(final_units, enc)  # [num_graphs]
        return reward + discount * boot

    def aux_loss(self, online: Rollout, graphs: Batch, next_graphs: Batch) -> Tensor:
        r"""The auxiliary loss: a head :math:`f_t` (fc + ReLU + fc per node type) on the
        unit embeddings of the final SE-state :math:`s_{a_{1:n}}` of ``online`` (the
        teacher-forced rollout on ``graphs``) predicts every unit's change of node features,

        .. math::
            \mathcal{L}_{aux} = \frac{1}{\sum_t N_t F_t} \sum_{t} \sum_{j \in t}
                \left\lVert f_t\!\left(e_u(u_{j, a_{1:n}})\right) - (x'_j - x_j) \right\rVert^2

        over every unit ``j``, alive or not, of every node type ``t``.

        With ``aux_label_norm`` each label :math:`y_{jf} = x'_{jf} - x_{jf}` becomes
        :math:`y_{jf} / (\max_{k} |y_{kf}| + 10^{-9})`, the maximum over the units
        :math:`k` of :math:`j`'s node type in :math:`j`'s state. With ``aux_class_balance``
        the loss is :math:`\tfrac12 (\bar P + \bar N)`: :math:`P_f` the mean squared
        error of feature :math:`f` over its labels with :math:`|y| \ge 10^{-5}` (0 where
        there are none), :math:`N_f` over the others, each averaged over the features of
        every node type.

        Raises:
            ValueError: ``graphs`` and ``next_graphs`` do not hold the same units in the
                same places.
        """
        graphs, next_graphs = self.on_device(graphs), self.on_device(next_graphs)
        idx = online.encoded.index
        nidx = unit_index(self.net.schema, next_graphs, check=False)
        if nidx.num_units != idx.num_units or any(not torch.equal(idx.flat[t], nidx.flat[t])
                                                  for t in idx.flat):
            raise ValueError(f"algo.aux_weight needs s and s' with the same units per graph "
                             f"(got {idx.num_units} and {nidx.num_units} units, or another layout)")
        pred = self.net.aux_head(online.final_units, idx)
        errors, labels = [], []
        for t, p in pred.items():
            label = (next_graphs[t].x - graphs[t].x).to(p.dtype)  # [N_t, F_t]
            if self.cfg.aux_label_norm:
                batch = graphs[t].batch
                largest = scatter(label.abs(), batch, dim=0, dim_size=graphs.num_graphs,
                                  reduce="max")  # [num_graphs, F_t]
                label = label / (largest.index_select(0, batch) + 1e-9)
            errors.append((p - label).pow(2))
            labels.append(label)
        if not self.cfg.aux_class_balance:
            count = sum(e.numel() for e in errors)
            return sum(e.sum() for e in errors) / max(count, 1)
        positive = [(y.abs() >= 1e-5).to(e.dtype) for y, e in zip(labels, errors)]
        pos = torch.cat([(e * m).sum(0) / m.sum(0).clamp(min=1.0)
                         for e, m in zip(errors, positive)])  # [sum_t F_t]
        neg = torch.cat([(e * (1 - m)).sum(0) / (1 - m).sum(0).clamp(min=1.0)
                         for e, m in zip(errors, positive)])
        return (pos.mean() + neg.mean()) / 2

    def loss(self, graphs: Batch, actions: Tensor, reward: Tensor, terminated: Tensor,
             next_graphs: Batch, generator: Optional[torch.Generator] = None, *,
             boot_graphs: Optional[Batch] = None, discount: Optional[Tensor] = None,
             weights: Optional[Tensor] = None) -> Tuple[Tensor, Dict[str, float]]:
        """The loss of one gradient step on a replayed batch (TD, plus the auxiliary loss,
        which reads ``next_graphs``, the states one step on, or with ``aux_span=nstep``
        ``boot_graphs`` where given) and its logs; ``boot_graphs``
        and ``discount`` as in :meth:`td_targets`. With ``weights`` (``[num_graphs]``,
        a prioritized replay's importance-sampling weights) each state's SE-state terms
        of the TD loss carry its weight (the auxiliary loss none), and the logs hold
        ``td_errors`` ``[num_graphs]``, each state's mean absolute TD error over its
        SE-states (a tensor, for the replay's priorities)."""
        try:
            td = self.td_targets(graphs, actions, reward, terminated, next_graphs, generator,
                                 boot_graphs=boot_graphs, discount=discount)
        except FloatingPointError as e:
            raise FloatingPointError(f"the TD loss is NaN: {e}") from None
        logs: Dict = {}
        if weights is None:
            td_loss = self.td_loss(td.value, td.target)
        else:
            state = td.online.encoded.index.agent_batch  # [num_agents] each SE-state's state
            td_loss = self.td_loss(td.value, td.target, weights.to(self.device)[state])
            error = (td.value.detach() - td.target).abs()
            logs["td_errors"] = scatter(error, state, 0, dim_size=weights.size(0),
                                        reduce="mean").cpu()
        logs.update(td_loss=td_loss.item(), q_mean=td.value.detach().mean().item(),
                    target_mean=td.target.mean().item())
        loss = td_loss
        if self.cfg.aux_weight > 0:
            with phase("aux_loss"):
                later = (boot_graphs if self.cfg.aux_span == "nstep" and boot_graphs is not None
                         else next_graphs)
                aux = self.aux_loss(td.online, graphs, later)
            loss = td_loss + self.cfg.aux_weight * aux
            logs["aux_loss"] = aux.item()
        return loss, logs

    def update(self, graphs: Batch, actions: Tensor, reward: Tensor, terminated: Tensor,
               next_graphs: Batch, generator: Optional[torch.Generator] = None, *,
               boot_graphs: Optional[Batch] = None, discount: Optional[Tensor] = None,
               weights: Optional[Tensor] = None) -> Dict[str, float]:
        """One gradient step on a replayed batch (:meth:`loss`), then the Polyak target
        update; ``boot_graphs`` and ``discount`` (``algo.nstep > 1``) as in
        :meth:`td_targets`, ``weights`` (a prioritized replay) as in :meth:`loss`."""
        # only the keywords given: a subclass's loss without them still serves nstep = 1
        nstep = {k: v for k, v in (("boot_graphs", boot_graphs), ("discount", discount),
                                   ("weights", weights)) if v is not None}
        loss, logs = self.loss(graphs, actions, reward, terminated, next_graphs, generator,
                               **nstep)
        return {**logs, **self.step(loss)}

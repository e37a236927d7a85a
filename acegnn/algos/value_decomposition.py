r"""Value-factorisation baselines on the same footing as ACE: IQL, VDN, QMIX, QTRAN.

They run through the same trainer, replay, CLI and evaluation as ACE-DQN; the only
difference is the learner. Individual Q-networks (one MLP shared by the agents) see what
ACE sees, flattened (:func:`acegnn.graph.flat.flat_inputs`): the agent's node features
and the features of its edges to every other unit; mixers see every unit's features.

* ``iql``:  each agent regresses :math:`Q_i(o_i, a_i)` to
  :math:`r + \gamma (1-d) \max_{a'} Q'_i(o'_i, a')`.
* ``vdn``:  :math:`Q_{tot} = \sum_i Q_i`, regressed to
  :math:`r + \gamma (1-d) \sum_i \max_{a'} Q'_i`.
* ``qmix``: :math:`Q_{tot} = f_s(Q_1, \ldots, Q_n)` with a monotonic hyper-network mixer.
* ``qtran``: QTRAN-base: :math:`L = L_{td} + \lambda_{opt} L_{opt} + \lambda_{nopt} L_{nopt}`
  with :math:`L_{td}` on :math:`Q_{jt}(s, u)` (target :math:`r + \gamma (1-d) Q'_{jt}(s', \bar u')`
  at the target agents' greedy actions :math:`\bar u'`, as in the QTRAN paper; the online
  agents' with ``double_q``), :math:`L_{opt} = (\sum_i Q_i(\bar u) - Q_{jt}(s, \bar u) + V(s))^2` and
  :math:`L_{nopt} = \min(\sum_i Q_i(u) - Q_{jt}(s, u) + V(s), 0)^2`, :math:`Q_{jt}`
  detached in both (Son et al., 2019; :math:`\lambda = 1` as there).

With ``nstep > 1`` every target bootstraps as ACE-DQN's: :math:`R_t + \gamma_t (\cdot)'`
at the state after ``m`` steps, with the replayed discount :math:`\gamma_t` (``gamma^m``,
0 after a termination) in place of :math:`\gamma (1-d)` (:mod:`acegnn.buffers.replay`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, NamedTuple, Optional

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch

from acegnn.algos.base import QLearner, QLearningConfig
from acegnn.graph.flat import FlatInputs, flat_inputs
from acegnn.graph.schema import GraphSchema
from acegnn.nn.init import MLPConfig, init_relu_layers
from acegnn.nn.mixers import AgentQNet, QMixer, QTranBase, VDNMixer

METHODS = ("iql", "vdn", "qmix", "qtran")


@dataclass
class ValueDecompositionConfig(QLearningConfig):
    """Hyper-parameters of the baselines: those of ACE plus the method's own."""

    name: str = "qmix"
    """``iql``, ``vdn``, ``qmix`` or ``qtran``."""
    mixer_embed: int = 32
    """QMIX mixing width (QMIX paper: 32)."""
    hyper_hidden: int = 64
    """QMIX hyper-network hidden width (QMIX paper: 64)."""
    qtran_hidden: int = 64
    """Width of QTRAN's joint Q and V networks."""
    qtran_layers: int = 2
    """Hidden fc + ReLU layers of QTRAN's joint Q network (its V network has one)."""
    lambda_opt: float = 1.0
    """QTRAN weight of L_opt (QTRAN paper: 1)."""
    lambda_nopt: float = 1.0
    """QTRAN weight of L_nopt (QTRAN paper: 1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.name not in METHODS:
            raise ValueError(f"algo.name must be one of {list(METHODS)} (got {self.name!r})")
        for key in ("mixer_embed", "hyper_hidden", "qtran_hidden", "qtran_layers"):
            if getattr(self, key) < 1:
                raise ValueError(f"algo.{key} must be at least 1 (got {getattr(self, key)})")
        for key in ("lambda_opt", "lambda_nopt"):
            if not getattr(self, key) >= 0:  # NaN too
                raise ValueError(f"algo.{key} must be non-negative (got {getattr(self, key)})")


@dataclass
class AgentModelConfig(MLPConfig):
    """The baselines' individual Q-network, one MLP shared by the agents, with
    ``layers + 1`` fc + ReLU before its output layer (as deep as ACE's unit encoder with
    its value head)."""

    shared: bool = False
    """Each agent's input also holds the global state, every unit's node features (the
    paper's QMIX-SHARED: every agent sees the union of the units' observations)."""


def input_sizes(fi: FlatInputs) -> Dict[str, int]:
    """The sizes that the networks are built for, by name (for error messages)."""
    return {"agents per state": fi.agent_obs.size(1), "agent input size": fi.agent_obs.size(2),
            "state size": fi.state.size(1), "action slots per agent": fi.available.size(2)}


def masked(q: Tensor, available: Tensor) -> Tensor:
    return q.masked_fill(~available, float("-inf"))


class Losses(NamedTuple):
    loss: Tensor
    value: Tensor  # what the TD part regresses ([B, n] for iql, [B] otherwise)
    target: Tensor
    parts: Dict[str, Tensor]


class ValueDecomposition(QLearner):
    """IQL / VDN / QMIX / QTRAN learner.

    Args:
        schema (GraphSchema): The task's schema.
        cfg (ValueDecompositionConfig): Hyper-parameters; ``cfg.name`` picks the method.
        model (AgentModelConfig): The individual Q-network.
        device: Torch device.
        example (Batch): A batch of the task's states, to size the networks.
    """

    config_class = ValueDecompositionConfig
    compiled_kernels = False
    model_class = AgentModelConfig

    def __init__(self, schema: GraphSchema, cfg: ValueDecompositionConfig, model: AgentModelConfig,
                 device="cpu", example: Optional[Batch] = None) -> None:
        if example is None:
            raise ValueError("value-factorisation learners need an example batch to size "
                             "their networks")
        self.schema, self.shared = schema, getattr(model, "shared", False)
        self.sizes = input_sizes(self._flat(example, check=True))
        n, obs_dim, state_dim, num_actions = self.sizes.values()
        net = nn.ModuleDict({"agent": AgentQNet(obs_dim, num_actions, model.hidden,
                                                model.layers + 1)})
        if cfg.name == "vdn":
            net["mixer"] = VDNMixer()
        elif cfg.name == "qmix":
            net["mixer"] = QMixer(n, state_dim, cfg.mixer_embed, cfg.hyper_hidden)
        elif cfg.name == "qtran":
            net["qtran"] = QTranBase(n, num_actions, state_dim, cfg.qtran_hidden,
                                     cfg.qtran_layers)
        super().__init__(init_relu_layers(net, model.init), cfg, device)

    def _flat(self, graphs: Batch, check: bool) -> FlatInputs:
        fi = flat_inputs(self.schema, graphs, check=check)
        if not self.shared:
            return fi
        n = fi.agent_obs.size(1)
        everything = fi.state.unsqueeze(1).expand(-1, n, -1)  # [B, n, state_dim]
        return fi._replace(agent_obs=torch.cat([fi.agent_obs, everything], dim=-1))

    def inputs(self, graphs: Batch) -> FlatInputs:
        """The batch's flat inputs; ``ValueError`` if they do not fit the networks."""
        fi = self._flat(self.on_device(graphs), check=False)
        got = input_sizes(fi)
        if got != self.sizes:
            diff = ", ".join(f"{k} {v} (got {got[k]})" for k, v in self.sizes.items() if v != got[k])
            raise ValueError(f"these states do not fit the {self.cfg.name} networks, which were "
                             f"sized for: {diff}; value-factorisation baselines need the same "
                             f"units in every state")
        return fi

    @torch.no_grad()
    def act(self, graphs: Batch, epsilon: float = 0.0,
            generator: Optional[torch.Generator] = None) -> Tensor:
        """Per-agent epsilon-greedy over available actions; ``[num_agents]`` action ids."""
        fi = self.inputs(graphs)
        q = masked(self.net["agent"](fi.agent_obs), fi.available)
        actions = q.argmax(-1)
        if epsilon > 0:
            keys = torch.rand(q.shape, generator=generator).to(q.device)
            random = keys.masked_fill(~fi.available, -1.0).argmax(-1)
            explore = torch.rand(actions.shape, generator=generator).to(q.device) < epsilon
            actions = torch.where(explore, random, actions)
        return actions.view(-1)

    def losses(self, graphs: Batch, actions: Tensor, reward: Tensor, terminated: Tensor,
               next_graphs: Batch, *, boot_graphs: Optional[Batch] = None,
               discount: Optional[Tensor] = None, weights: Optional[Tensor] = None) -> Losses:
        r"""The method's losses; the targets bootstrap from ``boot_graphs`` (``None``:
        ``next_graphs``) with ``discount`` ``[B]`` (``None``: :math:`\gamma (1 - d)`).
        ``weights`` ``[B]`` (a prioritized replay's importance-sampling weights) weight
        each sample's TD terms; QTRAN's two constraint losses stay unweighted."""
        cfg = self.cfg
        w = None if weights is None else weights.to(self.device)
        fi, fi2 = self.inputs(graphs), self.inputs(next_graphs if boot_graphs is None else boot_graphs)
        B, n = fi.agent_obs.shape[:2]
        actions = actions.to(self.device).view(B, n)
        reward = reward.to(self.device)
        discount = self.bootstrap_discount(terminated, discount)  # [B]
        q = self.net["agent"](fi.agent_obs)  # [B, n, A]
        q_taken = q.gather(2, actions.unsqueeze(-1)).squeeze(-1)  # [B, n]
        with torch.no_grad():  # the greedy next actions: of the target agents, or (double
            # Q-learning) of the online agents, valued by the target agents
            q2_target = masked(self.target_net["agent"](fi2.agent_obs), fi2.available)
            chooser = masked(self.net["agent"](fi2.agent_obs), fi2.available) if cfg.double_q else q2_target
            greedy2 = chooser.argmax(-1)  # [B, n]
            q2 = q2_target.gather(2, greedy2.unsqueeze(-1)).squeeze(-1)
        if cfg.name == "iql":
            target = reward.unsqueeze(1) + discount.unsqueeze(1) * q2
            w = None if w is None else w.unsqueeze(1).expand_as(q_taken)
            return Losses(self.td_loss(q_taken, target, w), q_taken, target, {})
        if cfg.name in ("vdn", "qmix"):
            q_tot = self.net["mixer"](q_taken, fi.state)
            with torch.no_grad():
                target = reward + discount * self.target_net["mixer"](q2, fi2.state)
            return Losses(self.td_loss(q_tot, target, w), q_tot, target, {})
        # QTRAN-base
        qtran, qtran_t = self.net["qtran"], self.target_net["qtran"]
        q_jt = qtran.joint_q(fi.state, actions)
        with torch.no_grad():
            target = reward + discount * qtran_t.joint_q(fi2.state, greedy2)
        l_td = self.td_loss(q_jt, target, w)
        greedy = masked(q, fi.available).argmax(-1).detach()
        q_sum_opt = q.gather(2, greedy.unsqueeze(-1)).squeeze(-1).sum(1)
        v = qtran.value(fi.state)
        opt_err = q_sum_opt - qtran.joint_q(fi.state, greedy).detach() + v
        nopt_err = (q_taken.sum(1) - q_jt.detach() + v).clamp(max=0.0)
        l_opt, l_nopt = (opt_err ** 2).mean(), (nopt_err ** 2).mean()
        loss = l_td + cfg.lambda_opt * l_opt + cfg.lambda_nopt * l_nopt
        return Losses(loss, q_jt, target, {"td_loss": l_td, "opt_loss": l_opt, "nopt_loss": l_nopt})

    def update(self, graphs: Batch, actions: Tensor, reward: Tensor, terminated: Tensor,
               next_graphs: Batch, generator: Optional[torch.Generator] = None, *,
               boot_graphs: Optional[Batch] = None, discount: Optional[Tensor] = None,
               weights: Optional[Tensor] = None) -> Dict[str, float]:
        """One gradient step on :meth:`losses`, then the Polyak target update. With
        ``weights`` (as in :meth:`losses`) the metrics hold ``td_errors`` ``[B]``, each
        sample's absolute TD error (IQL: the mean over its agents), a tensor."""
        out = self.losses(graphs, actions, reward, terminated, next_graphs,
                          boot_graphs=boot_graphs, discount=discount, weights=weights)
        metrics = {"loss": out.loss.item(), "td_loss": out.loss.item(), "q_mean": out.value.detach().mean().item(),
                   "target_mean": out.target.mean().item(), **self.step(out.loss)}
        metrics.update({k: v.item() for k, v in out.parts.items()})
        if weights is not None:
            error = (out.value.detach() - out.target).abs()
            metrics["td_errors"] = (error.mean(1) if error.dim() > 1 else error).cpu()
        return metrics

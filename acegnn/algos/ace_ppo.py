r"""ACE-PPO: PPO on the sequentially expanded MDP (paper, "Extension" and Appendix "ACE-PPO").

The SE-states of a step with :math:`n` agents are
:math:`s = s_{a_{1:0}}, s_{a_1}, \dots, s_{a_{1:n}}`. Agent :math:`i+1` decides at
:math:`s_{a_{1:i}}`.

**Policy** (:class:`acegnn.nn.Softmax`). A logit head :math:`L` with the value head's
structure and its own parameters reads every candidate's successor SE-state, in the same
rollout as the value head (:func:`acegnn.nn.sequential_rollout` with ``logit_head``):

.. math::
    \pi(a_{i+1} \mid s_{a_{1:i}}) = \operatorname{softmax}_{\tilde a \in \mathcal{A}_{i+1}}
        L(s_{a_{1:i}, \tilde a})

**Critic.** :math:`V(s_{a_{1:i}})` for :math:`i \ge 1` is the value head on the SE-state
after agent :math:`i`'s action (:attr:`Rollout.chosen_value`). :math:`V(s)` is the same
head on the unit embeddings before any action message.

**Advantages** (:func:`se_gae`): GAE(:math:`\lambda`) along the chain of SE-states, with
reward 0 inside a step:

.. math::
    \delta_i = \begin{cases}
        \gamma V(s_{a_{1:i+1}}) - V(s_{a_{1:i}}) & i < n \\
        r + \gamma (1 - d) B - V(s_{a_{1:n}}) & i = n
    \end{cases}
    \qquad
    \hat A_i = \delta_i + \gamma \lambda (1 - c) \hat A_{i+1}

:math:`\hat A_{n+1}` is the next step's :math:`\hat A_1`. :math:`d` flags a termination.
:math:`c` flags a cut after the step: a termination, a time limit, the end of the round
or a dropped step. :math:`B = V(s'_{a'_1})`, or :math:`B = \sum_a \pi(a \mid s') V(s'_a)`
where the episode is cut without terminating. Agent :math:`i+1`'s advantage is
:math:`\hat A_i`; the value target of every SE-state, :math:`s` included, is
:math:`R_i = \hat A_i + V(s_{a_{1:i}})`.

**Loss** (:func:`ppo_loss`), with :math:`\rho = \pi / \pi_{old}`:

.. math::
    \mathcal{L} = -\mathbb{E}\left[\min(\rho \hat A, \operatorname{clip}(\rho, 1 \pm \epsilon)
        \hat A)\right] + w_v \tfrac12 \mathbb{E}\left[\max\left((v - R)^2,
        (v_{old} + \operatorname{clip}(v - v_{old}, \pm \epsilon_v) - R)^2\right)\right]
        - w_e \mathbb{E}[H(\pi)]

The policy and entropy terms average over the decisions with more than one available
action; the value term averages over every SE-state. With ``adv_norm``, :math:`\hat A`
is standardised over the minibatch's decisions. With ``value_norm``, the head predicts
:math:`v = (V - \mu) / \sigma`, with the running mean and standard deviation of the
:math:`\lambda`-returns; :math:`v`, :math:`v_{old}` (at collection) and :math:`R` are in
that scale.

See docs/ace_ppo.md for a round, the config keys, the results and the choices where the
paper is silent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, NamedTuple, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Batch
from torch_geometric.utils import scatter

from acegnn.algos.base import LearnerBase, OptimConfig, check_order
from acegnn.algos.on_policy import Trajectories
from acegnn.graph.schema import GraphSchema
from acegnn.nn.ace import ACENetwork, ModelConfig
from acegnn.nn.init import init_relu_layers
from acegnn.nn.rollout import Rollout
from acegnn.nn.selectors import Softmax
from acegnn.nn.value_head import ValueHead



@dataclass
class ACEPPOConfig(OptimConfig):
    """Hyper-parameters of ACE-PPO (defaults: the paper's SMAC table, "Hyperparameter
    Settings of ACE-PPO on SMAC", where it gives them). The inherited keys keep
    :class:`~acegnn.algos.base.OptimConfig`'s defaults, which are the paper's (lr 5e-4,
    Adam, gamma 0.99, here the discount between adjacent SE-states; weight decay: not
    stated, 0), but for the gradient clip."""

    name: str = "ace_ppo"
    grad_clip: float = 0.5
    """Max gradient norm, 0 turns clipping off (paper: not stated; PPO's usual 0.5)."""
    gae_lambda: float = 0.95
    """GAE's lambda over adjacent SE-states (paper: 0.95)."""
    clip_ratio: float = 0.05
    """PPO's clip of the probability ratio (paper: 0.05)."""
    value_clip_ratio: float = 0.3
    """Clip of the value head's change from its collection-time output, in the scale it
    predicts (paper: use_value_clip True, value_clip_ratio 0.3); 0 turns it off."""
    value_weight: float = 1.0
    """Weight of the value loss (paper: 1)."""
    entropy_weight: float = 0.01
    """Weight of the entropy bonus (paper: 0.01)."""
    recompute_adv: bool = True
    """Recompute values, advantages and returns with the current network before every
    pass over the round after the first (paper: True)."""
    adv_norm: bool = True
    """Standardise the advantages over each minibatch's decisions (paper: True)."""
    value_norm: bool = True
    """The value head predicts returns standardised by their running mean and standard
    deviation (paper: True)."""
    order: str = "default"
    """Agent order: ``default`` (the graph's), ``random`` (shuffled per state) or
    ``sorted`` (by a key the task gives each agent)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_order(self.order)
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ValueError(f"algo.gae_lambda must be in [0, 1] (got {self.gae_lambda})")
        if not 0.0 < self.clip_ratio < 1.0:
            raise ValueError(f"algo.clip_ratio must be in (0, 1) (got {self.clip_ratio})")
        for key in ("value_clip_ratio", "value_weight", "entropy_weight"):
            v = getattr(self, key)
            if not 0.0 <= v < float("inf"):
                raise ValueError(f"algo.{key} must be finite and >= 0 (got {v})")


# The advantage estimator ----------------------------------------------------------------
class SEAdvantages(NamedTuple):
    """GAE over the SE-states of a round (dense: step ``t``, environment ``e``)."""

    advantages: Tensor  # [T, E, n] A(a_{j+1} | s_{a_1:j}) of the agent deciding j-th
    returns: Tensor  # [T, E, n + 1] lambda-return of s, s_{a_1}, ..., s_{a_1:n}


def se_gae(first_value: Tensor, values: Tensor, reward: Tensor, terminated: Tensor,
           cut: Tensor, bootstrap: Tensor, gamma: float, lam: float) -> SEAdvantages:
    r"""GAE(:math:`\lambda`) over adjacent SE-states (module docstring, paper Appendix
    "ACE-PPO").

    Args:
        first_value (Tensor): ``[T, E]`` :math:`V(s)` of each step's first SE-state.
        values (Tensor): ``[T, E, n]`` :math:`V(s_{a_{1:j}})`, ``j = 1..n``: the SE-state
            after the ``j``-th deciding agent's action.
        reward (Tensor): ``[T, E]``.
        terminated (Tensor): ``[T, E]`` bool: the episode ended here (bootstrap 0).
        cut (Tensor): ``[T, E]`` bool: the episode is not followed after this step
            although it did not terminate (a time limit, the end of the round): bootstrap
            from ``bootstrap``.
        bootstrap (Tensor): ``[T, E]`` the value of the next SE-state where ``cut`` (read
            nowhere else).
        gamma (float): Discount between adjacent SE-states.
        lam (float): GAE's :math:`\lambda`.
    """
    T, E, n = values.shape
    if first_value.shape != (T, E) or reward.shape != (T, E):
        raise ValueError(f"first_value and reward must be [T, E] = [{T}, {E}] "
                         f"(got {tuple(first_value.shape)}, {tuple(reward.shape)})")
    chain = torch.zeros_like(values)  # [T, E, n] A-hat of s_{a_1:j}, j = 1..n
    first = torch.zeros_like(first_value)
    next_adv = values.new_zeros(E)  # A-hat of the next step's s'_{a_1}
    next_value = values.new_zeros(E)  # V(s'_{a_1})
    for t in reversed(range(T)):
        end = terminated[t] | cut[t]
        boot = torch.where(terminated[t], torch.zeros_like(next_value),
                           torch.where(cut[t], bootstrap[t], next_value))
        adv = reward[t] + gamma * boot - values[t, :, n - 1] \
            + gamma * lam * torch.where(end, torch.zeros_like(next_adv), next_adv)
        chain[t, :, n - 1] = adv
        for j in reversed(range(n - 1)):  # s_{a_1:j+1} -> s_{a_1:j+2}, no reward
            adv = gamma * values[t, :, j + 1] - values[t, :, j] + gamma * lam * adv
            chain[t, :, j] = adv
        first[t] = gamma * values[t, :, 0] - first_value[t] + gamma * lam * adv
        next_adv, next_value = adv, values[t, :, 0]
    advantages = torch.cat([first.unsqueeze(-1), chain[:, :, :n - 1]], dim=-1)
    returns = torch.cat([(first + first_value).unsqueeze(-1), chain + values], dim=-1)
    return SEAdvantages(advantages, returns)


# The loss -------------------------------------------------------------------------------
class PPOLoss(NamedTuple):
    loss: Tensor  # the total, to minimise
    policy_loss: Tensor
    value_loss: Tensor
    entropy: Tensor
    approx_kl: Tensor  # E[(rho - 1) - log rho], no grad
    clip_fraction: Tensor  # share of decisions whose ratio was clipped, no grad


def ppo_loss(log_prob: Tensor, old_log_prob: Tensor, advantage: Tensor, entropy: Tensor,
             value: Tensor, old_value: Tensor, target: Tensor, clip_ratio: float,
             value_clip_ratio: float, value_weight: float, entropy_weight: float,
             adv_norm: bool = True) -> PPOLoss:
    r"""PPO's loss (module docstring) over ``D`` decisions and ``V`` SE-states.

    Args:
        log_prob, old_log_prob, advantage, entropy (Tensor): ``[D]`` per decision: the
            current and the collection-time log-probability of the action taken, its
            advantage and the policy's entropy.
        value, old_value, target (Tensor): ``[V]`` per SE-state: the value head's output
            now and at collection, and its target, all in the head's scale.
        clip_ratio (float): :math:`\epsilon`.
        value_clip_ratio (float): :math:`\epsilon_v`; 0 turns value clipping off.
        value_weight, entropy_weight (float): :math:`w_v`, :math:`w_e`.
        adv_norm (bool, optional): Standardise ``advantage`` (population standard
            deviation, plus 1e-8). (default: :obj:`True`)
    """
    if advantage.numel() == 0:  # no decision with a choice: only the value loss
        log_prob = old_log_prob = advantage = entropy = value.new_zeros(1)
    elif adv_norm:
        advantage = (advantage - advantage.mean()) / (advantage.std(correction=0) + 1e-8)
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    pg_loss1 = -advantage * ratio
    pg_loss2 = -advantage * ratio.clamp(1.0 - clip_ratio, 1.0 + clip_ratio)
    policy_loss = torch.max(pg_loss1, pg_loss2).mean()
    v_loss_unclipped = (value - target).pow(2)
    if value_clip_ratio > 0:
        v_clipped = old_value + (value - old_value).clamp(-value_clip_ratio, value_clip_ratio)
        v_loss = torch.max(v_loss_unclipped, (v_clipped - target).pow(2))
    else:
        v_loss = v_loss_unclipped
    value_loss = 0.5 * v_loss.mean()
    mean_entropy = entropy.mean()
    loss = policy_loss + value_weight * value_loss - entropy_weight * mean_entropy
    with torch.no_grad():
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
        clip_fraction = ((ratio - 1.0).abs() > clip_ratio).float().mean()
    return PPOLoss(loss, policy_loss, value_loss, mean_entropy, approx_kl, clip_fraction)


class RunningMeanStd:
    """Running mean and variance of a stream of batches (Chan et al.'s parallel update),
    the scale of :attr:`ACEPPOConfig.value_norm`. Starts at mean 0, variance 1."""

    def __init__(self) -> None:
        self.mean = torch.zeros((), dtype=torch.float64)
        self.var = torch.ones((), dtype=torch.float64)
        self.count = torch.full((), 1e-4, dtype=torch.float64)

    def update(self, x: Tensor) -> None:
        x = x.detach().double().view(-1).cpu()
        if x.numel() == 0:
            return
        n, mean, var = x.numel(), x.mean(), x.var(correction=0)
        total = self.count + n
        delta = mean - self.mean
        m2 = self.var * self.count + var * n + delta.pow(2) * self.count * n / total
        self.mean, self.var, self.count = self.mean + delta * n / total, m2 / total, total

    @property
    def std(self) -> Tensor:
        return (self.var + 1e-8).sqrt()

    def normalize(self, x: Tensor) -> Tensor:
        return (x - self.mean.to(x)) / self.std.to(x)

    def denormalize(self, x: Tensor) -> Tensor:
        return x * self.std.to(x) + self.mean.to(x)

    def state_dict(self) -> dict:
        return {"mean": self.mean.clone(), "var": self.var.clone(), "count": self.count.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.mean, self.var, self.count = state["mean"].clone(), state["var"].clone(), state["count"].clone()


def _selection(ro: Rollout, name: str) -> Tensor:
    """``[num_agents]`` figure ``name`` the Softmax selector returned (NaN for every agent
    where the rollout made no choice)."""
    if ro.selection is None:
        return ro.chosen_value.new_full(ro.chosen_value.shape, float("nan"))
    return ro.selection[name]


def expected_first_value(ro: Rollout) -> Tensor:
    r"""``[num_graphs]`` :math:`\sum_a \pi(a \mid s) V(s_a)` over the first agent's
    candidates, from a rollout with a logit head (``max_steps=1`` is enough); the raw
    head outputs. A state without agents reads 0."""
    idx = ro.encoded.index
    first = ro.first_agent  # [B]
    B = idx.num_graphs
    if ro.candidate_logits is None:
        raise ValueError("expected_first_value needs a rollout with a logit head")
    cand = (idx.action_agent == first.clamp(min=0)[idx.action_batch]) \
        & (first[idx.action_batch] >= 0) & ~torch.isnan(ro.candidate_logits)  # [A]
    graph = idx.action_batch[cand]
    logits, values = ro.candidate_logits[cand], ro.candidate_values[cand]
    top = scatter(logits, graph, dim=0, dim_size=B, reduce="max")
    weight = (logits - top[graph]).exp()
    total = scatter(weight, graph, dim=0, dim_size=B, reduce="sum")
    weighted = scatter(weight * values, graph, dim=0, dim_size=B, reduce="sum")
    return torch.where(total > 0, weighted / total.clamp(min=1e-30), torch.zeros_like(total))


class _Round(NamedTuple):
    """What a pass over the round reads: targets in the value head's scale."""

    advantage: Tensor  # [N, n] per agent (batch order within a row)
    target: Tensor  # [N, n + 1] value targets: s, then after each agent (batch order)


class ACEPPO(LearnerBase):
    """The ACE-PPO learner: the ACE network with a logit head, the optimiser and the
    value normaliser; trained by :class:`~acegnn.algos.on_policy.OnPolicyTrainer`.

    Args:
        schema (GraphSchema): The task's schema.
        cfg (ACEPPOConfig): Algorithm hyper-parameters.
        model (ModelConfig): Network hyper-parameters (the logit head copies the value
            head's ``hidden``, ``pool``, ``layers`` and ``init``).
        device (str or torch.device, optional): (default: :obj:`"cpu"`)
    """

    config_class = ACEPPOConfig
    compiled_kernels = True
    model_class = ModelConfig
    loop = "on_policy"

    def __init__(self, schema: GraphSchema, cfg: ACEPPOConfig, model: ModelConfig,
                 device="cpu", example: Optional[Batch] = None) -> None:
        net = ACENetwork.from_config(schema, model)
        # trained, clipped and saved with the network
        net.add_module("logit_head", init_relu_layers(
            ValueHead(model.hidden, model.pool, model.value_depth), model.init))
        super().__init__(net, cfg, device)
        self.value_norm = RunningMeanStd()

    def _to_value(self, out: Tensor) -> Tensor:
        """V from the value head's output (its standardised scale with ``value_norm``)."""
        return self.value_norm.denormalize(out) if self.cfg.value_norm else out

    def _to_head(self, value: Tensor) -> Tensor:
        return self.value_norm.normalize(value) if self.cfg.value_norm else value

    def _rollout(self, graphs: Batch, selector, order=None, generator=None, **kw) -> Rollout:
        return self.net.rollout(self.on_device(graphs), order=self.cfg.order if order is None else order,
                                selector=selector, generator=generator, check=self._check(),
                                logit_head=self.net.logit_head, **kw)

    # Acting ---------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, graphs: Batch, epsilon: float = 0.0,
            generator: Optional[torch.Generator] = None) -> Tensor:
        """The policy's most probable sequential decision (evaluation); ``[num_agents]``
        action ids. ACE-PPO explores by sampling (:meth:`explore`): ``epsilon`` must be 0."""
        if epsilon != 0.0:
            raise ValueError(f"ACE-PPO explores by sampling its policy, not epsilon-greedily "
                             f"(got epsilon={epsilon})")
        return self._rollout(graphs, Softmax(greedy=True), generator=generator).actions

    @torch.no_grad()
    def decide(self, graphs: Batch, generator: Optional[torch.Generator] = None) -> Rollout:
        """The decision of :meth:`act` with every candidate valued (for drawing it,
        :mod:`acegnn.viz`)."""
        return self._rollout(graphs, Softmax(greedy=True), generator=generator)

    @torch.no_grad()
    def explore(self, graphs: Batch, generator: Optional[torch.Generator] = None
                ) -> Tuple[Tensor, Dict[str, Tensor]]:
        """A decision sampled from the policy, and per state ``[num_graphs, ...]`` what
        learning needs of it: ``log_prob`` ``[B, n]`` (per agent), ``value`` ``[B, n]``
        (the value head's output on the SE-state after each agent), ``first_value``
        ``[B]`` (on the first SE-state), ``rank`` ``[B, n]`` and ``choice`` ``[B, n]``
        (more than one available action)."""
        sel = Softmax()
        ro = self._rollout(graphs, sel, generator=generator)
        idx = ro.encoded.index
        B, n = idx.num_graphs, idx.num_agents // max(idx.num_graphs, 1)
        if n * B != idx.num_agents:
            raise ValueError("ACE-PPO needs the same number of agents in every state")
        choices = torch.bincount(idx.action_agent[idx.action_available], minlength=idx.num_agents)
        extras = {"log_prob": _selection(ro, "log_prob").view(B, n), "value": ro.chosen_value.view(B, n),
                  "first_value": self.net.value(ro.encoded.units, ro.encoded),
                  "rank": ro.rank.view(B, n), "choice": (choices > 1).view(B, n)}
        return ro.actions, {k: v.cpu() for k, v in extras.items()}

    # Learning -------------------------------------------------------------------------
    def evaluate_actions(self, graphs: Batch, actions: Tensor, rank: Tensor):
        """The current policy and values at replayed decisions: ``(log_prob, entropy,
        value)``, the first two ``[num_agents]``, ``value`` ``[num_graphs, n + 1]`` (the
        value head's output on ``s`` and after each agent, batch order)."""
        sel = Softmax(actions.view(-1))
        ro = self._rollout(graphs, sel, order=rank.view(-1))
        B = ro.encoded.index.num_graphs
        first = self.net.value(ro.encoded.units, ro.encoded)
        value = torch.cat([first.unsqueeze(1), ro.chosen_value.view(B, -1)], dim=1)
        return _selection(ro, "log_prob"), _selection(ro, "entropy"), value

    @torch.no_grad()
    def _head_values(self, data: Trajectories, graphs, chunk: int) -> Tuple[Tensor, Tensor]:
        """The value head's outputs of every row now: ``[N]`` on ``s`` and ``[N, n]``
        after each agent (batch order); only the chosen candidates are valued."""
        firsts, afters = [], []
        for rows in torch.arange(data.num_rows).split(chunk):
            g = self.on_device(graphs(data.rows(rows)))
            ro = self.net.value_actions(g, data.actions[rows].view(-1),
                                        order=data.extras["rank"][rows].view(-1).to(self.device),
                                        check=False)
            firsts.append(self.net.value(ro.encoded.units, ro.encoded))
            afters.append(ro.chosen_value.view(rows.numel(), -1))
        return torch.cat(firsts).cpu(), torch.cat(afters).cpu()

    @torch.no_grad()
    def _bootstraps(self, data: Trajectories, graphs, chunk: int,
                    generator: Optional[torch.Generator]) -> Tensor:
        """``[N]`` V of the next SE-state in expectation over the first agent's policy,
        at the rows that are cut (0 elsewhere)."""
        out = torch.zeros(data.num_rows)
        cut = data.cut.nonzero().view(-1)
        for rows in cut.split(chunk):
            g = graphs({k: v[rows] for k, v in data.next_obs.items()})
            ro = self._rollout(g, Softmax(greedy=True), generator=generator, max_steps=1)
            out[rows] = self._to_value(expected_first_value(ro)).cpu()
        return out

    def _advantages(self, data: Trajectories, first_out: Tensor, after_out: Tensor,
                    bootstrap: Tensor) -> Tuple[Tensor, Tensor]:
        """GAE of a round from the head's outputs: ``[N, n]`` advantages and ``[N, n + 1]``
        returns, per agent in batch order (returns: ``s`` first)."""
        cfg = self.cfg
        N, n = after_out.shape
        T, E = data.num_steps, data.num_envs
        rank = data.extras["rank"]  # [N, n]
        rows = torch.arange(N).unsqueeze(1).expand(N, n)
        by_rank = torch.empty_like(after_out)
        by_rank[rows, rank] = self._to_value(after_out)

        def dense(x: Tensor, fill) -> Tensor:  # [N, ...] -> [T, E, ...]
            out = x.new_full((T, E, *x.shape[1:]), fill)
            out[data.time, data.env] = x
            return out

        adv = se_gae(dense(self._to_value(first_out), 0.0), dense(by_rank, 0.0),
                     dense(data.reward.float(), 0.0), dense(data.terminated, True),
                     dense(data.cut, False), dense(bootstrap, 0.0), cfg.gamma, cfg.gae_lambda)
        adv_rank = adv.advantages[data.time, data.env]  # [N, n] by decision position
        ret = adv.returns[data.time, data.env]  # [N, n + 1]
        advantage = adv_rank.gather(1, rank)  # per agent
        returns = torch.cat([ret[:, :1], ret[:, 1:].gather(1, rank)], dim=1)
        return advantage, returns

    def learn(self, data: Trajectories, graphs: Callable[[Dict[str, Tensor]], Batch],
              updates: int, batch_size: int,
              generator: Optional[torch.Generator] = None) -> Dict[str, float]:
        """A round of PPO: ``updates`` gradient steps on minibatches of ``batch_size``
        rows, in shuffled passes over ``data``. With ``recompute_adv``, every pass after
        the first recomputes the values, advantages and returns with the current network.

        Args:
            data (Trajectories): The round, collected with :meth:`explore`.
            graphs (callable): Observations -> graph batch (the task's ``graphs``).
            updates (int): Gradient steps.
            batch_size (int): Rows (environment steps) per minibatch.
            generator (torch.Generator, optional): Shuffles the passes (and draws a random
                agent order where one is needed).
        """
        cfg = self.cfg
        N = data.num_rows
        old_out = torch.cat([data.extras["first_value"].unsqueeze(1), data.extras["value"]], 1)
        old_log_prob, choice = data.extras["log_prob"], data.extras["choice"]
        # the first pass reads the collection's outputs: the network has not changed
        bootstrap = self._bootstraps(data, graphs, batch_size, generator)
        advantage, returns = self._advantages(data, data.extras["first_value"],
                                              data.extras["value"], bootstrap)
        if cfg.value_norm:
            self.value_norm.update(returns)
        target = self._to_head(returns)
        totals: Dict[str, float] = {}
        order, pos = torch.randperm(N, generator=generator), 0
        for u in range(updates):
            if pos >= N:  # a new pass over the round
                order, pos = torch.randperm(N, generator=generator), 0
                if cfg.recompute_adv:
                    first_out, after_out = self._head_values(data, graphs, batch_size)
                    bootstrap = self._bootstraps(data, graphs, batch_size, generator)
                    advantage, returns = self._advantages(data, first_out, after_out, bootstrap)
                    target = self._to_head(returns)
            rows = order[pos:pos + batch_size]
            pos += batch_size
            m = self._step(graphs(data.rows(rows)), data.actions[rows], data.extras["rank"][rows],
                           old_log_prob[rows], advantage[rows], choice[rows], old_out[rows],
                           target[rows])
            for k, v in m.items():
                totals[k] = totals.get(k, 0.0) + v / updates
        totals["value_mean"] = float(returns.mean())
        totals["advantage_std"] = float(advantage[choice].std()) if int(choice.sum()) > 1 else 0.0
        return totals

    def _step(self, graphs: Batch, actions: Tensor, rank: Tensor, old_log_prob: Tensor,
              advantage: Tensor, choice: Tensor, old_out: Tensor, target: Tensor) -> Dict[str, float]:
        """One gradient step on a minibatch of rows (tensors ``[m, n]``, the value ones
        ``[m, n + 1]``)."""
        cfg = self.cfg
        log_prob, entropy, value = self.evaluate_actions(graphs, actions, rank.to(self.device))
        dev = lambda x: x.to(self.device)  # noqa: E731
        keep = dev(choice.reshape(-1))
        out = ppo_loss(log_prob[keep], dev(old_log_prob.reshape(-1))[keep],
                       dev(advantage.reshape(-1))[keep], entropy[keep], value.reshape(-1),
                       dev(old_out.reshape(-1)), dev(target.reshape(-1)), cfg.clip_ratio,
                       cfg.value_clip_ratio, cfg.value_weight, cfg.entropy_weight, cfg.adv_norm)
        grad_norm = self.gradient_step(out.loss, "PPO loss")["grad_norm"]
        return {"loss": out.loss.item(), "policy_loss": out.policy_loss.item(),
                "value_loss": out.value_loss.item(), "entropy": out.entropy.item(),
                "approx_kl": out.approx_kl.item(), "clip_fraction": out.clip_fraction.item(),
                "grad_norm": grad_norm}

    # Checkpoints ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {**super().state_dict(), "value_norm": self.value_norm.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.value_norm.load_state_dict(state["value_norm"])

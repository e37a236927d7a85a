"""The contract between tasks (environments) and learners.

A :class:`VecTask` steps many environments at once and turns their observations into
graph batches. Observations are plain tensors, batch first; the replay buffer stores
them and graphs are built only when a batch is sampled.

* **Evaluation**: :meth:`VecTask.evaluate` plays test episodes with a policy (usually
  with :func:`first_episodes`) and returns an :class:`EvalResult`, which names the
  success criterion and the metrics shown while training. A task that evaluates a
  deterministic policy exactly derives from :class:`ExactEvaluation`.
* **Snapshots**: :meth:`VecTask.state_dict` returns the engine state, and a resumed run
  continues the same episodes. ``None`` (the default) means the engine cannot be saved:
  a resumed run starts fresh episodes.
* **Agents that cannot act** (a dead unit): every state has the same ``n_agents``
  agents. An agent that cannot act stays a node, and its only available action is the
  :attr:`VecTask.noop_action` slot (:func:`acegnn.graph.only_noop`).
* **Partial observation**: a task puts an ``observes`` matrix on its agent node stores
  (:func:`acegnn.graph.index.observed_units`). Without it, every agent observes every
  unit.
* **Engines that fail**: a task that restarts engine processes marks the environments
  whose step was lost in :attr:`Transition.dropped`. The collector stores none of their
  transitions and drops their episodes.

See docs/new_environment.md for a worked example and the reasons behind each rule.
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Callable, ClassVar, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.graph.schema import GraphSchema

ObsSpec = Dict[str, Tuple[Tuple[int, ...], torch.dtype]]

#: A policy maps a graph batch to the ``[num_agents]`` chosen action slots.
Policy = Callable[[Batch], Tensor]


class Transition(NamedTuple):
    """One step of every environment."""

    reward: Tensor  # [num_envs] float
    terminated: Tensor  # [num_envs] bool: true end, no bootstrap
    truncated: Tensor  # [num_envs] bool: time limit, bootstrap from next_obs
    next_obs: Dict[str, Tensor]  # true next observations (before any auto-reset)
    dropped: Optional[Tensor] = None  # [num_envs] bool: engine restarted, not a real step
    info: Optional[Dict[str, Tensor]] = None
    """``{name: [num_envs]}`` outcomes a task reports of the step (a battle's ``won``);
    read where an episode ends: evaluation and the training log average them over
    episodes."""


@dataclasses.dataclass
class EvalResult:
    """Base of a task's evaluation result: a dataclass whose fields are its metrics.

    Subclasses set the class variables:

    * :attr:`success_metric`: the field that decides whether an evaluation succeeded
      (with :attr:`success_threshold`; e.g. Spiders-and-Fly's ``success_rate`` of 1.0);
    * :attr:`headline`: the fields the progress bar shows.

    Fields are logged in their order (``eval.csv``, TensorBoard ``eval/<field>``).
    """

    success_metric: ClassVar[str] = ""
    success_threshold: ClassVar[float] = 1.0
    headline: ClassVar[Tuple[str, ...]] = ()

    def metrics(self) -> Dict[str, float]:
        """The metrics by name, in field order."""
        return {f.name: float(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @property
    def succeeded(self) -> bool:
        """Whether the success metric reached its threshold."""
        if not self.success_metric:
            return False
        return float(getattr(self, self.success_metric)) >= self.success_threshold


@dataclasses.dataclass
class Evaluations(EvalResult):
    """The evaluation of a main policy beside other named policies on the same episodes
    (:func:`evaluate_policies`): the main policy's result decides success and heads the
    progress bar; the others' metrics follow, prefixed ``<name>_``.

    Args:
        main (EvalResult): The main policy's result (its fields read through this one).
        others (dict): ``{name: EvalResult}`` of the other policies.
    """

    main: EvalResult
    others: Dict[str, EvalResult]

    def metrics(self) -> Dict[str, float]:
        out = self.main.metrics()
        for name, result in self.others.items():
            out.update({f"{name}_{k}": v for k, v in result.metrics().items()})
        return out

    @property
    def succeeded(self) -> bool:
        return self.main.succeeded

    @property
    def headline(self) -> Tuple[str, ...]:  # type: ignore[override]
        """The main policy's headline, then each other policy's success metric."""
        return tuple(self.main.headline) + tuple(
            f"{name}_{r.success_metric}" for name, r in self.others.items() if r.success_metric)

    def __getattr__(self, name: str):
        if name in ("main", "others") or name.startswith("__"):  # not set yet (copying)
            raise AttributeError(name)
        return getattr(self.main, name)


def evaluate_policies(evaluate: Callable[[Policy], EvalResult], act: Policy,
                      others: Mapping[str, Policy]) -> EvalResult:
    """``evaluate(act)``, and with ``others`` (``{name: policy}``) an :class:`Evaluations`
    that adds ``evaluate(policy)`` of each, e.g. ACE-CTDE's decentralised policy as
    ``dec`` beside the centralised one.

    Args:
        evaluate: One of a task's evaluations with its settings bound, e.g.
            ``lambda act: task.evaluate(act, episodes, seed)``.
        act (Policy): The main policy.
        others (Mapping[str, Policy]): Other policies by name (letters, digits, ``_``).
    """
    bad = [name for name in others if not name or not name.replace("_", "").isalnum()]
    if bad:
        raise ValueError(f"policy names must be letters, digits and '_' (got {bad})")
    main = evaluate(act)
    if not others:
        return main
    return Evaluations(main, {name: evaluate(policy) for name, policy in others.items()})


def named_policies(learner, seed: int) -> Dict[str, Policy]:
    """The other greedy policies a learner offers to be evaluated beside its own, by
    name: what its optional ``policies(seed)`` method returns (ACE-CTDE: ``dec``, the
    decentralised policy), else none. ``seed`` seeds what the policies draw, as for
    :func:`acegnn.algos.trainer.greedy`."""
    offer = getattr(learner, "policies", None)
    return dict(offer(seed)) if offer is not None else {}


@dataclasses.dataclass(frozen=True)
class Scene:
    """How a task's states are drawn (:mod:`acegnn.viz`): the extent of the plane its
    unit positions live in, background segments (grid lines, a pitch) and the
    displacement a move action draws as an arrow. Plain numbers: no drawing library."""

    xlim: Tuple[float, float]
    ylim: Tuple[float, float]
    lines: Tuple[Tuple[Tuple[float, float], Tuple[float, float]], ...] = ()
    """Background segments ``((x0, y0), (x1, y1))``."""
    moves: Tuple[Tuple[str, Tuple[float, float]], ...] = ()
    """``(action kind name, (dx, dy))`` of the kinds drawn as a move arrow."""
    invert_y: bool = False
    """Whether y grows downwards (a grid's rows)."""

    def move(self, kind: str) -> Optional[Tuple[float, float]]:
        return dict(self.moves).get(kind)


class VecTask(abc.ABC):
    """Vectorised cooperative multi-agent task whose states are graphs.

    Subclasses set :attr:`schema`, :attr:`num_envs`, :attr:`n_agents` and
    :attr:`obs_spec` and implement the abstract methods. Every state has
    :attr:`n_agents` agents; agent ``i`` of state ``b`` is row ``b * n_agents + i`` of
    the rollout's per-agent tensors.
    """

    schema: GraphSchema
    num_envs: int
    n_agents: int
    obs_spec: ObsSpec  # name -> (per-env shape, storage dtype)
    noop_action: Optional[int] = None
    """The action slot of an agent that can no longer act (its only available one);
    ``None`` for tasks whose agents can always act."""

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
    def evaluate(self, act: Policy, episodes: int, seed: int) -> EvalResult:
        """Play ``episodes`` test episodes with ``act``; the same ``seed`` plays the same
        starts (and, for a deterministic policy, the same episodes)."""

    def state_dict(self) -> Optional[dict]:
        """Everything needed to continue the same trajectories, or ``None`` when the
        engine cannot be snapshotted (a resumed run then starts fresh episodes)."""
        return None

    def load_state_dict(self, state: dict) -> None:
        raise ValueError(f"{type(self).__name__} cannot restore environment state")

    def close(self) -> None:
        """Release engines and processes (nothing to do for in-process tasks)."""

    def scene(self) -> Optional[Scene]:
        """How to draw this task's states (:mod:`acegnn.viz`); ``None``: units are laid
        out on circles, with no background."""
        return None

    def unit_positions(self, graphs: Batch) -> Optional[Tensor]:
        """``[num_units, 2]`` drawing positions of the batch's units, in the flat unit
        order of :func:`acegnn.graph.unit_index`, in the :meth:`scene`'s plane; ``None``
        when the task has no positions."""
        return None


def check_actions(actions: Tensor, avail: Tensor, names: Optional[Sequence[str]] = None) -> Tensor:
    """``actions`` ``[num_envs, n_agents]`` as long integers on the CPU, refused with a
    ``ValueError`` that names the first one out of range or not available in ``avail``
    ``[num_envs, n_agents, slots]`` (and what is available, by ``names`` if given)."""
    avail = avail.cpu().bool()
    if tuple(actions.shape) != tuple(avail.shape[:2]):
        raise ValueError(f"actions must be [{avail.size(0)}, {avail.size(1)}] "
                         f"(got {tuple(actions.shape)})")
    actions = actions.long().cpu()
    slots = avail.size(2)
    inside = (actions >= 0) & (actions < slots)
    ok = inside & avail.gather(2, actions.clamp(0, slots - 1).unsqueeze(-1)).squeeze(-1)
    if not bool(ok.all()):
        b, i = (int(v) for v in (~ok).nonzero()[0])
        free = avail[b, i].nonzero().view(-1).tolist()
        free = [names[k] for k in free] if names is not None else free
        raise ValueError(f"action {int(actions[b, i])} of agent {i} in game {b} is not "
                         f"available (available: {free})")
    return actions


class Episodes(NamedTuple):
    """The first episode of every environment of a task (:func:`first_episodes`)."""

    start: Dict[str, Tensor]  # the observations the episodes started from
    returns: Tensor  # [num_envs] undiscounted return
    length: Tensor  # [num_envs] steps; max_steps for an episode still running then
    terminated: Tensor  # [num_envs] bool: ended by the task, not by a time limit
    info: Dict[str, Tensor]  # {name: [num_envs]} the task's step info at each episode's end


def first_episodes(task: VecTask, act: Policy, max_steps: int,
                   on_step: Optional[Callable[[Batch, Tensor, Tensor, Tensor], None]] = None
                   ) -> Episodes:
    """Play the first episode of each of ``task``'s environments with ``act``, ignoring
    what the environments do after their auto-reset: the loop of a test evaluation.

    An environment whose engine was restarted (:attr:`Transition.dropped`) plays its
    episode again from the engine's new start.

    Args:
        task (VecTask): A task made for the evaluation (one environment per episode).
        act (Policy): Graph batch -> ``[num_agents]`` actions.
        max_steps (int): Stop an episode after this many steps (the task's time limit).
        on_step (callable, optional): Called after every step with the graphs acted on,
            the actions ``[num_envs, n_agents]``, which environments' steps belong to
            their first episode ``[num_envs]`` bool (not a step after the episode's end,
            nor one an engine restart dropped) and which environments' episodes an
            engine restart voided at this step ``[num_envs]`` bool (they play again from
            the start: what was recorded of them is to be forgotten).
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be positive (got {max_steps})")
    start = task.observe()
    n = task.num_envs
    returns = torch.zeros(n)
    length = torch.full((n,), max_steps, dtype=torch.long)
    terminated = torch.zeros(n, dtype=torch.bool)
    running = torch.ones(n, dtype=torch.bool)
    began = torch.zeros(n, dtype=torch.long)  # the step before the episode's first
    info: Dict[str, Tensor] = {}
    t = 0
    while bool(running.any()):
        t += 1
        graphs = task.graphs(task.observe())
        actions = act(graphs).view(n, task.n_agents).cpu()
        tr = task.step(actions)
        lost = torch.zeros(n, dtype=torch.bool)
        if tr.dropped is not None and bool((tr.dropped & running).any()):
            lost = tr.dropped & running
            returns[lost], began[lost] = 0.0, t
            tr = tr._replace(reward=tr.reward.masked_fill(lost, 0.0),
                             terminated=tr.terminated & ~lost, truncated=tr.truncated & ~lost)
        if on_step is not None:
            on_step(graphs, actions, running & ~lost, lost)
        returns += tr.reward * running
        ended = running & (tr.terminated | tr.truncated | (t - began >= max_steps))
        length[ended] = (t - began)[ended]
        terminated |= ended & tr.terminated
        for k, v in (tr.info or {}).items():
            info.setdefault(k, torch.zeros_like(v))[ended] = v[ended]
        running &= ~ended
    return Episodes(start, returns, length, terminated, info)


class ExactEvaluation(abc.ABC):
    """Capability of a task small enough to evaluate a deterministic policy exactly."""

    @abc.abstractmethod
    def exact_evaluate(self, act: Policy) -> EvalResult:
        """Noise-free metrics of the deterministic policy ``act``."""

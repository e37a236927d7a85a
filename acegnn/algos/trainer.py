"""The training loops: what every loop shares, and the off-policy loop of the
value-based learners.

:class:`TrainingLoop` is one round after another: collect
(:class:`~acegnn.algos.collector.Collector`) -> learn -> the task's evaluation, with
TensorBoard/CSV logs, atomic checkpoints (:mod:`acegnn.algos.checkpoint`) and exact
resume where the task can be snapshotted. A loop says how it collects and learns:

* :class:`Trainer`: off-policy, epsilon-greedy into a replay buffer, updates on replayed
  batches (ACE-DQN, the baselines);
* :class:`~acegnn.algos.on_policy.OnPolicyTrainer`: a round of the learner's own policy,
  learned from and dropped (ACE-PPO).

A learner names its loop in its ``loop`` attribute (``"off_policy"`` when it has none;
:func:`acegnn.run.loop_of`).
"""
from __future__ import annotations

import abc
import copy
import hashlib
import inspect
import math
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.algos.base import LearnerBase, zero_fraction
from acegnn.algos.checkpoint import (CHECKPOINT_VERSION, SUCCESS_CHECKPOINT, checkpoint_path,
                                     save_checkpoint)
from acegnn.algos.collector import Collector, Step
from acegnn.buffers.replay import NStepRows, NStepWindow, ReplayBuffer, ReplaySample
from acegnn.envs.base import (EvalResult, ExactEvaluation, Policy, VecTask, evaluate_policies,
                              named_policies)
from acegnn.utils.heap import keep_freed_memory
from acegnn.utils.logger import Logger
from acegnn.utils.phases import phase
from acegnn.utils.provenance import commits, record_session


@dataclass
class TrainConfig:
    """Training loop settings (defaults: the paper's Spiders-and-Fly table)."""

    total_samples: int = 1_000_000
    """Environment steps to collect at most."""
    samples_per_collect: int = 1024
    """Environment steps between two rounds of updates."""
    episodes_per_collect: int = 0
    """When positive, a round collects until this many episodes have ended instead of
    ``samples_per_collect`` steps (the paper's episode_per_collect on SMAC and GRF)."""
    updates_per_collect: int = 10
    """Gradient steps per round."""
    batch_size: int = 256
    """Transitions per gradient step."""
    buffer_size: int = 1_000_000
    """Replay capacity in transitions."""
    priority_alpha: float = 0.0
    """Prioritized replay (Schaul et al., 2016, proportional): transitions are drawn
    with probability proportional to their priority to this power, the priority being
    the absolute TD error of their last replay (the mean over a state's SE-states for
    ACE), new ones at the largest priority so far; the TD loss weights each by its
    importance-sampling weight (:class:`~acegnn.buffers.replay.ReplayBuffer`). 0: uniform
    replay, the paper's and the official code's (its ``priority=False``). The learner's
    ``update`` must take ``weights`` (ACE-DQN, ACE-CTDE and the value-decomposition
    baselines do)."""
    priority_beta: float = 0.4
    """With ``train.priority_alpha > 0``: the importance-sampling exponent at the start,
    raised linearly to 1 at ``train.total_samples`` (Schaul et al.: 0.4 with alpha 0.6)."""
    priority_eps: float = 1e-6
    """With ``train.priority_alpha > 0``: added to each absolute TD error, so that no
    transition's priority is 0."""
    learning_starts: int = 1024
    """Environment steps collected before the first update."""
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_decay: int = 150_000
    """Environment steps over which epsilon decays linearly from eps_start to eps_end."""
    eval_every: int = 10_240
    """Environment steps between evaluations (0: never)."""
    eval_episodes: int = 32
    """Greedy test episodes per evaluation."""
    eval_seed: int = 12345
    """Seed of the test episodes: every evaluation plays the same starts."""
    exact_eval_every: int = 0
    """Environment steps between exact evaluations of the greedy policy, on tasks that
    have one (Spiders-and-Fly: every state tabulated, the fly's moves in expectation),
    logged in ``eval.csv`` and TensorBoard as ``exact_*`` (0: never). It draws from none
    of the run's random streams, so training is the same with or without it."""
    log_episode: bool = False
    """At each evaluation, draw one greedy test episode into TensorBoard (images under
    ``eval/episode``; ACE learners; needs the ``viz`` extra). It draws from none of the
    run's random streams."""
    stop_on_success: bool = True
    """Stop once an evaluation succeeds in every test episode."""
    checkpoint_every: int = 102_400
    """Environment steps between checkpoints (0: only at the end)."""
    halt_after: int = 0
    """Testing aid: exit as if killed after this many steps (0: never)."""
    max_minutes: float = 0.0
    """Wall-clock minutes of one session (one ``acegnn train`` or ``--resume``) after
    which the run stops at the end of the round, checkpointed; ``--resume`` goes on
    (0: no limit). A session trains one round at least."""
    device: str = "cpu"
    """Where the learner's networks live and learn (``cpu``, ``cuda``, ``cuda:1``); the
    environments and the replay stay on the CPU and each batch is moved over."""
    progress: bool = True
    """Show a progress bar."""
    compile: bool = False
    """Value the candidates of decisions and TD targets through kernels compiled by
    ``torch.compile`` (ACE learners; :func:`acegnn.nn.value_head.compiled`): the same
    values to float rounding, 10-25% less time an update on CPU, after a compilation of
    about a minute at the start of each session (needs a C++ compiler;
    docs/benchmarks.md)."""
    compile_optimizer: bool = False
    """Step the optimiser through ``torch.compile`` (every learner;
    :meth:`acegnn.algos.base.LearnerBase.compile_optimizer`): one fused pass per
    parameter instead of one per operation. The same weights to float rounding; on CPU
    the recommended football config's optimiser phase (RMSprop over 6.2M weights, the
    gradient clip and the target update) took half the time, after a compilation of
    about 40 s at the start of each session (docs/benchmarks.md)."""
    flush_denormal: bool = True
    """Flush denormal floats to zero while training (``torch.set_flush_denormal``, on
    the training thread). Weights and RMSprop statistics that decay towards zero become
    denormal, whose arithmetic is many times slower on x86 CPUs: a football update of the
    recommended config took 1.5 times as long at 300k steps without it. Values below
    1.2e-38 become 0; ``false`` keeps PyTorch's default."""
    keep_heap: bool = True
    """Keep freed memory in the process's heap (glibc's ``mallopt``; elsewhere nothing):
    the update's large tensors, freed and allocated anew every update, then reuse pages
    instead of faulting fresh ones in (:func:`acegnn.utils.heap.keep_freed_memory`): on
    SMAX 5m_vs_6m 6% (recommended config) to 22% (the paper's) less CPU time an update
    (docs/benchmarks.md). For the rest of the process, which keeps its largest update's
    memory; nothing learned changes."""
    overlap: bool = False
    """Collect the next round while the learner updates (the off-policy loop): a thread
    collects round k+1 with a copy of the network as it was before round k's updates,
    so engines and learner work at the same time; the collecting policy is one round
    older than without. Updates per collected episode are unchanged; the round collected
    during the last updates is not learned from. A change of what is learned."""
    teacher: Optional[str] = None
    """A run directory or checkpoint of an off-policy learner whose policy plays a share
    of the episodes that fill the replay. It acts epsilon-greedily at this run's epsilon,
    its steps count towards ``train.total_samples`` and the epsilon decay, and
    evaluations play only the learner's policy. Each session loads it again, so it must
    not change until the run ends; a resumed run refuses a changed teacher."""
    teacher_share: float = 0.5
    """With ``train.teacher``: the share of the rounds in which the teacher begins the
    episodes, spread evenly (0.5: every second round, 1: every round). An episode is
    played to its end by the policy that began it, also across rounds."""

    def replay_capacity(self, num_envs: int) -> int:
        """Transitions the replay buffer holds: no more than the run can collect, which
        is known when rounds are counted in steps; a round of whole episodes can end
        anywhere, so the full ``buffer_size`` then."""
        if self.episodes_per_collect > 0:
            return self.buffer_size
        return min(self.buffer_size, self.total_samples + num_envs)

    def __post_init__(self) -> None:
        for key in ("total_samples", "samples_per_collect", "batch_size", "buffer_size",
                    "eval_episodes"):
            if getattr(self, key) <= 0:
                raise ValueError(f"train.{key} must be positive (got {getattr(self, key)})")
        for key in ("updates_per_collect", "episodes_per_collect", "learning_starts",
                    "eps_decay", "eval_every",
                    "exact_eval_every", "checkpoint_every", "halt_after"):
            if getattr(self, key) < 0:
                raise ValueError(f"train.{key} must be >= 0 (got {getattr(self, key)})")
        if self.max_minutes < 0:
            raise ValueError(f"train.max_minutes must be >= 0 (got {self.max_minutes})")
        if not self.priority_alpha >= 0 or not 0 <= self.priority_beta <= 1 \
                or not self.priority_eps > 0:
            raise ValueError(f"train.priority_alpha must be >= 0, train.priority_beta in [0, 1] "
                             f"and train.priority_eps > 0 (got {self.priority_alpha}, "
                             f"{self.priority_beta}, {self.priority_eps})")
        if not 0 <= self.teacher_share <= 1:
            raise ValueError(f"train.teacher_share must be in [0, 1] (got {self.teacher_share})")
        if not 0 <= self.eps_end <= 1 or not 0 <= self.eps_start <= 1:
            raise ValueError(f"train.eps_start/eps_end must be in [0, 1] "
                             f"(got {self.eps_start}, {self.eps_end})")


class Learner(Protocol):
    r"""What the off-policy loop needs of a learner (ACE-DQN, the baselines).

    ``update`` learns from transitions ``s -> s'`` (``next_graphs``). With
    ``algo.nstep > 1`` (read from the learner's ``cfg``; 1 without one) the loop also
    passes ``boot_graphs``, the states :math:`s_{t+m}` to bootstrap from, and
    ``discount`` ``[B]``, their factor (:math:`\gamma^m`, 0 after a termination), which
    replaces :math:`\gamma (1 - d)`; with ``nstep = 1`` it passes neither, so a learner
    without these keywords serves one-step returns. With ``train.priority_alpha > 0`` it
    also passes ``weights`` ``[B]``, the importance-sampling weights of a prioritized
    replay, and the metrics returned must then hold ``td_errors`` ``[B]`` (a tensor: each
    transition's absolute TD error, its new priority)."""

    config_class: type  # its ``algo`` config dataclass
    model_class: type  # its ``model`` config dataclass

    def act(self, graphs: Batch, epsilon: float = 0.0,
            generator: Optional[torch.Generator] = None) -> Tensor: ...

    def update(self, graphs: Batch, actions: Tensor, reward: Tensor, terminated: Tensor,
               next_graphs: Batch, generator: Optional[torch.Generator] = None, *,
               boot_graphs: Optional[Batch] = None, discount: Optional[Tensor] = None,
               weights: Optional[Tensor] = None) -> Dict[str, float]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def weights_digest(state: Any) -> str:
    """SHA-256 of a nested state dict's tensors and values, keys in sorted order: whether
    two learners hold the same weights (``train.teacher``)."""
    digest = hashlib.sha256()

    def visit(x: Any, key: str) -> None:
        if isinstance(x, dict):
            for k in sorted(x, key=str):
                visit(x[k], f"{key}/{k}")
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                visit(v, f"{key}/{i}")
        elif isinstance(x, Tensor):
            digest.update(f"{key}:{x.dtype}:{tuple(x.shape)}".encode())
            digest.update(x.detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy())
        else:
            digest.update(f"{key}={x!r}".encode())

    visit(state, "")
    return digest.hexdigest()


def linear_epsilon(samples: int, start: float, end: float, decay: int) -> float:
    if decay <= 0:
        return end
    frac = min(1.0, samples / decay)
    return start + frac * (end - start)


def crossed(before: int, now: int, every: int) -> bool:
    """Whether a multiple of ``every`` lies in ``(before, now]``; never for ``every=0``."""
    return every > 0 and now // every > before // every


def greedy(learner: Learner, seed: int) -> Policy:
    """The learner's greedy policy. ``seed`` seeds the one generator it draws from (only a
    random agent order does), so evaluations of a policy with the same seed agree."""
    gen = torch.Generator().manual_seed(seed)
    return lambda g: learner.act(g, 0.0, gen)


#: Where a round's time goes: ``train.csv`` has a column ``<part>_s`` for each (the
#: evaluation includes the hooks called after it), and a run ends with their totals over
#: its sessions (``time_<part>_s``) and the time spent writing checkpoints.
TIME_PARTS = ("collect", "learn", "eval")
#: The parts a run's summary totals: ``TIME_PARTS`` and the checkpoints.
SPENT_PARTS = (*TIME_PARTS, "checkpoint")
#: The columns of ``train.csv`` that measure wall-clock, not learning: they differ
#: between two runs that learn exactly alike.
WALL_CLOCK_COLUMNS = ("env_steps_per_s", *(f"{part}_s" for part in TIME_PARTS))


def time_report(spent: Dict[str, float], wall: float) -> str:
    """One line: each part's seconds and share of ``wall`` (the rest: logging, start-up)."""
    parts = ", ".join(f"{part} {s:.0f} s ({s / max(wall, 1e-9):.0%})" for part, s in spent.items())
    return f"time of this session: {wall:.0f} s: {parts}"


class Halted(Exception):
    """Raised by ``train.halt_after`` to simulate a killed run."""


class TrainingLoop(abc.ABC):
    """Runs one experiment in ``run_dir``: what every loop shares. A loop implements
    :meth:`collect` and :meth:`learn` (one round each) and :meth:`_store` (the
    collector's sink), and adds its own state to :meth:`state_dict`.

    Args:
        task (VecTask): The training task.
        learner: The learner.
        cfg (TrainConfig): Loop settings.
        seed (int): Seed of exploration (``collect_gen``) and of sampling the data
            learned from (``sample_gen``).
        run_dir (str): Directory of logs and checkpoints (created).
        config (dict, optional): The resolved experiment config, saved in checkpoints.
        on_evaluate (list of callables, optional): Called as ``fn(trainer, result)``
            after every evaluation (e.g. drawing an episode into TensorBoard); they must
            not draw from the run's random generators.
    """

    def __init__(self, task: VecTask, learner, cfg: TrainConfig, seed: int,
                 run_dir: str, config: Optional[dict] = None,
                 on_evaluate: Sequence[Callable[["TrainingLoop", EvalResult], None]] = ()) -> None:
        self.task, self.learner, self.cfg, self.run_dir = task, learner, cfg, run_dir
        self.config = config or {}
        self.on_evaluate = list(on_evaluate)
        if cfg.exact_eval_every and not isinstance(task, ExactEvaluation):
            raise ValueError(f"train.exact_eval_every: {type(task).__name__} has no exact "
                             f"evaluation; set it to 0")
        os.makedirs(run_dir, exist_ok=True)
        self.collector = Collector(task, self._store)
        self.collect_gen = torch.Generator().manual_seed(seed * 2 + 1)
        self.sample_gen = torch.Generator().manual_seed(seed * 2 + 2)
        self.updates = 0
        self.samples_to_success: Optional[int] = None
        self.wall_s = 0.0  # training wall-clock of earlier sessions of this run (resume)
        self.spent_s = dict.fromkeys(SPENT_PARTS, 0.0)  # each part's seconds over the run
        self.wall_to_success: Optional[float] = None
        self._session_start: Optional[float] = None  # perf_counter() while train() runs
        self._session_samples = 0  # the samples when this session began
        self.last_eval: Dict[str, float] = {}
        self.headline: Tuple[str, ...] = ()  # the last evaluation's headline metrics
        self.logger: Optional[Logger] = None
        self.loaded = False  # state restored from a checkpoint
        if cfg.compile:
            use = getattr(learner, "use_compiled", None)
            if use is None or use(True) == 0:
                name = getattr(getattr(learner, "cfg", None), "name", type(learner).__name__)
                raise ValueError(LearnerBase.no_compiled_kernels(name))
        if cfg.compile_optimizer:
            learner.compile_optimizer()

    @property
    def samples(self) -> int:
        """Environment steps collected (passed to the loop's sink)."""
        return self.collector.samples

    # One round (the loop's own) -------------------------------------------------------
    @abc.abstractmethod
    def _store(self, step: Step) -> None:
        """Keep a collected step (the collector's sink)."""

    @abc.abstractmethod
    def collect(self) -> Dict[str, float]:
        """One round of collection; its metrics."""

    @abc.abstractmethod
    def learn(self) -> Dict[str, float]:
        """The round's gradient steps; their metrics."""

    def _collect_with(self, act) -> Dict[str, float]:
        """One round of the collector with ``act``: ``train.episodes_per_collect``
        episodes, or ``train.samples_per_collect`` steps."""
        if self.cfg.episodes_per_collect > 0:
            return self.collector.run(act, episodes=self.cfg.episodes_per_collect)
        steps = max(1, self.cfg.samples_per_collect // self.task.num_envs)
        return self.collector.run(act, steps)

    def _announce(self) -> None:
        """Said once on stderr when training starts (e.g. the memory it preallocated)."""

    def _progress(self, metrics: Dict[str, float]) -> Dict[str, float]:
        """The loop's own figures on the progress bar, besides loss and headline."""
        return {}

    def _policies(self, evaluate: Callable[[Policy], EvalResult]) -> EvalResult:
        """``evaluate`` of the greedy policy, and of the other policies the learner offers
        beside it (:func:`~acegnn.envs.base.named_policies`; ACE-CTDE's decentralised one),
        their metrics prefixed by name (``dec_*``); success is the greedy policy's."""
        seed = self.cfg.eval_seed
        return evaluate_policies(evaluate, greedy(self.learner, seed),
                                 named_policies(self.learner, seed))

    def evaluate(self) -> EvalResult:
        return self._policies(lambda act: self.task.evaluate(act, self.cfg.eval_episodes,
                                                             self.cfg.eval_seed))

    def exact_evaluate(self) -> EvalResult:
        return self._policies(self.task.exact_evaluate)

    # Checkpoints ----------------------------------------------------------------------
    @property
    def checkpoint_path(self) -> str:
        return checkpoint_path(self.run_dir)

    @property
    def success_path(self) -> str:
        return os.path.join(self.run_dir, SUCCESS_CHECKPOINT)

    def state_dict(self) -> dict:
        return {"version": CHECKPOINT_VERSION, "config": self.config, "updates": self.updates,
                "samples_to_success": self.samples_to_success,
                "wall_s": self.elapsed(), "wall_to_success": self.wall_to_success,
                "spent_s": dict(self.spent_s), "last_eval": dict(self.last_eval),
                "headline": list(self.headline),
                "learner": self.learner.state_dict(), "task": self.task.state_dict(),
                "collect_gen": self.collect_gen.get_state(),
                "sample_gen": self.sample_gen.get_state(), **self.collector.state_dict()}

    def save(self, path: Optional[str] = None) -> None:
        save_checkpoint(path or self.checkpoint_path, self.state_dict())

    def load_state_dict(self, state: dict, source: str = "the checkpoint") -> None:
        """Continue from a checkpoint's state (its config is checked by the caller, see
        :func:`acegnn.config.check_resumable`). A task that cannot be snapshotted starts
        fresh episodes, which is said once on stderr."""
        self.learner.load_state_dict(state["learner"])
        self.collector.load_state_dict(state)
        if state["task"] is not None:
            self.task.load_state_dict(state["task"])
        else:
            self.collector.forget_episodes()
            print(f"resuming: {type(self.task).__name__} cannot restore its environments; "
                  f"they start new episodes (the {self.task.num_envs} episodes in progress "
                  f"at the checkpoint are not counted)", file=sys.stderr)
        self.collect_gen.set_state(state["collect_gen"])
        self.sample_gen.set_state(state["sample_gen"])
        self.updates = state["updates"]
        self.samples_to_success = state["samples_to_success"]
        self.wall_s, self.wall_to_success = state["wall_s"], state["wall_to_success"]
        # (a checkpoint written before the parts were kept: its sessions' parts unknown)
        self.spent_s = {**dict.fromkeys(SPENT_PARTS, 0.0), **state.get("spent_s", {})}
        self.last_eval = state["last_eval"]
        self.headline = tuple(state["headline"])
        self.loaded = True

    def elapsed(self) -> float:
        """Training wall-clock of this run in seconds, summed over resumed sessions."""
        start = self._session_start
        return self.wall_s + (time.perf_counter() - start if start is not None else 0.0)

    # The loop -------------------------------------------------------------------------
    def _stopped(self) -> bool:
        cfg = self.cfg
        start = self._session_start
        out_of_time = (cfg.max_minutes > 0 and start is not None and
                       self.samples > self._session_samples and  # a round at least
                       time.perf_counter() - start >= 60 * cfg.max_minutes)
        return out_of_time or self.samples >= cfg.total_samples or (
            cfg.stop_on_success and self.samples_to_success is not None)

    def _postfix(self, metrics: Dict[str, float]) -> Dict[str, float]:
        """The progress bar's figures: loss, the loop's own (:meth:`_progress`) and the
        task's headline metrics."""
        loss = metrics.get("td_loss", metrics.get("loss", float("nan")))
        return {"loss": loss, **self._progress(metrics),
                **{k: self.last_eval.get(k, float("nan")) for k in self.headline}}

    def train(self) -> Dict[str, float]:
        """Train until ``train.total_samples`` or (``train.stop_on_success``) the first
        successful evaluation; returns the run's summary."""
        cfg = self.cfg
        self.logger = Logger(self.run_dir, resume_step=self.samples if self.loaded else None)
        record_session(self.run_dir, self.samples)
        self._announce()
        bar = None
        if cfg.progress and not self._stopped():
            from tqdm import tqdm

            stop = " or first success" if cfg.stop_on_success else ""
            bar = tqdm(total=cfg.total_samples, initial=self.samples, unit="step",
                       dynamic_ncols=True, desc=f"samples (to {cfg.total_samples:,}{stop})")
        start = self._session_start = time.perf_counter()
        start_samples = self._session_samples = self.samples
        last_ckpt = self.samples
        if self.samples_to_success == self.samples and not os.path.exists(self.success_path):
            self.save(self.success_path)  # a run stopped at success, resumed to train further
        # the run's seconds in each part, and what they were when this session began
        spent, at_start = self.spent_s, dict(self.spent_s)
        if cfg.flush_denormal:
            torch.set_flush_denormal(True)
        if cfg.keep_heap:
            keep_freed_memory()
        try:
            while not self._stopped():
                before = self.samples
                t0 = time.perf_counter()
                metrics = self.collect()
                t1, collected = time.perf_counter(), self.samples - before
                learned = self.learn()
                net = getattr(self.learner, "net", None)
                if learned and isinstance(net, torch.nn.Module):
                    learned["zero_weights"] = zero_fraction(net)
                metrics.update(learned)
                t2 = time.perf_counter()
                if "env_steps_per_s" not in metrics:  # (a round collected ahead has its own)
                    metrics["env_steps_per_s"] = collected / max(t1 - t0, 1e-9)
                metrics["updates"] = self.updates
                row: Dict[str, float] = {}
                if crossed(before, self.samples, cfg.eval_every):
                    result = self.evaluate()
                    self.last_eval = row = result.metrics()
                    self.headline = result.headline
                    for fn in self.on_evaluate:
                        fn(self, result)
                    if result.succeeded and self.samples_to_success is None:
                        self.samples_to_success = self.samples
                        self.wall_to_success = self.elapsed()
                        self.save(self.success_path)
                if crossed(before, self.samples, cfg.exact_eval_every):
                    row = {**row, **self.exact_evaluate().metrics()}
                if row:
                    self.logger.log("eval", self.samples, row)
                t3 = time.perf_counter()
                for part, s in zip(TIME_PARTS, (t1 - t0, t2 - t1, t3 - t2)):
                    metrics[f"{part}_s"] = s
                    spent[part] += s
                # the round's logs are written before a checkpoint of the round
                self.logger.log("train", self.samples, metrics)
                if bar is not None:
                    bar.update(self.samples - before)
                    bar.set_postfix(self._postfix(metrics), refresh=False)
                if cfg.checkpoint_every and self.samples - last_ckpt >= cfg.checkpoint_every:
                    self.save()
                    last_ckpt = self.samples
                spent["checkpoint"] += time.perf_counter() - t3
                if cfg.halt_after and self.samples >= cfg.halt_after:
                    raise Halted(f"halted after {self.samples} samples (train.halt_after)")
            self.save()
            if bar is not None and bar.n < bar.total:  # stopped early: success, max_minutes
                bar.total = bar.n
                bar.refresh()
        finally:
            if cfg.flush_denormal:
                torch.set_flush_denormal(False)  # PyTorch's default
            self.wall_s, self._session_start = self.elapsed(), None
            if bar is not None:
                bar.close()
            self.logger.close()
        wall = time.perf_counter() - start
        collected = self.samples - start_samples
        session = {part: spent[part] - at_start[part] for part in SPENT_PARTS}
        print(time_report(session, wall), file=sys.stderr)
        return {"samples": self.samples, "updates": self.updates,
                "samples_to_success": self.samples_to_success, "wall_s": self.elapsed(),
                "wall_to_success_s": self.wall_to_success,
                # this session's rate; None when it collected nothing (a finished run resumed)
                "env_steps_per_s": collected / max(wall, 1e-9) if collected else None,
                # the run's seconds in each part, as wall_s summed over its sessions
                **{f"time_{part}_s": s for part, s in spent.items()},
                **{f"eval_{k}": v for k, v in self.last_eval.items()},
                "commits": commits(self.run_dir)}


class _Abandoned(Exception):
    """Stops the thread collecting ahead when the training thread has raised."""


def _owned(step: Step) -> Step:
    """``step`` with every tensor copied: a step held past the collector's next step
    must not share memory a task may reuse."""
    def own(x: Any) -> Any:
        if isinstance(x, Tensor):
            return x.clone()
        if isinstance(x, dict):
            return {k: own(v) for k, v in x.items()}
        if isinstance(x, tuple) and hasattr(x, "_fields"):  # a NamedTuple
            return type(x)(*(own(v) for v in x))
        if isinstance(x, (tuple, list)):
            return type(x)(own(v) for v in x)
        return x

    return own(step)


class Trainer(TrainingLoop):
    """The off-policy loop: epsilon-greedy collection into a replay buffer, then
    ``train.updates_per_collect`` updates on replayed batches. Arguments as
    :class:`TrainingLoop`'s; ``learner`` is a :class:`Learner` (ACE-DQN or a baseline).

    With the learner's ``algo.nstep > 1``, steps pass through an
    :class:`~acegnn.buffers.replay.NStepWindow` (``self.window``) and are stored once
    their ``n``-step transition is complete: steps still pending at the end of a round
    wait for the next one, and checkpoints keep them. The steps of an environment whose
    step the task dropped (a restarted engine) end there, bootstrapping from the last
    state it reached, as at a time limit: they are real steps, but no step follows them
    in their episode (discarding them would lose data that ``nstep = 1`` keeps).

    With ``train.overlap`` each round's updates run beside a thread that collects the
    next round (:meth:`learn`); its steps are held and stored once the updates are done,
    so the updates never see them. The thread acts with its own copy of the network,
    valued by the eager kernels (compiled ones run on the training thread only); the two
    threads share the task's caches (locked where written) and the collector's counters,
    which only the collecting thread changes while it runs. Checkpoints and evaluations
    come between rounds, with no thread running. A ``train.csv`` row of an overlapped
    round holds the episodes of the round its updates learned from first (the one
    collected during the previous updates), and its ``collect_s`` only the wait for the
    thread: the collection's time is inside ``learn_s``.
    """

    #: ``train.overlap`` collects in a thread; False: in the training thread after the
    #: updates, the same schedule without concurrency (a reference for the tests).
    _ahead_in_thread = True

    def __init__(self, task: VecTask, learner: Learner, cfg: TrainConfig, seed: int,
                 run_dir: str, config: Optional[dict] = None,
                 on_evaluate: Sequence[Callable[["TrainingLoop", EvalResult], None]] = ()) -> None:
        super().__init__(task, learner, cfg, seed, run_dir, config, on_evaluate)
        algo = getattr(learner, "cfg", None)
        self.nstep: int = getattr(algo, "nstep", 1)
        params = inspect.signature(learner.update).parameters.values()

        def takes(*names: str) -> bool:
            return set(names) <= {p.name for p in params} or \
                any(p.kind == p.VAR_KEYWORD for p in params)

        if self.nstep > 1 and not takes("boot_graphs", "discount"):
            raise ValueError(f"algo.nstep={self.nstep}: {type(learner).__name__}.update takes no "
                             f"boot_graphs and discount keywords (n-step returns); set algo.nstep=1")
        if cfg.priority_alpha > 0 and not takes("weights"):
            raise ValueError(f"train.priority_alpha={cfg.priority_alpha}: "
                             f"{type(learner).__name__}.update takes no weights keyword "
                             f"(prioritized replay); set train.priority_alpha=0")
        self.buffer = ReplayBuffer(cfg.replay_capacity(task.num_envs), task.obs_spec,
                                   task.n_agents, self.nstep, alpha=cfg.priority_alpha,
                                   priority_eps=cfg.priority_eps)
        self.window: Optional[NStepWindow] = None
        if self.nstep > 1:
            self.window = NStepWindow(self.nstep, algo.gamma, task.num_envs, task.obs_spec,
                                      task.n_agents)
        self._envs = torch.arange(task.num_envs)
        self.epsilon = cfg.eps_start
        self._actor: Optional[Any] = None  # overlap: the learner's copy that collects ahead
        self._acting = learner  # who acts in _explore
        self._teacher: Optional[Any] = None  # train.teacher's learner (set_teacher)
        self._teaching = False  # this round is the teacher's
        self._owner = torch.zeros(task.num_envs, dtype=torch.bool)  # the teacher's episodes
        self._teacher_digest: Optional[str] = None
        self._steps = [0, 0]  # the round's env-steps: the teacher's, all
        self.rounds = 0  # collection rounds so far (the teacher's share is spread over them)
        self._held: Optional[List[Step]] = None  # steps collected ahead, stored after updates
        self._ahead: Optional[Dict[str, float]] = None  # metrics of the round collected ahead
        self._abandon = threading.Event()  # set: the thread collecting ahead stops at its next step

    def _store(self, step: Step) -> None:
        if self._held is not None:  # collected ahead: stored after the updates
            self._held.append(_owned(step))
            return
        tr = step.transition
        if self.window is None:
            self.buffer.add(step.obs, step.actions, tr.reward, tr.terminated, tr.next_obs)
            return
        env = step.extras["env"]  # the environments kept: a dropped one's chain ends here
        kept = torch.zeros(self.task.num_envs, dtype=torch.bool)
        kept[env] = True
        if not bool(kept.all()):
            self._add(self.window.flush(self._envs[~kept]))
        self._add(self.window.push(env, step.obs, step.actions, tr.reward, tr.terminated,
                                   tr.truncated, tr.next_obs))

    def _add(self, rows: NStepRows) -> None:
        if rows.actions.size(0):
            self.buffer.add(*rows)

    def _explore(self, graphs: Batch) -> Union[Tensor, Tuple[Tensor, Dict[str, Tensor]]]:
        cfg = self.cfg
        if self._abandon.is_set():
            raise _Abandoned()
        self.epsilon = linear_epsilon(self.samples, cfg.eps_start, cfg.eps_end, cfg.eps_decay)
        if self._teacher is None:
            actions = self._acting.act(graphs, self.epsilon, self.collect_gen)
        else:
            actions = self._act_with_teacher(graphs)
        if self.window is None:
            return actions
        return actions, {"env": self._envs}  # which rows reach the sink (drops remove some)

    # One round ------------------------------------------------------------------------
    def collect(self) -> Dict[str, float]:
        if self._ahead is not None:  # this round was collected during the last updates
            stats, self._ahead = self._ahead, None
            return stats
        return self._collect_round()

    def set_teacher(self, teacher: Any) -> None:
        """Let ``teacher`` (a learner with ``act``, acting on this task's graphs) begin
        the episodes of ``train.teacher_share`` of the rounds (``train.teacher``)."""
        if self.cfg.overlap:
            raise ValueError("train.teacher: rounds collected ahead (train.overlap) are the "
                             "learner's; set train.overlap=false")
        self._teacher, self._teacher_digest = teacher, weights_digest(teacher.state_dict())

    def _act_with_teacher(self, graphs: Batch) -> Tensor:
        """Each environment's actions by the policy that began its episode; an episode
        that begins now is the teacher's in the teacher's rounds."""
        starting = self.collector.ep_length == 0
        self._owner[starting] = self._teaching
        owner, n = self._owner, self.task.num_envs
        self._steps[0] += int(owner.sum())
        self._steps[1] += n
        if bool(owner.all()):
            return self._teacher.act(graphs, self.epsilon, self.collect_gen)
        mine = self._acting.act(graphs, self.epsilon, self.collect_gen)
        if not bool(owner.any()):
            return mine
        theirs = self._teacher.act(graphs, self.epsilon, self.collect_gen).to(mine.device)
        return torch.where(owner.to(mine.device).view(n, 1), theirs.view(n, -1),
                           mine.view(n, -1)).view(-1)

    def teacher_round(self, round_index: int) -> bool:
        """Whether the teacher begins the episodes of round ``round_index`` (from 0): the
        rounds ``k`` with ``floor((k + 1) * share) > floor(k * share)`` (share 0.5:
        rounds 1, 3, 5, ...)."""
        if self._teacher is None:
            return False
        share = self.cfg.teacher_share
        return math.floor((round_index + 1) * share + 1e-9) > math.floor(round_index * share + 1e-9)

    def _collect_round(self) -> Dict[str, float]:
        teaching = self._teaching = self.teacher_round(self.rounds)
        self._steps = [0, 0]
        try:
            stats = self._collect_with(self._explore)
        finally:
            self._teaching = False
        self.rounds += 1
        if self._teacher is not None:  # (some of its episodes began in the round before)
            stats = {**stats, "teacher": float(teaching),
                     "teacher_steps": self._steps[0] / max(self._steps[1], 1)}
        return {"epsilon": self.epsilon, **stats}

    def learn(self) -> Dict[str, float]:
        cfg = self.cfg
        if self.samples < cfg.learning_starts or len(self.buffer) == 0:
            return {}  # (n-step: the first steps may all be pending still)
        ahead = self._collect_ahead() if cfg.overlap and cfg.updates_per_collect else None
        totals: Dict[str, float] = {}
        try:
            for _ in range(cfg.updates_per_collect):
                m = self.update_once()
                for k, v in m.items():
                    totals[k] = totals.get(k, 0.0) + v / cfg.updates_per_collect
        except BaseException:  # (Ctrl-C, a failed update): the round collected ahead stops
            if ahead is not None:
                self._abandon.set()
                self._finish_ahead(*ahead, keep=False)
                self._abandon.clear()
            raise
        if ahead is not None:
            self._finish_ahead(*ahead)
        return totals

    def _collect_ahead(self) -> Tuple[Optional[threading.Thread], Dict[str, Any]]:
        """Start collecting the next round (``train.overlap``) with a copy of the network
        as it is now, in a thread (or, for tests, at :meth:`_finish_ahead`)."""
        if self._actor is None:
            from acegnn.nn.value_head import use_compiled

            self._actor = copy.copy(self.learner)
            self._actor.net = copy.deepcopy(self.learner.net)
            use_compiled(self._actor.net, False)  # compiled kernels: the training thread's
        else:
            self._actor.net.load_state_dict(self.learner.net.state_dict())
        self._held, out = [], {}

        def run() -> None:
            try:
                if self.cfg.flush_denormal:
                    torch.set_flush_denormal(True)  # (a flag of each thread)
                self._acting = self._actor
                before, t0 = self.samples, time.perf_counter()
                stats = self._collect_round()
                rate = (self.samples - before) / max(time.perf_counter() - t0, 1e-9)
                out["stats"] = {**stats, "env_steps_per_s": rate}
            except BaseException as e:  # raised again by the training thread
                out["error"] = e
            finally:
                self._acting = self.learner

        if not self._ahead_in_thread:
            out["run"] = run
            return None, out
        thread = threading.Thread(target=run, name="acegnn-collect-ahead", daemon=True)
        thread.start()
        return thread, out

    def _finish_ahead(self, thread: Optional[threading.Thread], out: Dict[str, Any],
                      keep: bool = True) -> None:
        """Wait for the round collected ahead, store its steps and keep its metrics for
        the next :meth:`collect`; with ``keep`` false (the training thread raised), drop
        them. A thread that raised drops them too: its error is raised here, and the run
        stops with the collector's counters past steps the replay never got."""
        if thread is None:
            out.pop("run")()
        else:
            thread.join()
        held, self._held = self._held, None
        if not keep:
            return
        if "error" in out:
            raise out["error"]
        for step in held:
            self._store(step)
        self._ahead = out["stats"]

    def batch(self, sample: ReplaySample) -> Tuple[tuple, Dict[str, Any]]:
        """The learner's update arguments for a replayed sample: graphs of ``s`` and
        ``s'`` (and, with n-step returns, of the states bootstrapped from)."""
        task = self.task
        nstep = {} if sample.discount is None else {"boot_graphs": task.graphs(sample.boot_obs),
                                                    "discount": sample.discount}
        args = (task.graphs(sample.obs), sample.actions.view(-1), sample.reward,
                sample.terminated, task.graphs(sample.next_obs))
        return args, nstep

    def update_once(self) -> Dict[str, float]:
        """One gradient step as the loop takes it: sample the replay, build the batch,
        update."""
        cfg = self.cfg
        with phase("sample"):
            sample = self.buffer.sample(cfg.batch_size, self.sample_gen, self.priority_beta())
        with phase("graphs"):
            args, nstep = self.batch(sample)
        if sample.weight is not None:
            nstep["weights"] = sample.weight
        m = self.learner.update(*args, self.sample_gen, **nstep)
        if sample.weight is not None:
            if not isinstance(m.get("td_errors"), Tensor):
                raise TypeError(f"{type(self.learner).__name__}.update was given weights and "
                                f"returned no td_errors tensor (prioritized replay)")
            with phase("sample"):
                self.buffer.update_priorities(sample.index, m.pop("td_errors"))
        self.updates += 1
        return m

    def priority_beta(self) -> float:
        """The importance-sampling exponent now: ``train.priority_beta`` raised linearly
        to 1 over ``train.total_samples``."""
        return linear_epsilon(self.samples, self.cfg.priority_beta, 1.0, self.cfg.total_samples)

    def _announce(self) -> None:
        print(f"replay buffer: {self.buffer.capacity} transitions, "
              f"{self.buffer.nbytes / 2**20:.1f} MiB preallocated", file=sys.stderr)

    def _progress(self, metrics: Dict[str, float]) -> Dict[str, float]:
        return {"eps": metrics["epsilon"]}

    # Checkpoints: the replay buffer and the pending n-step steps -----------------------
    def state_dict(self) -> dict:
        out = {**super().state_dict(), "buffer": self.buffer.state_dict(),
               "rounds": self.rounds,
               "ahead": self._ahead}  # (overlap: the next round is in the buffer already)
        if self._teacher is not None:
            out.update(teacher_owner=self._owner.clone(), teacher_digest=self._teacher_digest)
        if self.window is not None:
            out["nstep_window"] = self.window.state_dict()
        return out

    def load_state_dict(self, state: dict, source: str = "the checkpoint") -> None:
        saved, stored = sorted(state["buffer"]["obs"]), sorted(self.buffer.obs)
        if saved != stored:
            raise ValueError(f"{source}: its replay holds the observations {saved}, and this "
                             f"task stores {stored}: the checkpoint was made by another version "
                             f"of the task; start a new run")
        try:
            self.buffer.load_state_dict(state["buffer"])
        except ValueError as e:
            raise ValueError(
                f"{source}: {e}. The replay buffer holds "
                f"min(train.buffer_size, train.total_samples + env.num_envs) transitions "
                f"(train.buffer_size with train.episodes_per_collect); a "
                f"resumed run may change train.total_samples only while its buffer has not "
                f"filled up and still holds every transition collected. Start a new run "
                f"with the new budget instead") from e
        super().load_state_dict(state, source)
        self._ahead = state.get("ahead")
        self.rounds = state.get("rounds", 0)  # (checkpoints before train.teacher: 0)
        if self._teacher is not None:
            if state.get("teacher_digest") != self._teacher_digest:
                raise ValueError(f"{source}: train.teacher={self.cfg.teacher} is not the teacher "
                                 f"this run began with (its weights changed); start a new run")
            self._owner = state["teacher_owner"].clone()
        if self.window is not None:
            if "nstep_window" not in state:
                raise ValueError(f"{source} holds no pending n-step steps (algo.nstep={self.nstep})")
            self.window.load_state_dict(state["nstep_window"])
            if state["task"] is None:  # new episodes start: the pending steps end here
                self._add(self.window.flush(self._envs))

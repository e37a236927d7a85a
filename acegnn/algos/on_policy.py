"""The on-policy training loop (ACE-PPO).

A round collects with the learner's own stochastic policy
(``learner.explore(graphs, generator) -> (actions, extras)``) into a
:class:`RolloutStorage`, hands the round's :class:`Trajectories` to
``learner.learn(...)`` and drops them. Evaluation, logs, checkpoints, resume and the
progress bar are :class:`~acegnn.algos.trainer.TrainingLoop`'s, as for the off-policy
loop. A checkpoint is written between rounds, so it holds no trajectories.

``train`` keys read here: ``samples_per_collect`` or ``episodes_per_collect`` (a
round), ``updates_per_collect`` and ``batch_size`` (the learner's gradient steps per
round and environment steps per minibatch), and those of evaluation, checkpoints and
the budget. The replay keys (``buffer_size``, ``learning_starts``, ``eps_*``) belong to
the off-policy loop and must keep their defaults.
"""
from __future__ import annotations

from typing import Callable, Dict, List, NamedTuple, Optional, Protocol, Sequence, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.algos.collector import Step
from acegnn.algos.trainer import TrainConfig, TrainingLoop
from acegnn.envs.base import EvalResult, VecTask

#: ``train`` keys only the off-policy loop reads.
OFF_POLICY_KEYS = ("buffer_size", "learning_starts", "eps_start", "eps_end", "eps_decay",
                   "overlap", "teacher", "teacher_share")


class Trajectories(NamedTuple):
    """One round of steps, row ``k`` being step ``time[k]`` of environment ``env[k]``
    (rows in collection order: by time, then environment)."""

    obs: Dict[str, Tensor]  # {name: [N, ...]} the observation acted on
    next_obs: Dict[str, Tensor]  # {name: [N, ...]} the true next observation
    actions: Tensor  # [N, n_agents]
    reward: Tensor  # [N]
    terminated: Tensor  # [N] bool
    truncated: Tensor  # [N] bool
    cut: Tensor  # [N] bool: not terminated, and no stored step of the same episode follows
    time: Tensor  # [N] the round's step number
    env: Tensor  # [N] the environment
    extras: Dict[str, Tensor]  # {name: [N, ...]} what the policy returned beside the actions
    num_steps: int  # T: steps of the round
    num_envs: int  # E

    @property
    def num_rows(self) -> int:
        return self.reward.numel()

    def rows(self, index: Tensor) -> Dict[str, Tensor]:
        """The observations of rows ``index``."""
        return {k: v[index] for k, v in self.obs.items()}


class RolloutStorage:
    """Keeps the steps of one round (the collector's sink) and turns them into
    :class:`Trajectories`.

    An episode stops being followed where it is truncated, where the round ends, and
    before a step the task dropped (a restarted engine): those rows are ``cut``, and a
    learner bootstraps them from ``next_obs``. The policy's extras must hold ``env``
    (``[k]`` the environment of each row), which :class:`OnPolicyTrainer` adds.
    """

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self.steps: List[Step] = []

    def add(self, step: Step) -> None:
        if "env" not in step.extras:
            raise ValueError("on-policy steps need their environments in extras['env']")
        self.steps.append(step)

    def clear(self) -> None:
        self.steps = []

    def __len__(self) -> int:
        return sum(s.actions.size(0) for s in self.steps)

    def trajectories(self) -> Trajectories:
        if not self.steps:
            raise ValueError("no steps were collected in this round")
        T, E = len(self.steps), self.num_envs
        cat = lambda get: torch.cat([get(s) for s in self.steps])  # noqa: E731
        env = cat(lambda s: s.extras["env"].long())
        time = torch.cat([torch.full((s.actions.size(0),), t, dtype=torch.long)
                          for t, s in enumerate(self.steps)])
        present = torch.zeros(T + 1, E, dtype=torch.bool)
        present[time, env] = True
        terminated = cat(lambda s: s.transition.terminated)
        truncated = cat(lambda s: s.transition.truncated)
        followed = present[time + 1, env]  # the next step of the environment was stored
        cut = ~terminated & (truncated | ~followed)
        first = self.steps[0]
        return Trajectories(
            obs={k: cat(lambda s, k=k: s.obs[k]) for k in first.obs},
            next_obs={k: cat(lambda s, k=k: s.transition.next_obs[k])
                      for k in first.transition.next_obs},
            actions=cat(lambda s: s.actions), reward=cat(lambda s: s.transition.reward),
            terminated=terminated, truncated=truncated, cut=cut, time=time, env=env,
            extras={k: cat(lambda s, k=k: s.extras[k]) for k in first.extras if k != "env"},
            num_steps=T, num_envs=E)


class OnPolicyLearner(Protocol):
    """What the on-policy loop needs of a learner (ACE-PPO)."""

    config_class: type
    model_class: type
    loop: str  # "on_policy"

    def explore(self, graphs: Batch, generator: Optional[torch.Generator] = None
                ) -> Tuple[Tensor, Dict[str, Tensor]]: ...

    def learn(self, data: Trajectories, graphs: Callable[[Dict[str, Tensor]], Batch],
              updates: int, batch_size: int,
              generator: Optional[torch.Generator] = None) -> Dict[str, float]: ...

    def act(self, graphs: Batch, epsilon: float = 0.0,
            generator: Optional[torch.Generator] = None) -> Tensor: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class OnPolicyTrainer(TrainingLoop):
    """The on-policy loop: a round of the learner's policy, then
    ``train.updates_per_collect`` gradient steps on it (the learner's
    :meth:`learn`). Arguments as :class:`~acegnn.algos.trainer.TrainingLoop`'s."""

    def __init__(self, task: VecTask, learner: OnPolicyLearner, cfg: TrainConfig, seed: int,
                 run_dir: str, config: Optional[dict] = None,
                 on_evaluate: Sequence[Callable[[TrainingLoop, EvalResult], None]] = ()) -> None:
        default = TrainConfig()
        changed = [k for k in OFF_POLICY_KEYS if getattr(cfg, k) != getattr(default, k)]
        if changed:
            raise ValueError(f"train.{changed[0]} is not read by the on-policy loop of "
                             f"{type(learner).__name__} (it keeps no replay and explores by "
                             f"sampling its policy); remove it from the config")
        if cfg.episodes_per_collect == 0 and cfg.samples_per_collect < task.num_envs:
            raise ValueError(f"train.samples_per_collect must be at least env.num_envs "
                             f"({task.num_envs}) (got {cfg.samples_per_collect})")
        super().__init__(task, learner, cfg, seed, run_dir, config, on_evaluate)
        self.storage = RolloutStorage(task.num_envs)
        self._envs = torch.arange(task.num_envs)

    def _store(self, step: Step) -> None:
        self.storage.add(step)

    def _explore(self, graphs: Batch) -> Tuple[Tensor, Dict[str, Tensor]]:
        actions, extras = self.learner.explore(graphs, self.collect_gen)
        return actions, {**extras, "env": self._envs}

    def collect(self) -> Dict[str, float]:
        self.storage.clear()
        return self._collect_with(self._explore)

    def learn(self) -> Dict[str, float]:
        cfg = self.cfg
        data = self.storage.trajectories()
        self.storage.clear()
        metrics = self.learner.learn(data, self.task.graphs, cfg.updates_per_collect,
                                     cfg.batch_size, self.sample_gen)
        self.updates += cfg.updates_per_collect
        return metrics

    def _progress(self, metrics: Dict[str, float]) -> Dict[str, float]:
        return {"ent": metrics.get("entropy", float("nan"))}


__all__ = ["OFF_POLICY_KEYS", "OnPolicyLearner", "OnPolicyTrainer", "RolloutStorage",
           "Trajectories"]

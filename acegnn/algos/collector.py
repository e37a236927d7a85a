"""Collection: acting in a task, stepping it, handing transitions on, counting episodes.

A :class:`Collector` is what an off-policy loop (into a replay buffer) and an on-policy
loop (into a rollout storage) share: it builds the graphs of the current observations,
asks a policy for actions, steps the task, passes every stored step to a sink and keeps
episode returns and lengths across calls.

Several engine processes: a task whose environments live in other processes (or on
other machines) is still one :class:`~acegnn.envs.base.VecTask` whose ``step`` fans
out to its workers. If it has to restart a crashed or hung engine, it marks those
environments in :attr:`~acegnn.envs.base.Transition.dropped`: the collector passes none
of their steps to the sink, forgets the episodes they were in and counts them in
``dropped_episodes``.
"""
from __future__ import annotations

from typing import Callable, Dict, NamedTuple, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.envs.base import Transition, VecTask

#: A collecting policy: graphs -> ``[num_agents]`` actions, or ``(actions, extras)``
#: with extras ``{name: [num_envs, ...]}`` to store beside them (e.g. log-probabilities).
ActFn = Callable[[Batch], Union[Tensor, Tuple[Tensor, Dict[str, Tensor]]]]


class Step(NamedTuple):
    """What a sink receives: one step of the environments that were kept (batch first)."""

    obs: Dict[str, Tensor]
    actions: Tensor  # [num_kept, n_agents]
    transition: Transition
    extras: Dict[str, Tensor]


def _rows(step: Step, keep: Tensor) -> Step:
    tr = step.transition
    pick = lambda d: {k: v[keep] for k, v in d.items()}  # noqa: E731
    return Step(pick(step.obs), step.actions[keep],
                Transition(tr.reward[keep], tr.terminated[keep], tr.truncated[keep],
                           pick(tr.next_obs), None, pick(tr.info or {})), pick(step.extras))


class Collector:
    """Collects steps of ``task`` with a policy and passes them to ``sink``.

    Args:
        task (VecTask): The task to step.
        sink (callable): Called with every :class:`Step` (only kept environments).
    """

    def __init__(self, task: VecTask, sink: Callable[[Step], None]) -> None:
        self.task, self.sink = task, sink
        self.samples = 0  # environment steps passed to the sink
        self.ep_return = torch.zeros(task.num_envs)
        self.ep_length = torch.zeros(task.num_envs, dtype=torch.long)

    def run(self, act: ActFn, steps: int = 0, episodes: int = 0) -> Dict[str, float]:
        """Take ``steps`` steps of every environment, or (``episodes`` > 0) step them
        until that many episodes have ended (episodes still running go on next time).

        Returns:
            ``episode_return``, ``episode_length`` and ``episode_<info>`` for each
            name of the task's :attr:`~acegnn.envs.base.Transition.info` (means over
            the episodes that ended, if any) and ``dropped_episodes`` (if any).
        """
        task = self.task
        if (steps > 0) == (episodes > 0):
            raise ValueError(f"give steps or episodes, one of them positive (got {steps}, {episodes})")
        returns, lengths, dropped = [], [], 0
        outcomes: Dict[str, list] = {}
        taken = 0
        while (taken < steps) if steps > 0 else (len(returns) < episodes):
            taken += 1
            obs = task.observe()
            out = act(task.graphs(obs))
            actions, extras = out if isinstance(out, tuple) else (out, {})
            actions = actions.view(task.num_envs, task.n_agents).cpu()
            tr = task.step(actions)
            step = Step(obs, actions, tr, extras)
            lost = tr.dropped if tr.dropped is not None else torch.zeros_like(tr.terminated)
            if bool(lost.any()):
                dropped += int(lost.sum())
                step = _rows(step, ~lost)
            self.sink(step)
            self.samples += step.actions.size(0)
            self.ep_return += tr.reward
            self.ep_length += 1
            self.ep_return[lost] = 0  # the episodes of restarted engines are forgotten
            self.ep_length[lost] = 0
            done = (tr.terminated | tr.truncated) & ~lost
            if bool(done.any()):
                returns += self.ep_return[done].tolist()
                lengths += self.ep_length[done].tolist()
                for k, v in (tr.info or {}).items():
                    outcomes.setdefault(k, []).extend(v[done].float().tolist())
                self.ep_return[done] = 0
                self.ep_length[done] = 0
        out: Dict[str, float] = {}
        if returns:
            out["episode_return"] = sum(returns) / len(returns)
            out["episode_length"] = sum(lengths) / len(lengths)
            out.update({f"episode_{k}": sum(v) / len(v) for k, v in outcomes.items()})
        if dropped:
            out["dropped_episodes"] = float(dropped)
        return out

    def forget_episodes(self) -> None:
        """Start counting every environment's episode afresh (its engine was reset)."""
        self.ep_return.zero_()
        self.ep_length.zero_()

    def state_dict(self) -> dict:
        return {"samples": self.samples, "ep_return": self.ep_return.clone(),
                "ep_length": self.ep_length.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.samples = state["samples"]
        self.ep_return, self.ep_length = state["ep_return"].clone(), state["ep_length"].clone()

"""Recording greedy episodes as frames: what ``acegnn viz`` and the trainer's drawn
TensorBoard episode show."""
from __future__ import annotations

import dataclasses
from typing import List, Optional

import torch

from acegnn.envs.base import VecTask
from acegnn.viz.frame import Frame, frames


def _deciding(learner):
    if not callable(getattr(learner, "decide", None)):
        raise ValueError(f"drawing decisions needs a learner that decides with rollout "
                         f"(ace_dqn); {type(learner).__name__} values no candidate SE-states")
    return learner


def record_episodes(task: VecTask, learner, seed: int = 0, max_steps: int = 1000) -> List[List[Frame]]:
    """Play the first episode of each of ``task``'s environments greedily and record it.

    Args:
        task (VecTask): A task made for the recording (one environment per episode).
        learner: A learner with ``decide(graphs, generator)`` (ACE-DQN).
        seed (int, optional): Seed of the decisions' own randomness (a random agent
            order). (default: :obj:`0`)
        max_steps (int, optional): Stop after this many steps. (default: :obj:`1000`)

    Returns:
        One list of frames per environment, a frame per step of its first episode,
        with ``step`` and ``reward`` set.

    Raises:
        ValueError: ``learner`` has no ``decide`` (no candidate values to draw).
    """
    _deciding(learner)
    gen = torch.Generator().manual_seed(seed)
    E, n = task.num_envs, task.n_agents
    episodes: List[List[Frame]] = [[] for _ in range(E)]
    running = torch.ones(E, dtype=torch.bool)
    scene = task.scene()
    for t in range(max_steps):
        graphs = task.graphs(task.observe())
        ro = learner.decide(graphs, gen)
        fs = frames(task.schema, graphs, ro, task.unit_positions(graphs), scene,
                    task.noop_action)
        tr = task.step(ro.actions.view(E, n).cpu())
        for e in running.nonzero().view(-1).tolist():
            episodes[e].append(dataclasses.replace(fs[e], step=t, reward=float(tr.reward[e])))
        running &= ~(tr.terminated | tr.truncated)
        if not bool(running.any()):
            break
    return episodes


def episode_task(env_cfg, episodes: int, seed: int) -> VecTask:
    """A fresh task of ``env_cfg`` with one environment per episode (its config's
    ``num_envs`` field set to ``episodes``), seeded ``seed``.

    Raises:
        ValueError: ``env_cfg`` has no ``num_envs`` field, or ``episodes`` < 1.
    """
    if not any(f.name == "num_envs" for f in dataclasses.fields(env_cfg)):
        raise ValueError(f"recording episodes needs an env config with a num_envs field "
                         f"(got {type(env_cfg).__name__})")
    if episodes < 1:
        raise ValueError(f"episodes must be positive (got {episodes})")
    return dataclasses.replace(env_cfg, num_envs=episodes).make(seed)


def record_run(cfg, learner, episodes: int, seed: int, max_steps: int = 1000) -> List[List[Frame]]:
    """:func:`record_episodes` of ``episodes`` fresh environments of ``cfg.env`` seeded
    ``seed`` (:func:`episode_task`); the task is closed afterwards."""
    task = episode_task(cfg.env, episodes, seed)
    try:
        return record_episodes(task, learner, seed, max_steps)
    finally:
        task.close()


class TensorBoardEpisode:
    """An ``on_evaluate`` callback of the trainer: draws one greedy episode (seed
    ``train.eval_seed``) into TensorBoard as images ``eval/episode`` at the evaluation's
    step. Draws from none of the run's random streams. :func:`check_drawable` checks
    the learner and the viz extra beforehand.

    Args:
        cfg: The experiment config (its env and ``train.eval_seed``).
        max_steps (int, optional): Frames drawn at most. (default: :obj:`50`)
    """

    def __init__(self, cfg, max_steps: int = 50) -> None:
        from acegnn.viz.draw import draw_frame  # matplotlib itself is imported when drawing

        self.cfg, self.max_steps, self._draw = cfg, max_steps, draw_frame

    def __call__(self, trainer, result) -> None:
        import numpy as np

        episode = record_run(self.cfg, _deciding(trainer.learner), 1, self.cfg.train.eval_seed,
                             self.max_steps)[0]
        images = []
        for frame in episode:
            fig = self._draw(frame).fig  # not registered with pyplot: nothing to close
            fig.canvas.draw()
            images.append(np.asarray(fig.canvas.buffer_rgba())[..., :3].copy())
        h = min(i.shape[0] for i in images)
        w = min(i.shape[1] for i in images)
        stack = np.stack([i[:h, :w] for i in images])
        trainer.logger.tb.add_images("eval/episode", stack, trainer.samples, dataformats="NHWC")


def check_drawable(learner, extra: Optional[str] = "viz") -> None:
    """Raises ``ValueError`` for a learner without candidate values and
    :class:`~acegnn.utils.registry.MissingBackend` when matplotlib or plotly is missing
    (the install hint names the extra ``extra``)."""
    import importlib.util

    from acegnn.utils.registry import MissingBackend

    _deciding(learner)
    missing = [m for m in ("matplotlib", "plotly") if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingBackend(f"drawing needs {', '.join(missing)}, which is not installed: "
                             f"pip install -e '.[{extra}]'")

"""Wiring: an experiment's config into a task, a learner and the loop that trains them,
and a saved run back into them (``acegnn train | eval | viz`` go through here).

Below this module: :mod:`acegnn.config` (configs, no components), the components
(:mod:`acegnn.envs`, :mod:`acegnn.algos`), the loops; nothing below calls back up.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Dict, Optional, Sequence

import torch
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from acegnn.algos import LEARNERS
from acegnn.algos.on_policy import OnPolicyTrainer
from acegnn.algos.trainer import Trainer
from acegnn.config import ExperimentConfig, check_resumable, from_dict, to_dict, to_yaml
from acegnn.envs.base import VecTask

#: ``learner.loop`` -> the loop that trains it.
LOOPS = {"off_policy": Trainer, "on_policy": OnPolicyTrainer}


def loop_of(learner) -> type:
    """The training loop a learner names in its ``loop`` attribute (off-policy when it
    names none)."""
    name = getattr(learner, "loop", "off_policy")
    if name not in LOOPS:
        raise ValueError(f"{type(learner).__name__}.loop must be one of {sorted(LOOPS)} "
                         f"(got {name!r})")
    return LOOPS[name]


def make_task(cfg: ExperimentConfig):
    """The training task of an experiment."""
    return cfg.env.make(cfg.seed)


def make_learner(cfg: ExperimentConfig, task):
    """The learner of an experiment (network initialised from ``cfg.seed``)."""
    import torch

    example = task.graphs(task.observe())
    torch.manual_seed(cfg.seed)
    return LEARNERS.get(cfg.algo.name)(task.schema, cfg.algo, cfg.model, cfg.train.device,
                                       example=example)


def restore(path: str, env_overrides: Sequence[str] = ()):
    """A run's checkpoint and its experiment: ``(cfg, state, task, learner)`` with the
    learner's weights loaded (``path``: a run directory or a checkpoint file). The caller
    closes the task.

    ``env_overrides`` (``env.key=value``) change the task the weights are put to work
    on, e.g. ``env.scenario=10m_vs_11m`` for a zero-shot transfer: a graph network
    plays any task of its schema as it is.
    """
    from acegnn.algos.checkpoint import checkpoint_path, load_checkpoint

    bad = [o for o in env_overrides if not o.startswith("env.") or o.startswith("env.name=")]
    if bad:
        raise ValueError(f"only env.* settings (not env.name) can change for an evaluation "
                         f"(got {bad})")
    path = checkpoint_path(path)
    state = load_checkpoint(path)
    saved = OmegaConf.create(state["config"])
    if env_overrides:
        try:
            saved = OmegaConf.merge(saved, OmegaConf.from_dotlist(list(env_overrides)))
        except OmegaConfBaseException as e:
            raise ValueError(f"cannot read the overrides: {e}") from None
    cfg = from_dict(OmegaConf.to_container(saved))
    task = make_task(cfg)
    try:
        learner = make_learner(cfg, task)
        try:
            learner.load_state_dict(state["learner"])
        except (RuntimeError, ValueError) as e:  # a baseline's networks are sized per task
            if not env_overrides:
                raise
            lines = [ln.strip() for ln in str(e).splitlines() if "size mismatch" in ln]
            first = lines[0] if lines else str(e).strip().splitlines()[-1].strip()
            raise ValueError(f"the {cfg.algo.name} networks of {path} do not fit the task with "
                             f"{list(env_overrides)} ({len(lines)} tensors differ), e.g. "
                             f"{first}") from None
    except BaseException:
        task.close()
        raise
    return cfg, {**state, "path": path}, task, learner


def graphs_differ(task: VecTask, other: VecTask) -> Optional[str]:
    """How ``other``'s graphs differ from ``task``'s (agents, or schema: node and edge
    types and their features), or :obj:`None` if a policy of one acts on the other's."""
    if other.n_agents != task.n_agents:
        return f"{other.n_agents} agents, this task {task.n_agents}"
    if other.schema != task.schema:
        return "another graph schema (node or edge types, or their features)"
    return None


def load_teacher(path: str, task: VecTask):
    """The learner of the run or checkpoint ``path`` (``train.teacher``), checked to
    explore epsilon-greedily (an off-policy learner) on ``task``'s graphs: the same
    schema and agents, and one decision made on the task's current states (a baseline's
    networks are sized for their own task)."""
    try:
        cfg, _, own_task, teacher = restore(path)
    except (FileNotFoundError, ValueError) as e:
        raise ValueError(f"train.teacher={path}: {e}") from None
    try:
        differ = graphs_differ(task, own_task)
    finally:
        own_task.close()
    if differ:
        raise ValueError(f"train.teacher={path}: its task ({cfg.env.name}) has {differ}")
    if loop_of(teacher) is not Trainer:
        raise ValueError(f"train.teacher={path}: {cfg.algo.name} learns on-policy and does "
                         f"not explore epsilon-greedily; a teacher must be an off-policy learner")
    try:
        teacher.act(task.graphs(task.observe()), 0.0, torch.Generator().manual_seed(0))
    except (RuntimeError, ValueError, IndexError) as e:
        raise ValueError(f"train.teacher={path}: its {cfg.algo.name} policy cannot act on "
                         f"this task: {e}") from None
    return teacher


def evaluate_checkpoint(path: str, episodes: int = 32, seed: int = 2024,
                        env_overrides: Sequence[str] = ()) -> Dict[str, Any]:
    """Evaluate the greedy policy of a checkpoint as ``acegnn eval`` does.

    Args:
        path (str): A run directory or a checkpoint file.
        episodes (int, optional): Test episodes. (default: :obj:`32`)
        seed (int, optional): Seed of the test episodes. (default: :obj:`2024`)
        env_overrides (sequence of str, optional): ``env.key=value`` settings of the
            task to evaluate on (see :func:`restore`).

    Returns:
        ``checkpoint`` (the file), ``samples`` (its training samples), ``evaluation``
        (the task's :class:`~acegnn.envs.EvalResult`) and ``exact`` (its exact
        evaluation, in the order of training's, or :obj:`None` if it has none). Where
        the learner offers other policies (:func:`~acegnn.envs.base.named_policies`;
        ACE-CTDE's decentralised ``dec``), both are
        :class:`~acegnn.envs.base.Evaluations` that add theirs, prefixed by name.
    """
    from acegnn.algos.trainer import greedy
    from acegnn.envs import ExactEvaluation
    from acegnn.envs.base import evaluate_policies, named_policies

    cfg, state, task, learner = restore(path, env_overrides)
    try:
        result = evaluate_policies(lambda act: task.evaluate(act, episodes, seed),
                                   greedy(learner, seed), named_policies(learner, seed))
        exact = None
        if isinstance(task, ExactEvaluation):  # as in training: the eval seed's order
            train_seed = cfg.train.eval_seed
            exact = evaluate_policies(task.exact_evaluate, greedy(learner, train_seed),
                                      named_policies(learner, train_seed))
    finally:
        task.close()
    return {"checkpoint": state["path"], "samples": state["samples"], "evaluation": result,
            "exact": exact}


def train(cfg: ExperimentConfig, run_dir: str, resume: Optional[str] = None,
          rewrite_config: bool = False) -> Dict[str, Any]:
    """Train an experiment in ``run_dir`` (its ``config.yaml`` already written) and
    return the loop's summary.

    Args:
        cfg (ExperimentConfig): The experiment.
        run_dir (str): Where the logs and checkpoints go.
        resume (str, optional): A checkpoint of this run to go on from; refused when its
            config differs from ``cfg`` in more than the resumable keys.
        rewrite_config (bool): After a successful resume, write ``cfg`` as the run's
            ``config.yaml`` (overrides given on resuming, e.g. a raised budget, stay).
    """
    from acegnn.algos.checkpoint import load_checkpoint
    from acegnn.utils.io import write_text

    state = None
    if resume is not None:
        state = load_checkpoint(resume)
        check_resumable(state["config"], cfg, resume)
    task = make_task(cfg)
    try:
        learner = make_learner(cfg, task)
        hooks = []
        if cfg.train.log_episode:
            from acegnn.viz.episode import TensorBoardEpisode, check_drawable

            check_drawable(learner)
            hooks.append(TensorBoardEpisode(cfg))
        trainer = loop_of(learner)(task, learner, cfg.train, cfg.seed, run_dir, to_dict(cfg),
                                   hooks)
        if cfg.train.teacher:
            trainer.set_teacher(load_teacher(cfg.train.teacher, task))
        print(f"run directory: {run_dir}", file=sys.stderr)
        if state is not None:
            trainer.load_state_dict(state, resume)
            if rewrite_config:
                write_text(os.path.join(run_dir, "config.yaml"), to_yaml(cfg))
        return trainer.train()
    finally:
        task.close()


__all__ = ["LOOPS", "evaluate_checkpoint", "graphs_differ", "load_teacher", "loop_of",
           "make_learner", "make_task", "restore", "train"]

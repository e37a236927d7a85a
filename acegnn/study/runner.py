"""A study's unfinished trials on Ray Tune: a local Ray started and stopped here, or a
cluster's (``address``). Each trial is a function trainable that trains its run
directory in a child process (:func:`acegnn.study.trial.train_trial`) and reports its
latest evaluation to Tune; a trial whose worker raises is started again by Tune
(``max_failures``) and resumes from its last checkpoint.
"""
from __future__ import annotations

import math
import os
import sys
import time
from typing import Dict, List, Optional, TextIO

import ray
from ray import tune

from acegnn.study.spec import Study, Trial
from acegnn.study.trial import finished, headline, progress_line, train_trial
from acegnn.utils.ray_local import connect_ray, start_local_ray


#: Lines of a failed trial's error that :class:`Progress` prints.
ERROR_LINES = 12


def _error(trial, lines: int) -> str:
    """The last ``lines`` lines of the error a trial raised (Tune's ``error.txt``, which
    holds all of it), indented, and where the whole error is."""
    text = str(trial.get_error() or "")
    out = [f"  {ln}" for ln in text.splitlines() if ln.strip()][-lines:]
    if trial.error_file:
        out.append(f"  (the whole error: {trial.error_file})")
    return "\n".join(out)


class Progress(tune.Callback):
    """Prints :func:`~acegnn.study.trial.progress_line` every ``every_s`` seconds and
    when a trial ends, and the end of the error of a trial that failed."""

    def __init__(self, study: Study, every_s: float, out: TextIO = sys.stdout) -> None:
        self.study, self.every_s, self.out = study, every_s, out
        self.trials = {t.name: t for t in study.trials}
        done = {t.name for t in study.trials if finished(t, study.total_samples, study.results)}
        self.states = {t.name: "done" if t.name in done else "pending" for t in study.trials}
        self.latest = {t.name: headline(t, study.metric) for t in study.trials}
        self.printed = time.monotonic()

    def print(self) -> None:
        print(progress_line(self.study, self.states, self.latest), file=self.out, flush=True)
        self.printed = time.monotonic()

    def _set(self, trial, state: str) -> None:
        self.states[trial.config["trial"]] = state

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        self._set(trial, "running")

    def on_trial_recover(self, iteration, trials, trial, **info) -> None:
        print(f"trial {trial.config['trial']} failed; it resumes from its last checkpoint",
              file=self.out, flush=True)
        print(_error(trial, lines=1), file=self.out, flush=True)

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        self.latest[trial.config["trial"]] = result.get("headline", math.nan)

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        done = finished(self.trials[trial.config["trial"]], self.study.total_samples,
                        self.study.results)
        self._set(trial, "done" if done else "stopped")  # stopped: by train.max_minutes
        self.print()

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        self._set(trial, "failed")
        print(f"trial {trial.config['trial']} failed for good:", file=self.out)
        print(_error(trial, lines=ERROR_LINES), file=self.out)
        self.print()

    def on_step_end(self, iteration, trials, **info) -> None:
        if time.monotonic() - self.printed >= self.every_s:
            self.print()


def _trainable(study: Study, trials: Dict[str, Trial]):
    """The function trainable of the study's trials (``config["trial"]``: a name)."""
    def train(config: dict) -> None:
        def report(row: Dict[str, float]) -> None:
            tune.report({"samples": row["samples"],
                         "headline": row.get(study.metric, math.nan)})

        train_trial(trials[config["trial"]], study, report)
    return train


def check_resources(study: Study, cluster: Dict[str, float]) -> None:
    """Refuse a study whose trial needs more CPUs or GPUs than the whole Ray cluster has
    (``ray.cluster_resources()``): Tune would wait for them forever.

    Raises:
        ValueError: naming the study's resources and the cluster's.
    """
    have = {"cpus": cluster.get("CPU", 0.0), "gpus": cluster.get("GPU", 0.0)}
    need = {"cpus": study.cpus, "gpus": study.gpus}
    if any(need[k] > have[k] for k in need):
        raise ValueError(
            f"{study.path}: a trial needs resources {{cpus: {need['cpus']:g}, gpus: "
            f"{need['gpus']:g}}}, and the Ray cluster has {{cpus: {have['cpus']:g}, gpus: "
            f"{have['gpus']:g}}} in all: lower the study's resources, or give Ray more "
            f"(--cpus, or nodes with them)")


def run_study(study: Study, address: Optional[str] = None, num_cpus: Optional[int] = None,
              every_s: float = 30.0) -> List[Trial]:
    """Train the study's unfinished trials on Ray Tune; the trials still unfinished after
    (failed more than ``max_failures`` times, or the study was stopped).

    Args:
        study (Study): The study.
        address (str, optional): A Ray cluster to run on (``ray.init``'s address);
            without it a local Ray is started and stopped here.
        num_cpus (int, optional): CPUs of the local Ray (default: the machine's).
        every_s (float, optional): Seconds between progress lines. (default: :obj:`30`)

    Raises:
        ValueError: when a trial needs more than the cluster has (:func:`check_resources`),
            or the cluster at ``address`` cannot be reached.
    """
    todo = [t for t in study.trials if not finished(t, study.total_samples, study.results)]
    if not todo:
        return []
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # Tune's own tables: Progress says it
    if address is None:
        start_local_ray(num_cpus)
    else:
        connect_ray(address)
    try:
        check_resources(study, ray.cluster_resources())
        tuner = tune.Tuner(
            tune.with_resources(_trainable(study, {t.name: t for t in todo}),
                                {"cpu": study.cpus, "gpu": study.gpus}),
            param_space={"trial": tune.grid_search([t.name for t in todo])},
            tune_config=tune.TuneConfig(trial_name_creator=lambda t: t.config["trial"],
                                        trial_dirname_creator=lambda t: t.config["trial"]),
            run_config=tune.RunConfig(
                name="tune", storage_path=os.path.join(study.dir, ".ray"), verbose=0,
                failure_config=tune.FailureConfig(max_failures=study.max_failures),
                callbacks=[Progress(study, every_s)]))
        tuner.fit()
    finally:
        ray.shutdown()
    return [t for t in todo if not finished(t, study.total_samples, study.results)]


__all__ = ["Progress", "check_resources", "run_study"]

"""One trial of a study: an ordinary run directory trained by ``acegnn train`` in a child
process, resumed from its checkpoint when it has one. Nothing here needs Ray.

Beside the run's own files a trial keeps ``study.log`` (each session's command and its
stderr) and, once it reached the study's budget or stopped at success, ``study.json``
(the run's summary and that budget): a study run again skips it.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from typing import Callable, Dict, List, Optional, Sequence

import yaml

from acegnn.study.spec import Study, Trial
from acegnn.utils.io import write_text
from acegnn.utils.runs import CHECKPOINT, read_csv, run_holder, train_args

DONE = "study.json"
LOG = "study.log"
#: What a session killed before its first checkpoint leaves of a new run.
UNFINISHED_START = ("config.yaml", "train.csv", "eval.csv", "tb")
#: prctl(2) of the C library, on Linux.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


def reached(summary: dict, total_samples: int, stop_on_success: bool) -> bool:
    """Whether a run's summary ends its training: ``total_samples`` reached, or a success
    that stops it (``train.stop_on_success``). A session stopped by ``train.max_minutes``
    reached neither."""
    return summary["samples"] >= total_samples or (
        stop_on_success and summary.get("samples_to_success") is not None)


def kept(results: str, trial: Trial, ext: str) -> str:
    """Where a study's ``results`` keep a finished trial's curve (``.csv``, its
    ``eval.csv``) and summary (``.json``, its ``study.json``)."""
    return os.path.join(results, trial.name + ext)


def finished(trial: Trial, total_samples: int, results: Optional[str] = None) -> bool:
    """Whether the trial has been trained to ``total_samples`` (or stopped at success
    on its way there): its ``study.json``; or, where its run directory holds neither that
    nor a checkpoint (a new machine), the copy of it kept in ``results``, so that a
    trial whose curve is kept is not trained again."""
    paths = [os.path.join(trial.run_dir, DONE)]
    if results and not os.path.exists(os.path.join(trial.run_dir, CHECKPOINT)):
        paths.append(kept(results, trial, ".json"))
    for path in paths:
        try:
            with open(path) as f:
                done = json.load(f)
            return done["total_samples"] >= total_samples and reached(
                done, done["total_samples"], done.get("stop_on_success", True))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return False


def train_command(trial: Trial, total_samples: int, overrides: Sequence[str]) -> List[str]:
    """``acegnn`` arguments that train the trial to ``total_samples``: ``--resume`` where
    its run directory holds a checkpoint, else a new run
    (:func:`acegnn.utils.runs.train_args`)."""
    return train_args(trial.config, trial.run_dir, total_samples, overrides, trial.start)


def _stop_on_success(run_dir: str) -> bool:
    """``train.stop_on_success`` of the run's ``config.yaml`` (the trainer's default
    without it)."""
    try:
        with open(os.path.join(run_dir, "config.yaml")) as f:
            return bool(yaml.safe_load(f)["train"].get("stop_on_success", True))
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return True


def _die_with_parent() -> None:
    """In the child, before it runs: be sent SIGTERM when the worker that started it dies
    (PR_SET_PDEATHSIG), so that a killed worker leaves no training behind."""
    _PRCTL(1, signal.SIGTERM)


def _poll(proc: subprocess.Popen, seconds: float) -> Optional[int]:
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


def last_eval(path: str) -> Optional[Dict[str, float]]:
    """The last row of ``eval.csv`` written whole (a row being written is left out)."""
    try:
        rows = read_csv(path, complete=True)
    except ValueError:  # a file being replaced
        return None
    return rows[-1] if rows else None


def _forget_stale(run_dir: str) -> None:
    """Remove what a new session would trip over: the ``study.json`` of a smaller budget
    and, without a checkpoint, what a start killed before its first left."""
    stale = [DONE] + ([] if os.path.exists(os.path.join(run_dir, CHECKPOINT))
                      else list(UNFINISHED_START))
    for name in stale:
        path = os.path.join(run_dir, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)


def train_trial(trial: Trial, study: Study, on_eval: Callable[[Dict[str, float]], None],
                poll_s: float = 2.0) -> dict:
    """Train ``trial`` to the study's budget; its summary. Every ``poll_s`` seconds
    while it runs, ``on_eval`` is called with the last row of its ``eval.csv`` if that
    row is new (rows written between two looks are not passed).

    The child process runs with ``resources.cpus`` threads, in :attr:`Study.cwd` (the
    directory ``acegnn study`` was called from). A run directory without a checkpoint
    holds only what a session killed before its first checkpoint left: that is removed
    (:data:`UNFINISHED_START`) and the run starts again. The summary is written to
    ``study.json`` only when the run reached the budget or stopped at success
    (:func:`reached`). A session that stopped short (``train.max_minutes``) ends the
    trial unfinished, without raising: Tune does not retry it, and the study's next
    run resumes it.

    Args:
        trial (Trial): The trial.
        study (Study): Its study (budget, overrides, CPUs, working directory).
        on_eval (callable): Called with a row of ``eval.csv``, as floats.
        poll_s (float, optional): Seconds between looks at ``eval.csv``.
            (default: :obj:`2.0`)

    Raises:
        RuntimeError: when ``acegnn train`` fails (with the end of its stderr).
    """
    holder = run_holder(trial.run_dir)
    if holder is not None:  # before anything of the run is touched
        raise RuntimeError(f"{trial.name}: {trial.run_dir} is being trained by {holder}")
    _forget_stale(trial.run_dir)
    cmd = train_command(trial, study.total_samples, trial.overrides)
    os.makedirs(trial.run_dir, exist_ok=True)
    threads = str(max(1, int(study.cpus)))
    env = dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    log_path = os.path.join(trial.run_dir, LOG)
    with open(log_path, "a") as log, tempfile.TemporaryFile("w+") as out:
        log.write(f"$ acegnn {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen([sys.executable, "-m", "acegnn.cli", *cmd], stdout=out,
                                stderr=log, env=env, cwd=study.cwd,
                                preexec_fn=_die_with_parent if _PRCTL else None)
        reported = None
        try:
            code = None
            while code is None:
                code = _poll(proc, poll_s)
                row = last_eval(os.path.join(trial.run_dir, "eval.csv"))
                if row is not None and row["samples"] != reported:
                    reported = row["samples"]
                    on_eval(row)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out.seek(0)
        lines = out.read().strip().splitlines()
    if code != 0 or not lines:
        with open(log_path) as f:
            tail = f.read()[-2000:]
        raise RuntimeError(f"{trial.name}: acegnn train exited with {code}:\n{tail}")
    stop_on_success = _stop_on_success(trial.run_dir)
    summary = {"total_samples": study.total_samples, "stop_on_success": stop_on_success,
               **json.loads(lines[-1])}
    if reached(summary, study.total_samples, stop_on_success):
        write_text(os.path.join(trial.run_dir, DONE), json.dumps(summary, indent=1))
    else:
        with open(log_path, "a") as log:
            log.write(f"study: stopped at {summary['samples']} of {study.total_samples} "
                      f"samples (train.max_minutes?): not finished; the study's next run "
                      f"resumes it\n")
    return summary


def headline(trial: Trial, metric: str) -> float:
    """The trial's last evaluation of ``metric`` (NaN before its first)."""
    row = last_eval(os.path.join(trial.run_dir, "eval.csv")) or {}
    return row.get(metric, float("nan"))


def progress_line(study: Study, states: Dict[str, str], latest: Dict[str, float]) -> str:
    """One line on a running study: its trials done, running, stopped short of the budget
    (unfinished, :func:`train_trial`), failed and pending, and the best and median of
    their latest headline metric."""
    counts = {s: sum(v == s for v in states.values())
              for s in ("done", "running", "stopped", "failed", "pending")}
    line = f"study {study.name}: " + ", ".join(f"{n} {s}" for s, n in counts.items()
                                               if n or s not in ("stopped", "failed"))
    values = [v for v in latest.values() if not math.isnan(v)]
    if values:
        best = max(values) if study.mode == "max" else min(values)
        line += (f"; {study.metric} best {best:.3g}, median {statistics.median(values):.3g} "
                 f"({len(values)} of {len(states)} trials evaluated)")
    return line


__all__ = ["DONE", "LOG", "finished", "headline", "kept", "progress_line", "reached",
           "train_command", "train_trial"]

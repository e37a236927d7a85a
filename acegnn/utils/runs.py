"""Training runs as subprocesses, for the benchmark and study scripts.

A run directory that already holds a checkpoint is resumed (with a raised budget it
trains further), so an interrupted study continues where it stopped.
"""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from typing import IO, Dict, List, Optional, Sequence

try:
    import fcntl
except ImportError:  # not POSIX: no run-directory locks
    fcntl = None

#: A run's checkpoint in its directory (written by :mod:`acegnn.algos.checkpoint`; the
#: file names are here so that code that starts runs imports no torch).
CHECKPOINT = "checkpoint.pt"
#: A full checkpoint of the run at its first successful evaluation, kept when training
#: goes on (``train.stop_on_success=false``) so both policies can be evaluated.
SUCCESS_CHECKPOINT = "success.pt"
#: The lock file of a run directory that a process trains (:func:`lock_run_dir`).
LOCK = ".lock"
#: One thread per run: several runs share the machine's cores.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run_holder(run_dir: str) -> Optional[str]:
    """Who trains ``run_dir`` now (the pid and start written in its lock file), or
    ``None`` when no process holds its lock."""
    path = os.path.join(run_dir, LOCK)
    if fcntl is None or not os.path.exists(path):
        return None
    with open(path) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return f.read().strip() or "another process"
    return None


def lock_run_dir(run_dir: str) -> Optional[IO[str]]:
    """Take ``run_dir``'s lock for this process (released when the returned file is
    closed or the process ends, however it ends).

    Raises:
        ValueError: when another process holds it, naming that process.
    """
    if fcntl is None:
        return None
    os.makedirs(run_dir, exist_ok=True)
    f = open(os.path.join(run_dir, LOCK), "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        who = f.read().strip() or "another process"
        f.close()
        raise ValueError(f"{run_dir} is being trained by {who}; wait for it to end or "
                         f"choose another run.name") from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} (since {time.strftime('%Y-%m-%d %H:%M:%S')})\n")
    f.flush()
    return f


def train_args(config: str, run_dir: str, total_samples: int,
               overrides: Sequence[str] = (), start: Sequence[str] = ()) -> List[str]:
    """``acegnn`` arguments that train ``config`` into ``run_dir`` up to
    ``total_samples``: ``--resume`` where ``run_dir`` holds a checkpoint, else a new run.
    ``start`` are overrides of a new run only (its seed, its method), ``overrides`` of
    both."""
    parent, name = os.path.split(os.path.abspath(run_dir))
    budget = [f"train.total_samples={total_samples}", "train.progress=false"]
    if os.path.exists(os.path.join(run_dir, CHECKPOINT)):
        return ["train", "--resume", run_dir, *budget, *overrides]
    return ["train", config, *start, *overrides, f"run.dir={parent}", f"run.name={name}",
            *budget]


def train_or_resume(config: str, run_dir: str, total_samples: int,
                    overrides: Sequence[str] = (), start: Sequence[str] = ()) -> dict:
    """``acegnn train`` ``config`` into ``run_dir`` (resumed if it holds a checkpoint) up
    to ``total_samples``, one thread; returns the run's JSON summary. Arguments as
    :func:`train_args`'s.

    Raises:
        RuntimeError: if the run fails (with the end of its stderr).
    """
    cmd = train_args(config, run_dir, total_samples, overrides, start)
    out = acegnn(cmd, what=os.path.basename(os.path.abspath(run_dir)))
    return json.loads(out.strip().splitlines()[-1])


def acegnn(args: Sequence[str], what: str = "") -> str:
    """Run the ``acegnn`` CLI with one thread; its stdout. ``what`` names it in errors
    (default: the command)."""
    env = dict(os.environ, **ONE_THREAD)
    out = subprocess.run([sys.executable, "-m", "acegnn.cli", *args], env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{what or 'acegnn ' + ' '.join(args)} failed:\n{out.stderr[-2000:]}")
    return out.stdout


def read_csv(path: str, complete: bool = False) -> List[Dict[str, float]]:
    """Rows of a run's ``eval.csv`` or ``train.csv`` as floats (empty cells dropped).
    With ``complete``, a last line without its newline (a row being written) is left out."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        text = f.read()
    if complete and not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]
    return [{k: float(v) for k, v in row.items() if v not in ("", None)}
            for row in csv.DictReader(io.StringIO(text))]


def add_test_play_args(p, what: str = "episodes") -> None:
    """The options of a script that plays greedy test ``what`` of runs' checkpoints:
    ``--episodes`` (64), ``--seed`` (2024) and ``--json`` (a file for the records)."""
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--seed", type=int, default=2024, help=f"the test {what}' seed")
    p.add_argument("--json", help="also write the records to this file")


def write_json(path: Optional[str], records) -> None:
    """``records`` as indented JSON to ``path`` (nothing when ``path`` is empty)."""
    if path:
        with open(path, "w") as f:
            json.dump(records, f, indent=1)

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
from typing import Dict, List, Sequence

#: A run's checkpoint in its directory (written by :mod:`acegnn.algos.checkpoint`; named
#: here so that code that starts runs imports no torch).
CHECKPOINT = "checkpoint.pt"
#: One thread per run: several runs share the machine's cores.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


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

"""Training runs as subprocesses, for the benchmark and study scripts.

A run directory that already holds a checkpoint is resumed (with a raised budget it
trains further), so an interrupted study continues where it stopped.
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from typing import Dict, List, Sequence

#: One thread per run: several runs share the machine's cores.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def train_or_resume(config: str, run_dir: str, total_samples: int,
                    overrides: Sequence[str] = (), start: Sequence[str] = ()) -> dict:
    """``acegnn train`` ``config`` into ``run_dir`` (resumed if it holds a checkpoint) up
    to ``total_samples``, one thread; returns the run's JSON summary. ``start`` are
    overrides of a new run only (its seed, its method), ``overrides`` of both.

    Raises:
        RuntimeError: if the run fails (with the end of its stderr).
    """
    parent, name = os.path.split(os.path.abspath(run_dir))
    budget = [f"train.total_samples={total_samples}", "train.progress=false"]
    if os.path.exists(os.path.join(run_dir, "checkpoint.pt")):
        cmd = ["train", "--resume", run_dir, *budget, *overrides]
    else:
        cmd = ["train", config, *start, *overrides, f"run.dir={parent}", f"run.name={name}",
               *budget]
    out = acegnn(cmd, what=name)
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


def read_csv(path: str) -> List[Dict[str, float]]:
    """Rows of a run's ``eval.csv`` or ``train.csv`` as floats (empty cells dropped)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [{k: float(v) for k, v in row.items() if v not in ("", None)}
                for row in csv.DictReader(f)]

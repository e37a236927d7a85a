#!/usr/bin/env python
"""Wall-clock of one small study on a local Ray with 1 and 2 CPUs, side by side.

The study is ``configs/studies/smoke.yaml`` (ACE-DQN and ACE-w/o-IA on Spiders-and-Fly
5x5, tiny networks) with seeds 0 and 1: 4 trials of ``--total-samples`` each, every
trial reserving one CPU. For each ``--cpus`` value, ``acegnn study`` runs it from
scratch in its own directory (``<dir>/cpus<N>``) and the script prints:

* the command's wall-clock (Ray's start and stop included);
* the sum of the trials' training wall-clocks (``wall_s`` of each ``study.json``);
* the speed-up of each setting over the first.

``--plot PATH`` draws each trial's training as a bar on a time line, one panel per
setting. A bar ends when the trial's ``study.json`` was written and is ``wall_s`` long.
The timings mean something only on a machine that nothing else loads.

    python scripts/bench_study.py                              # 1 and 2 CPUs
    python scripts/bench_study.py --total-samples 8192 --plot docs/study_cpus.png
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Dict, List

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SMOKE = os.path.join(ROOT, "configs", "studies", "smoke.yaml")
SEEDS = [0, 1]


def study_file(out_dir: str, total_samples: int) -> str:
    """The smoke study with :data:`SEEDS` and ``total_samples``, written to ``out_dir``."""
    with open(SMOKE) as f:
        spec = yaml.safe_load(f)
    spec.update(seeds=SEEDS, total_samples=total_samples, dir=os.path.join(out_dir, "study"))
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "bench_study.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(spec, f, sort_keys=False)
    return path


def trial_times(path: str, study_dir: str) -> Dict[str, tuple]:
    """Trial name -> (end, wall_s) of the study file ``path`` run in ``study_dir``: when
    the trial's ``study.json`` was written (epoch seconds) and its run's training
    wall-clock.

    Raises:
        RuntimeError: when a trial of the study has not finished.
    """
    from acegnn.study.spec import load_study

    out = {}
    for trial in load_study(path, study_dir).trials:
        done = os.path.join(trial.run_dir, "study.json")
        if not os.path.isfile(done):
            raise RuntimeError(f"trial {trial.name} in {study_dir} did not finish "
                               f"(no study.json)")
        with open(done) as f:
            out[trial.name] = (os.path.getmtime(done), float(json.load(f)["wall_s"]))
    return out


def run_setting(path: str, out_dir: str, cpus: int) -> dict:
    """Run the study from scratch on a local Ray of ``cpus`` CPUs: its timings."""
    study_dir = os.path.join(out_dir, f"cpus{cpus}")
    shutil.rmtree(study_dir, ignore_errors=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", "acegnn.cli", "study", path, "--dir",
                           study_dir, "--cpus", str(cpus), "--progress-every", "600"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.time() - start
    if proc.returncode != 0:
        raise RuntimeError(f"acegnn study with --cpus {cpus} failed "
                           f"(rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    trials = trial_times(path, study_dir)
    return {"cpus": cpus, "start": start, "wall_s": wall, "trials": trials,
            "train_s": sum(w for _, w in trials.values())}


def table(results: List[dict]) -> str:
    """The settings side by side, as a markdown table."""
    base = results[0]["wall_s"]
    lines = ["| Ray CPUs | trials | study wall-clock (s) | trials' training, summed (s) | "
             "speed-up |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['cpus']} | {len(r['trials'])} | {r['wall_s']:.1f} | "
                     f"{r['train_s']:.1f} | {base / r['wall_s']:.2f}x |")
    return "\n".join(lines)


def plot(results: List[dict], path: str) -> None:
    """Each trial's training as a bar on the study's time line, a panel per setting."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, sharex=True,
                             figsize=(7, 1.2 + 1.1 * len(results)), squeeze=False)
    for ax, r in zip(axes[:, 0], results):
        names = sorted(r["trials"])
        for row, name in enumerate(names):
            end, wall = r["trials"][name]
            ax.barh(row, wall, left=end - wall - r["start"], color="tab:blue")
        ax.axvline(r["wall_s"], color="black", linestyle="--", linewidth=1)
        ax.set_xlim(0, 1.02 * max(q["wall_s"] for q in results))
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.set_title(f"{r['cpus']} CPU{'s' if r['cpus'] > 1 else ''}: study "
                     f"{r['wall_s']:.0f} s (dashed)", fontsize=9)
    axes[-1, 0].set_xlabel("seconds since acegnn study started")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cpus", type=int, nargs="+", default=[1, 2])
    p.add_argument("--total-samples", type=int, default=4096)
    p.add_argument("--dir", default=os.path.join("runs", "bench_study"))
    p.add_argument("--plot", help="PNG of the trials' time lines")
    args = p.parse_args(argv)
    if any(c < 1 for c in args.cpus) or args.total_samples < 1:
        p.error(f"--cpus and --total-samples must be positive "
                f"(got {args.cpus}, {args.total_samples})")
    out_dir = os.path.abspath(args.dir)
    path = study_file(out_dir, args.total_samples)
    results = [run_setting(path, out_dir, c) for c in args.cpus]
    print(f"{len(results[0]['trials'])} trials of {args.total_samples:,} samples "
          f"({os.path.relpath(SMOKE, ROOT)}, seeds {SEEDS}), "
          f"os.cpu_count() = {os.cpu_count()}:\n")
    print(table(results))
    if args.plot:
        plot(results, args.plot)
        print(f"\nfigure: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

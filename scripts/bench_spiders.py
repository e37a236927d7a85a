#!/usr/bin/env python
"""Spiders-and-Fly, paper Table 1 ACE row: samples to 100% success and steps gap.

For every (grid, seed): `acegnn train configs/spiders_fly_<N>x<N>.yaml seed=S` until the
greedy policy catches the fly within 10 steps in all 32 test episodes (the paper's
"samples"), then `acegnn eval` of that policy on `--gap-episodes` fresh test episodes
for the steps gap to the exact oracle (the paper's "steps"). Runs go in parallel
processes with one thread each.

    python scripts/bench_spiders.py                          # 5 seeds, 5x5 and 7x7
    python scripts/bench_spiders.py --grids 5 --seeds 0 1 --json out.json
    python scripts/bench_spiders.py -- model.layers=2        # extra overrides after --
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAPER = {5: {"samples_m": (0.09, 0.01), "gap": (0.04, 0.03)},
         7: {"samples_m": (1.01, 0.06), "gap": (0.07, 0.02)}}


def run_one(grid: int, seed: int, ns: argparse.Namespace) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    name = f"bench_{grid}x{grid}_seed{seed}"
    run_dir = os.path.join(ns.run_dir, name)
    cfg = os.path.join(ROOT, "configs", f"spiders_fly_{grid}x{grid}.yaml")
    cmd = [sys.executable, "-m", "acegnn.cli", "train", cfg, f"seed={seed}",
           f"run.dir={ns.run_dir}", f"run.name={name}", "train.progress=false",
           f"train.total_samples={ns.total_samples[grid]}", *ns.overrides]
    if os.path.exists(os.path.join(run_dir, "checkpoint.pt")):
        cmd = [sys.executable, "-m", "acegnn.cli", "train", "--resume", run_dir]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{out.stderr[-2000:]}")
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    wall = time.perf_counter() - t0
    ev = subprocess.run([sys.executable, "-m", "acegnn.cli", "eval", run_dir, "--episodes",
                         str(ns.gap_episodes), "--seed", "777"], env=env, capture_output=True,
                        text=True, check=True)
    result = json.loads(ev.stdout.strip().splitlines()[-1])
    rec = {"grid": grid, "seed": seed, "samples_to_100": summary["samples_to_success"],
           "samples": summary["samples"], "steps_gap": result["steps_gap"],
           "success_rate": result["success_rate"], "mean_steps": result["mean_steps"],
           "wall_s": wall, "env_steps_per_s": summary["env_steps_per_s"], "run_dir": run_dir}
    print(json.dumps(rec), flush=True)
    return rec


def fmt(values, scale=1.0, digits=2) -> str:
    vals = [v * scale for v in values if v is not None]
    if not vals:
        return "not reached"
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    miss = len(values) - len(vals)
    return f"{statistics.mean(vals):.{digits}f} ± {sd:.{digits}f}" + (f" ({miss} not reached)" if miss else "")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grids", nargs="+", type=int, default=[5, 7])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel (one thread each)")
    p.add_argument("--max-samples-5", type=int, default=1_000_000)
    p.add_argument("--max-samples-7", type=int, default=3_000_000)
    p.add_argument("--gap-episodes", type=int, default=1024)
    p.add_argument("--run-dir", default=os.path.join(ROOT, "runs", "bench"))
    p.add_argument("--json", help="write one record per (grid, seed)")
    p.add_argument("overrides", nargs="*", help="config overrides for every run, after --")
    ns = p.parse_args(argv)
    ns.total_samples = {5: ns.max_samples_5, 7: ns.max_samples_7}
    for g in ns.grids:
        ns.total_samples.setdefault(g, ns.max_samples_7)
    jobs = [(g, s) for g in ns.grids for s in ns.seeds]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(ns.jobs) as pool:
        records = list(pool.map(lambda gs: run_one(gs[0], gs[1], ns), jobs))
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(records, f, indent=1)
    print(f"\nACE on Spiders-and-Fly, {len(ns.seeds)} seeds, overrides {ns.overrides or 'none'} "
          f"({time.perf_counter() - t0:.0f} s in all, {ns.jobs} parallel runs)")
    print("| grid | samples to 100% (M) | steps gap | paper samples (M) | paper gap | wall-clock per run (s) | env steps/s |")
    print("|---|---|---|---|---|---|---|")
    for g in ns.grids:
        rs = [r for r in records if r["grid"] == g]
        paper = PAPER.get(g, {"samples_m": (float("nan"),) * 2, "gap": (float("nan"),) * 2})
        print(f"| {g}x{g} | {fmt([r['samples_to_100'] for r in rs], 1e-6)} | "
              f"{fmt([r['steps_gap'] for r in rs])} | {paper['samples_m'][0]} ± {paper['samples_m'][1]} | "
              f"{paper['gap'][0]} ± {paper['gap'][1]} | {fmt([r['wall_s'] for r in rs], digits=0)} | "
              f"{fmt([r['env_steps_per_s'] for r in rs], digits=0)} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""What a new SMAX process costs before its first battle step: importing acegnn's SMAX
task, building the task (jaxmarl's SMAX modules, the compiled reset) and the first
step (the compiled step), each timed in a fresh process.

"cold" runs with an empty JAX compilation cache (a new ``XDG_CACHE_HOME``), "warm" runs
again on the cache the cold run left. ``--baseline-dir`` times another checkout of
acegnn the same way (``git worktree add /tmp/base <commit>``), alternating with this
one so that both see the same load; medians of ``--repeats`` rounds.

    python scripts/bench_smax_start.py --scenario 3m --baseline-dir /tmp/base
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD = """
import json, sys, time
t0 = time.perf_counter()
import torch
from acegnn.envs.smac.smax import SMAXTask
t1 = time.perf_counter()
task = SMAXTask(sys.argv[1], int(sys.argv[2]), seed=0)
task.observe()
t2 = time.perf_counter()
task.step(torch.zeros(task.num_envs, task.n_agents, dtype=torch.long))
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "build_s": t2 - t1, "first_step_s": t3 - t2,
                  "total_s": t3 - t0}))
"""
PARTS = ("import_s", "build_s", "first_step_s", "total_s")


def start(code: str, cache: str, scenario: str, envs: int) -> dict:
    """One fresh process of checkout ``code`` with ``XDG_CACHE_HOME=cache``: its times."""
    env = dict(os.environ, PYTHONPATH=code, XDG_CACHE_HOME=cache, OMP_NUM_THREADS="1")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", CHILD, scenario, str(envs)], env=env,
                         capture_output=True, text=True, cwd=tempfile.gettempdir())
    if out.returncode != 0:
        raise RuntimeError(f"the SMAX process of {code} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", default="3m")
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--baseline-dir", help="another checkout of acegnn to time the same way")
    ns = p.parse_args(argv)
    codes = {"now": ROOT}
    if ns.baseline_dir:
        codes["baseline"] = os.path.abspath(ns.baseline_dir)
    runs = {(name, kind): [] for name in codes for kind in ("cold", "warm")}
    for _ in range(ns.repeats):
        for name, code in codes.items():
            with tempfile.TemporaryDirectory() as cache:
                for kind in ("cold", "warm"):
                    runs[name, kind].append(start(code, cache, ns.scenario, ns.envs))
    res = {f"{name} {kind}": {k: statistics.median(r[k] for r in rs) for k in PARTS}
           for (name, kind), rs in runs.items()}
    print(json.dumps({"scenario": ns.scenario, "envs": ns.envs, "repeats": ns.repeats, **res}))
    print(f"\nSMAX {ns.scenario}, {ns.envs} battles: a new process, seconds "
          f"(median of {ns.repeats})\n")
    print("| code, JAX cache | import | task built and reset | first step | total |")
    print("|---|---|---|---|---|")
    for name, r in res.items():
        print(f"| {name} | " + " | ".join(f"{r[k]:.1f}" for k in PARTS) + " |")
    return res


if __name__ == "__main__":
    main()

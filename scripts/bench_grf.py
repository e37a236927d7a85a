#!/usr/bin/env python
"""Google Research Football collection throughput with 1, 2 and 4 engine processes.

Env steps per second of collection (``acegnn.algos.collector.Collector``: graphs of
the current states, a decision, the step of every game, the transitions handed to a
sink) on ``--envs`` games split over 1, 2 and 4 engine processes, with two policies:

* ``random``: a uniformly random available action per player (graphs are built all
  the same);
* ``ace``: ACE-DQN's epsilon-greedy decision (``ACEDQN.act``, epsilon 0.05) with the
  paper's GRF network (hidden 128) on the task's graphs.

The rounds of the process counts alternate (1, 2, 4, 1, 2, 4, ...) so that each sees
the same load, and the figures are medians over ``--repeats`` rounds; the machine may be
shared: the JSON records its load. ``--quick`` (the smoke test) runs 4 games on 1 and 2
processes for a few steps.

    python scripts/bench_grf.py                       # 8 games, 1/2/4 processes
    python scripts/bench_grf.py --json grf.json --scenario academy_counterattack_hard
    python scripts/bench_grf.py --quick
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PAPER_ALGO = dict(optimizer="rmsprop", lr=0.002, weight_decay=1e-5, target_theta=0.08)
EPSILON = 0.05


def _policies(task, hidden: int, seed: int):
    import torch

    from acegnn.algos.ace_dqn import ACEDQN, ACEDQNConfig
    from acegnn.nn.ace import ModelConfig

    gen = torch.Generator().manual_seed(seed)
    learner = ACEDQN(task.schema, ACEDQNConfig(**PAPER_ALGO), ModelConfig(hidden=hidden))

    def random_policy(graphs):
        avail = graphs["action"].available.view(-1, 19)
        return (torch.rand(avail.shape, generator=gen) * avail).argmax(1)

    def ace_policy(graphs):
        return learner.act(graphs, EPSILON, gen)

    return {"random": random_policy, "ace": ace_policy}


def measure(scenario: str, envs: int, workers: list, steps: int, repeats: int, hidden: int) -> dict:
    """``{policy: {workers: [env steps/s per round]}}`` and the restarts seen."""
    import torch

    from acegnn.algos.collector import Collector
    from acegnn.envs.grf import GRFTask

    torch.set_num_threads(1)
    tasks = {w: GRFTask(scenario, envs, seed=0, num_workers=w) for w in workers}
    try:
        policies = {w: _policies(tasks[w], hidden, seed=w) for w in workers}
        rates = {p: {w: [] for w in workers} for p in ("random", "ace")}
        collectors = {w: Collector(tasks[w], lambda step: None) for w in workers}
        for w in workers:  # warm-up: every game past its first steps, the network built
            for p in rates:
                collectors[w].run(policies[w][p], steps=3)
        for _ in range(repeats):
            for p in rates:
                for w in workers:
                    c = collectors[w]
                    before = c.samples
                    t0 = time.perf_counter()
                    c.run(policies[w][p], steps=steps)
                    rates[p][w].append((c.samples - before) / (time.perf_counter() - t0))
        restarts = {w: tasks[w].pool.restarts for w in workers}
    finally:
        for t in tasks.values():
            t.close()
    return {"rates": rates, "restarts": restarts}


def _machine() -> dict:
    import torch

    return {"host": platform.node(), "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version(), "shared": True}


def _table(res: dict) -> str:
    m = res["machine"]
    lines = [f"GRF {res['scenario']}, {res['envs']} games, {res['steps']} collection steps a "
             f"round, median of {res['repeats']} rounds; {m['cores']} cores, load "
             f"{m['load_avg_1m']} at the start, {m['load_avg_1m_end']} at the end", ""]
    head = f"{'env steps/s':<28}" + "".join(f"{f'{w} proc':>12}" for w in res["workers"])
    lines.append(head + f"{'2 v 1':>10}")
    for p, name in (("random", "random policy"), ("ace", "ACE acting (eps 0.05)")):
        row = res["env_steps_per_s"][p]
        speedup = res["speedup_2_vs_1"].get(p)
        lines.append(f"{name:<28}" + "".join(f"{row[str(w)]:>12,.1f}" for w in res["workers"])
                     + (f"{speedup:>9.2f}x" if speedup is not None else f"{'-':>10}"))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="academy_3_vs_1_with_keeper")
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--steps", type=int, default=60, help="collection steps a round")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--quick", action="store_true", help="a short run (the smoke test)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.envs, args.workers, args.steps, args.repeats = 4, [1, 2], 4, 1
    for key in ("envs", "steps", "repeats", "hidden"):
        if getattr(args, key) < 1:
            parser.error(f"--{key} must be positive (got {getattr(args, key)})")
    if any(w < 1 or w > args.envs for w in args.workers):
        parser.error(f"--workers must be in 1..{args.envs} (got {args.workers})")
    machine = _machine()
    out = measure(args.scenario, args.envs, args.workers, args.steps, args.repeats, args.hidden)
    machine["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    med = {p: {str(w): statistics.median(v) for w, v in by_w.items()}
           for p, by_w in out["rates"].items()}
    res = {"scenario": args.scenario, "envs": args.envs, "workers": args.workers,
           "steps": args.steps, "repeats": args.repeats, "quick": args.quick,
           "machine": machine, "env_steps_per_s": med,
           "rounds": {p: {str(w): v for w, v in by_w.items()} for p, by_w in out["rates"].items()},
           "speedup_2_vs_1": ({p: med[p]["2"] / med[p]["1"] for p in med}
                              if {1, 2} <= set(args.workers) else {}),
           "restarts": {str(w): r for w, r in out["restarts"].items()}}
    print(json.dumps(res))
    print(_table(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

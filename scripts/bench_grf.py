#!/usr/bin/env python
"""Google Research Football collection throughput with 1, 2 and 4 engine processes.

Env steps per second of collection (``acegnn.algos.collector.Collector``: graphs of
the current states, a decision, the step of every game, the transitions handed to a
sink) on ``--envs`` games split over 1, 2 and 4 engine processes, with two policies:

* ``random``: a uniformly random available action per player (graphs are built all
  the same);
* ``ace``: ACE-DQN's epsilon-greedy decision (``ACEDQN.act``, epsilon 0.05) with the
  paper's GRF network (hidden 128) on the task's graphs.

Each measurement collects ``--steps`` steps of every game. A round measures every
(policy, process count) once, in turn, so that each sees the same load; the figures are
medians over rounds. Beside the measured rate, each measurement records:

* the CPU time per env step of the learner's process and of the engine processes, and
  the rate **projected for free cores** from it: a collection step is the learner's work
  (graphs, decision, gathering) and then the slowest engine process's, so
  ``steps / (learner CPU + slowest engine's CPU)``;
* how many cores *other* processes kept busy meanwhile (``/proc/stat``'s busy time less
  ours). On a shared machine the scheduler may hold a session to its share (Linux's
  autogroup gives each session an equal share of the CPUs, however many processes it
  runs), so measured rates only show the processes' parallelism in *quiet* rounds,
  those in which other processes used less than ``--quiet`` cores; ``--quiet-rounds N``
  goes on measuring (up to ``--max-minutes``) until every setting has ``N`` of them.

``--backend ray`` runs the engines as Ray actors (``env.backend: ray``, a Ray started
on this machine) instead of processes. ``--quick`` (the smoke test) runs 4 games on 1 and
2 processes for a few steps.

    python scripts/bench_grf.py                       # 8 games, 1/2/4 processes
    python scripts/bench_grf.py --quiet-rounds 3 --max-minutes 30 --json grf.json
    python scripts/bench_grf.py --workers 2 --backend ray     # engines as Ray actors
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
POLICIES = ("random", "ace")


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


def _busy_cpu_s() -> float:
    """CPU seconds every core has spent busy since boot (``/proc/stat``); NaN elsewhere."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return float("nan")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def measure(args) -> list:
    """One record per measurement: policy, processes, round, measured and projected env
    steps/s, CPU ms per env step (learner, engines) and the cores others kept busy."""
    import torch

    from acegnn.algos.collector import Collector
    from acegnn.envs.grf import GRFTask

    torch.set_num_threads(1)
    workers = args.workers
    tasks = {w: GRFTask(args.scenario, args.envs, seed=0, num_workers=w, backend=args.backend)
             for w in workers}
    records = []
    try:
        policies = {w: _policies(tasks[w], args.hidden, seed=w) for w in workers}
        collectors = {w: Collector(tasks[w], lambda step: None) for w in workers}
        for w in workers:  # warm-up: every game past its first steps, the network built
            for p in POLICIES:
                collectors[w].run(policies[w][p], steps=3)
        deadline = time.monotonic() + 60 * args.max_minutes

        def quiet_enough() -> bool:
            if args.quiet_rounds == 0:
                return True
            return all(sum(1 for r in records if r["policy"] == p and r["workers"] == w
                           and r["others_cores"] < args.quiet) >= args.quiet_rounds
                       for p in POLICIES for w in workers)

        rnd = 0
        while rnd < args.repeats or (not quiet_enough() and time.monotonic() < deadline):
            for p in POLICIES:
                for w in workers:
                    c, pool = collectors[w], tasks[w].pool
                    before, engines = c.samples, list(pool.cpu_s)
                    busy0, c0, t0 = _busy_cpu_s(), time.process_time(), time.perf_counter()
                    c.run(policies[w][p], steps=args.steps)
                    wall, main_cpu = time.perf_counter() - t0, time.process_time() - c0
                    busy = _busy_cpu_s() - busy0
                    n = c.samples - before
                    engine_cpu = [a - b for a, b in zip(pool.cpu_s, engines)]
                    records.append({
                        "policy": p, "workers": w, "round": rnd,
                        "env_steps_per_s": n / wall,
                        "projected_env_steps_per_s": n / (main_cpu + max(engine_cpu)),
                        "learner_ms": 1e3 * main_cpu / n, "engines_ms": 1e3 * sum(engine_cpu) / n,
                        "others_cores": max(0.0, busy - main_cpu - sum(engine_cpu)) / wall})
            rnd += 1
        for w in workers:
            if tasks[w].pool.restarts:
                raise RuntimeError(f"{tasks[w].pool.restarts} engine restarts with {w} "
                                   f"processes: {tasks[w].pool.events}")
    finally:
        for t in tasks.values():
            t.close()
    return records


def summarise(records: list, workers: list, quiet: float) -> dict:
    """Medians per (policy, processes), over all rounds and over quiet rounds."""
    def median(p, w, key, only_quiet=False):
        vals = [r[key] for r in records if r["policy"] == p and r["workers"] == w
                and (not only_quiet or r["others_cores"] < quiet)]
        return statistics.median(vals) if vals else None

    def table(key, only_quiet=False):
        return {p: {str(w): median(p, w, key, only_quiet) for w in workers} for p in POLICIES}

    def ratio(t):
        if not {1, 2} <= set(workers):
            return {}
        return {p: (t[p]["2"] / t[p]["1"] if t[p]["2"] and t[p]["1"] else None) for p in t}

    out = {"env_steps_per_s": table("env_steps_per_s"),
           "quiet_env_steps_per_s": table("env_steps_per_s", True),
           "quiet_rounds": {p: {str(w): sum(1 for r in records if r["policy"] == p and
                                            r["workers"] == w and r["others_cores"] < quiet)
                                for w in workers} for p in POLICIES},
           "projected_env_steps_per_s": table("projected_env_steps_per_s"),
           "learner_cpu_ms_per_env_step": table("learner_ms"),
           "engines_cpu_ms_per_env_step": table("engines_ms"),
           "others_cores": table("others_cores")}
    out["speedup_2_vs_1"] = ratio(out["env_steps_per_s"])
    out["quiet_speedup_2_vs_1"] = ratio(out["quiet_env_steps_per_s"])
    out["projected_speedup_2_vs_1"] = ratio(out["projected_env_steps_per_s"])
    return out


def _machine() -> dict:
    import torch

    autogroup = None
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            autogroup = f.read().strip() == "1"
    except OSError:
        pass
    return {"host": platform.node(), "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
            "sched_autogroup": autogroup, "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(), "shared": True}


#: How the table names each ``--backend``.
ENGINES = {"process": "processes", "ray": "Ray actors"}


def _table(res: dict) -> str:
    m, ws = res["machine"], res["workers"]
    def fmt(v, spec):  # "-" where a figure is missing (no quiet round)
        width = int("".join(ch for ch in spec.split(",")[0].split(".")[0] if ch.isdigit()))
        return f"{v:{spec}}" if v is not None else f"{'-':>{width}}"

    lines = [f"GRF {res['scenario']}, {res['envs']} games, engines as {ENGINES[res['backend']]}, "
             f"{res['steps']} collection steps a "
             f"measurement, {res['rounds']} rounds; {m['cores']} cores (autogroup "
             f"{m['sched_autogroup']}), load {m['load_avg_1m']} at the start, "
             f"{m['load_avg_1m_end']} at the end", ""]
    lines.append(f"{'env steps/s':<46}" + "".join(f"{f'{w} proc':>11}" for w in ws)
                 + f"{'2 v 1':>9}")
    for key, ratio, what in (("env_steps_per_s", "speedup_2_vs_1", "all rounds"),
                             ("quiet_env_steps_per_s", "quiet_speedup_2_vs_1", "quiet rounds"),
                             ("projected_env_steps_per_s", "projected_speedup_2_vs_1",
                              "projected, free cores")):
        for p, name in (("random", "random policy"), ("ace", "ACE acting")):
            row, speedup = res[key][p], res[ratio].get(p)
            lines.append(f"{name + ', ' + what:<46}" + "".join(f"{fmt(row[str(w)], '>11,.1f')}"
                                                             for w in ws)
                         + (f"{speedup:>8.2f}x" if speedup else f"{'-':>9}"))
    lines.append("")
    lines.append(f"{'per setting':<46}" + "".join(f"{f'{w} proc':>11}" for w in ws))
    for p, name in (("random", "random policy"), ("ace", "ACE acting")):
        for key, what in (("quiet_rounds", "quiet rounds"),
                          ("others_cores", "cores other processes used"),
                          ("learner_cpu_ms_per_env_step", "learner CPU ms / env step"),
                          ("engines_cpu_ms_per_env_step", "engines CPU ms / env step")):
            spec = ">11d" if key == "quiet_rounds" else ">11.2f"
            lines.append(f"{name + ': ' + what:<46}" + "".join(fmt(res[key][p][str(w)], spec)
                                                             for w in ws))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="academy_3_vs_1_with_keeper")
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--steps", type=int, default=60, help="collection steps a measurement")
    parser.add_argument("--repeats", type=int, default=5, help="rounds at least")
    parser.add_argument("--quiet", type=float, default=0.2,
                        help="a round is quiet when other processes used fewer cores")
    parser.add_argument("--quiet-rounds", type=int, default=0,
                        help="go on until every setting has this many quiet rounds")
    parser.add_argument("--max-minutes", type=float, default=30.0,
                        help="stop waiting for quiet rounds after this long")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--backend", choices=["process", "ray"], default="process",
                        help="engines as processes or Ray actors (env.backend)")
    parser.add_argument("--quick", action="store_true", help="a short run (the smoke test)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.envs, args.workers, args.steps, args.repeats, args.quiet_rounds = 4, [1, 2], 4, 1, 0
    for key in ("envs", "steps", "repeats", "hidden"):
        if getattr(args, key) < 1:
            parser.error(f"--{key} must be positive (got {getattr(args, key)})")
    if any(w < 1 or w > args.envs for w in args.workers):
        parser.error(f"--workers must be in 1..{args.envs} (got {args.workers})")
    if args.quiet_rounds < 0 or args.max_minutes < 0 or args.quiet <= 0:
        parser.error(f"--quiet-rounds and --max-minutes must be >= 0 and --quiet > 0 (got "
                     f"{args.quiet_rounds}, {args.max_minutes}, {args.quiet})")
    machine = _machine()
    records = measure(args)
    machine["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    res = {"scenario": args.scenario, "envs": args.envs, "workers": args.workers,
           "backend": args.backend,
           "steps": args.steps, "rounds": 1 + max(r["round"] for r in records),
           "quiet": args.quiet, "quick": args.quick, "machine": machine,
           **summarise(records, args.workers, args.quiet), "records": records}
    print(json.dumps(res))
    print(_table(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Decisions per second of the efficient rollout against the naive one.

One decision = all agents of one state decide in sequence. States are random SMAC-like
graphs (`acegnn.envs.synthetic`): allies and enemies fully connected, actions stop,
4 moves and attack each enemy. Each (case, method) runs in its own process so that its
peak memory can be read (CPU: peak RSS growth over the set-up; CUDA: peak allocated).

    python scripts/bench_rollout.py                       # the full grid
    python scripts/bench_rollout.py --sizes 5x6 --batches 1 32 --json out.json

The naive rollout re-encodes every candidate; where it would take long it is timed on
the first states of the batch only (`naive_states` in the output) within
`--naive-budget` seconds: its cost per decision does not depend on the batch size.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def child(args: argparse.Namespace) -> dict:
    import torch

    from acegnn.envs.synthetic import random_state, smac_like_schema
    from acegnn.graph import collate
    from acegnn.nn import ACENetwork
    from acegnn.nn.naive import naive_rollout

    torch.manual_seed(0)
    device = torch.device(args.device)
    schema = smac_like_schema(heal=False)
    g = torch.Generator().manual_seed(0)
    n_states = args.batch if args.method == "efficient" else min(args.batch, args.naive_states)
    states = [random_state(schema, args.agents, args.enemies, g, mask_prob=0.2)
              for _ in range(n_states)]
    batch = collate(states).to(device)
    net = ACENetwork(schema, hidden=args.hidden).to(device).eval()

    def run():
        with torch.no_grad():
            if args.method == "efficient":
                net.rollout(batch, check=False)
            else:
                naive_rollout(net, batch)
        if device.type == "cuda":
            torch.cuda.synchronize()

    if args.method == "efficient":
        run()  # warm-up
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    rss0 = _rss_kb("VmRSS:")
    reps, t0 = 0, time.perf_counter()
    while True:
        run()
        reps += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= args.min_time or args.method == "naive":
            break
    if device.type == "cuda":
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak_mb = max(0, _rss_kb("VmHWM:") - rss0) / 1024
    return {"decisions_per_s": n_states * reps / elapsed, "states": n_states, "seconds": elapsed,
            "peak_mem_mb": peak_mb}


def measure(ns: argparse.Namespace, method: str, agents: int, enemies: int, batch: int,
            hidden: int, naive_states: int = 0) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", method, "--device", ns.device,
           "--agents", str(agents), "--enemies", str(enemies), "--batch", str(batch),
           "--hidden", str(hidden), "--naive-states", str(naive_states),
           "--min-time", str(ns.min_time)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", nargs="+", default=["5x6", "10x11", "27x30"],
                   help="agents x enemies (default: 5x6 10x11 27x30)")
    p.add_argument("--batches", nargs="+", type=int, default=[1, 32, 320])
    p.add_argument("--hidden", nargs="+", type=int, default=[128, 256])
    p.add_argument("--device", default="cpu")
    p.add_argument("--min-time", type=float, default=1.0, help="seconds to time the efficient path")
    p.add_argument("--naive-budget", type=float, default=20.0,
                   help="seconds the naive path may take per case (it runs on fewer states)")
    p.add_argument("--json", help="write one record per case to this path")
    p.add_argument("--child", choices=["efficient", "naive"], help=argparse.SUPPRESS)
    p.add_argument("--agents", type=int, help=argparse.SUPPRESS)
    p.add_argument("--enemies", type=int, help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    p.add_argument("--naive-states", type=int, default=0, help=argparse.SUPPRESS)
    ns = p.parse_args(argv)
    if ns.child:
        ns.method = ns.child
        ns.hidden = ns.hidden[0]
        print(json.dumps(child(ns)))
        return

    import torch

    records = []
    header = (f"{'agents':>6} {'enemies':>7} {'batch':>5} {'hidden':>6} | {'efficient/s':>11} "
              f"{'mem MB':>7} | {'naive/s':>9} {'states':>6} {'mem MB':>7} | {'ratio':>7}")
    print(f"device={ns.device} torch={torch.__version__} threads={torch.get_num_threads()}")
    print(header)
    print("-" * len(header))
    for size in ns.sizes:
        agents, enemies = (int(v) for v in size.lower().split("x"))
        for hidden in ns.hidden:
            naive_rate = None  # per-decision cost of the naive path, from a 1-state probe
            for batch in ns.batches:
                eff = measure(ns, "efficient", agents, enemies, batch, hidden)
                if naive_rate is None:
                    probe = measure(ns, "naive", agents, enemies, 1, hidden, naive_states=1)
                    naive_rate = probe["decisions_per_s"]
                n_naive = max(1, min(batch, int(ns.naive_budget * naive_rate)))
                nai = measure(ns, "naive", agents, enemies, batch, hidden, naive_states=n_naive)
                rec = {"agents": agents, "enemies": enemies, "batch": batch, "hidden": hidden,
                       "device": ns.device,
                       "efficient_decisions_per_s": eff["decisions_per_s"],
                       "naive_decisions_per_s": nai["decisions_per_s"],
                       "ratio": eff["decisions_per_s"] / nai["decisions_per_s"],
                       "efficient_peak_mem_mb": eff["peak_mem_mb"],
                       "naive_peak_mem_mb": nai["peak_mem_mb"], "naive_states": nai["states"]}
                records.append(rec)
                print(f"{agents:>6} {enemies:>7} {batch:>5} {hidden:>6} | "
                      f"{rec['efficient_decisions_per_s']:>11.1f} {eff['peak_mem_mb']:>7.0f} | "
                      f"{rec['naive_decisions_per_s']:>9.2f} {nai['states']:>6} "
                      f"{nai['peak_mem_mb']:>7.0f} | {rec['ratio']:>6.1f}x", flush=True)
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(records, f, indent=1)
        print(f"wrote {len(records)} records to {ns.json}")


if __name__ == "__main__":
    main()

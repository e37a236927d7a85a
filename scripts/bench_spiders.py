#!/usr/bin/env python
"""Spiders-and-Fly, paper Table 1: samples to 100% success and steps gap, per method.

For every (method, grid, seed): `acegnn train` (ACE: configs/spiders_fly_<N>x<N>.yaml, or
`--ace-config`; baselines: configs/spiders_fly_<N>x<N>_baselines.yaml with
algo.name=<method>) until the
greedy policy catches the fly within 10 steps in all 32 test episodes (the paper's
"samples"), then `acegnn eval` for the steps gap to the exact oracle (the paper's
"steps"): exactly, with the fly's moves in expectation over every valid start, and as the
mean of `--gap-episodes` fresh test episodes. With `-- train.stop_on_success=false` runs
train on to `--max-samples-N`, and the gap is reported twice: of the policy at its first
100% evaluation (the run's success.pt) and of the final policy. Runs go in parallel
processes with one thread each; a run directory that already holds a checkpoint is
resumed, so an interrupted benchmark continues where it stopped, and a larger
`--max-samples-N` trains finished runs further.

    python scripts/bench_spiders.py --markdown table1.md --plot table1.png   # the whole Table 1:
        # ACE, VDN, QMIX and QTRAN, 5 seeds each, 5x5 and 7x7 (days on 2 CPU cores)
    python scripts/bench_spiders.py --methods ace_dqn --grids 5 --seeds 0 1 --json out.json
    python scripts/bench_spiders.py --methods ace_dqn -- model.layers=2   # overrides after --
    python scripts/bench_spiders.py --methods ace_dqn --grids 5 \
        --ace-config 'configs/spiders_fly_{grid}x{grid}_paper.yaml'     # the paper's exact set-up
    python scripts/bench_spiders.py --grids 5 --max-samples-5 300000 -- train.stop_on_success=false
    python scripts/bench_spiders.py --methods ace_dqn qtran --records a.json b.json \
        --markdown table1.md --plot table1.png               # tables of runs made earlier
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from acegnn.utils.io import write_text
from acegnn.utils.runs import SUCCESS_CHECKPOINT, acegnn, read_csv, train_or_resume

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Paper Table 1: (mean, std) of samples to 100% (millions) and steps gap, per grid.
PAPER = {
    "ace_dqn": {5: {"samples_m": (0.09, 0.01), "gap": (0.04, 0.03)},
                7: {"samples_m": (1.01, 0.06), "gap": (0.07, 0.02)}},
    "vdn": {5: {"samples_m": (0.19, 0.02), "gap": (0.78, 0.10)},
            7: {"samples_m": (1.97, 0.10), "gap": (0.90, 0.12)}},
    "qmix": {5: {"samples_m": (0.19, 0.02), "gap": (0.77, 0.10)},
             7: {"samples_m": (1.81, 0.09), "gap": (0.87, 0.11)}},
    "qtran": {5: {"samples_m": (0.17, 0.02), "gap": (0.60, 0.09)},
              7: {"samples_m": (1.68, 0.09), "gap": (1.02, 0.09)}},
}
NAMES = {"ace_dqn": "ACE", "iql": "IQL", "vdn": "VDN", "qmix": "QMIX", "qtran": "QTRAN"}
COLORS = {"ace_dqn": "C0", "iql": "C4", "vdn": "C2", "qmix": "C1", "qtran": "C3"}  # same in every plot
TABLE1 = list(PAPER)  # the methods of the paper's Table 1: ACE, VDN, QMIX, QTRAN
ACE_CONFIG = "configs/spiders_fly_{grid}x{grid}.yaml"  # ACE's config, relative to the repository


def ace_config(template: str, grid: int) -> str:
    """ACE's config file for ``grid`` from a ``{grid}`` template (relative paths from the
    repository root).

    Raises:
        SystemExit: if the file does not exist (before any run starts).
    """
    path = template.format(grid=grid)
    path = path if os.path.isabs(path) else os.path.join(ROOT, path)
    if not os.path.isfile(path):
        sys.exit(f"--ace-config: no config file {path} for grid {grid}")
    return path


# Overrides that change how a run is kept, not what it learns: left out of a row's name.
BOOKKEEPING = ("train.stop_on_success=", "train.checkpoint_every=", "train.progress=",
               "train.total_samples=", "run.")


def row(rec: dict) -> tuple:
    """The table row and plot curve of a record: its method, ACE's config where not the
    default, and the overrides that change learning (records of earlier runs have
    neither: the default config, no overrides)."""
    config = rec.get("config")
    config = None if config == os.path.basename(ACE_CONFIG.format(grid=rec["grid"])) else config
    learning = tuple(o for o in rec.get("overrides", []) if not o.startswith(BOOKKEEPING))
    return rec["method"], config, learning


def label(key: tuple) -> str:
    """A row's name: the method, then what sets it apart, e.g.
    ``ACE (spiders_fly_5x5_paper.yaml, algo.nstep=3)``."""
    method, config, learning = key
    extra = ([config] if config else []) + list(learning)
    return NAMES[method] + (f" ({', '.join(extra)})" if extra else "")


def run_one(method: str, grid: int, seed: int, ns: argparse.Namespace) -> dict:
    prefix = "bench" if method == "ace_dqn" else f"bench_{method}"
    config = None
    if method == "ace_dqn":
        cfg, algo = ace_config(ns.ace_config, grid), []
        config = os.path.basename(cfg)
        if ns.ace_config != ACE_CONFIG:  # runs of two configs never share a directory
            prefix = f"bench_{os.path.splitext(config)[0]}"
    else:
        cfg = os.path.join(ROOT, "configs", f"spiders_fly_{grid}x{grid}_baselines.yaml")
        algo = [f"algo.name={method}"]
    run_dir = os.path.join(ns.run_dir, f"{prefix}_{grid}x{grid}_seed{seed}")
    summary = train_or_resume(cfg, run_dir, ns.total_samples[grid], ns.overrides,
                              start=[f"seed={seed}", *algo])

    def evaluate(path: str) -> dict:
        out = acegnn(["eval", path, "--episodes", str(ns.gap_episodes), "--seed", "777"])
        return json.loads(out.strip().splitlines()[-1])

    result = evaluate(run_dir)
    first = os.path.join(run_dir, SUCCESS_CHECKPOINT)  # the policy at its first 100%
    at_100 = None
    if summary["samples_to_success"] is not None:
        at_100 = result if summary["samples_to_success"] == summary["samples"] else evaluate(first)
    rec = {"method": method, "config": config, "grid": grid, "seed": seed,
           "overrides": list(ns.overrides), "samples_to_100": summary["samples_to_success"],
           "samples": summary["samples"], "steps_gap": result["exact_steps_gap"],
           "steps_gap_at_100": at_100["exact_steps_gap"] if at_100 else None,
           "sampled_steps_gap": result["steps_gap"], "success_rate": result["success_rate"],
           "exact_success_rate": result["exact_success_rate"], "mean_steps": result["mean_steps"],
           "wall_s": summary["wall_s"], "wall_to_100_s": summary["wall_to_success_s"],
           "env_steps_per_s": summary["env_steps_per_s"], "run_dir": run_dir}
    print(json.dumps(rec), flush=True)
    return rec


def write_records(records, path: str) -> None:
    """Write the records in (method, grid, seed) order, atomically."""
    records = sorted(records, key=lambda r: (r["method"], r["grid"], r["seed"]))
    write_text(path, json.dumps(records, indent=1))


def fmt(values, scale=1.0, digits=2, missing="not reached") -> str:
    vals = [v * scale for v in values if v is not None]
    if not vals:
        return missing
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    miss = len(values) - len(vals)
    return (f"{statistics.mean(vals):.{digits}f} ± {sd:.{digits}f}"
            + (f" ({len(vals)} of {len(values)}; {miss} {missing})" if miss else ""))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", nargs="+", default=TABLE1, choices=list(NAMES),
                   help="methods to run (default: Table 1's ACE, VDN, QMIX and QTRAN)")
    p.add_argument("--ace-config", default=ACE_CONFIG,
                   help="ACE's config, {grid} standing for the grid size (default: %(default)s)")
    p.add_argument("--grids", nargs="+", type=int, default=[5, 7])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel (one thread each)")
    p.add_argument("--max-samples-5", type=int, default=1_000_000)
    p.add_argument("--max-samples-7", type=int, default=3_000_000)
    p.add_argument("--gap-episodes", type=int, default=1024)
    p.add_argument("--run-dir", default=os.path.join(ROOT, "runs", "bench"))
    p.add_argument("--json", help="write one record per (method, grid, seed)")
    p.add_argument("--markdown", help="write the table to this markdown file")
    p.add_argument("--plot", help="plot success rate against samples to this image file")
    p.add_argument("--records", nargs="+", metavar="JSON",
                   help="train nothing: make the table and plot from records that earlier "
                        "--json runs wrote (of the selected methods, grids and seeds; the last record "
                        "of a (row, grid, seed) counts: method, ACE's config and overrides)")
    p.add_argument("overrides", nargs="*", help="config overrides for every run, after --")
    ns = p.parse_args(argv)
    ns.total_samples = {5: ns.max_samples_5, 7: ns.max_samples_7}
    for g in ns.grids:
        ns.total_samples.setdefault(g, ns.max_samples_7)
    t0 = time.perf_counter()
    records, failed = [], []
    if ns.records:
        if ns.overrides:
            sys.exit("--records trains nothing: overrides after -- do not apply")
        latest = {}
        for path in ns.records:
            with open(path) as f:
                for r in json.load(f):
                    if r["method"] in ns.methods and r["grid"] in ns.grids and r["seed"] in ns.seeds:
                        latest[(row(r), r["grid"], r["seed"])] = r
        records = list(latest.values())
        title = f"Spiders-and-Fly, from {', '.join(ns.records)}"
    else:
        jobs = [(m, g, s) for g in ns.grids for m in ns.methods for s in ns.seeds]
        with ThreadPoolExecutor(ns.jobs) as pool:
            futures = {pool.submit(run_one, *job, ns): job for job in jobs}
            for fut in as_completed(futures):  # a failed run does not lose the others' records
                try:
                    records.append(fut.result())
                except Exception as e:  # noqa: BLE001 -- reported below, exit status 1
                    failed.append(f"{futures[fut]}: {e}")
                if ns.json:  # after every run, so that an interrupted benchmark keeps its records
                    write_records(records, ns.json)
        title = (f"Spiders-and-Fly, {len(ns.seeds)} seeds, overrides {ns.overrides or 'none'} "
                 f"({time.perf_counter() - t0:.0f} s in all, {ns.jobs} parallel runs)")
    if ns.json:
        write_records(records, ns.json)
    lines = [title, "",
             "| method | grid | samples to 100% (M) | steps gap at 100% | final samples (M) "
             f"| final steps gap | final steps gap ({ns.gap_episodes} episodes) "
             "| paper samples (M) | paper gap "
             "| wall-clock to 100% (s) | wall-clock per run (s) | env steps/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = sorted({row(r) for r in records}, key=lambda k: (ns.methods.index(k[0]), k[1] or "", k[2]))
    for g in ns.grids:
        for key in rows:
            rs = [r for r in records if r["grid"] == g and row(r) == key]
            if not rs:
                continue
            paper = PAPER.get(key[0], {}).get(g)
            ps = (f"{paper['samples_m'][0]:.2f} ± {paper['samples_m'][1]:.2f} | "
                  f"{paper['gap'][0]:.2f} ± {paper['gap'][1]:.2f}") if paper else "- | -"
            lines.append(f"| {label(key)} | {g}x{g} | {fmt([r['samples_to_100'] for r in rs], 1e-6)} | "
                         f"{fmt([r['steps_gap_at_100'] for r in rs])} | "
                         f"{fmt([r['samples'] for r in rs], 1e-6)} | "
                         f"{fmt([r['steps_gap'] for r in rs])} | "
                         f"{fmt([r['sampled_steps_gap'] for r in rs])} | {ps} | "
                         f"{fmt([r['wall_to_100_s'] for r in rs], digits=0)} | "
                         f"{fmt([r['wall_s'] for r in rs], digits=0)} | "
                         f"{fmt([r['env_steps_per_s'] for r in rs], digits=0, missing='not trained now')} |")
    print("\n" + "\n".join(lines))
    if ns.markdown:
        with open(ns.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    if ns.plot:
        plot(records, ns.plot)
    if failed:
        sys.exit("failed runs (rerun the same command to resume them):\n" + "\n".join(failed))


def success_curve(run_dir: str):
    """(samples, success rate) of a run's evaluations (not of rows with an exact
    evaluation only, from ``train.exact_eval_every``)."""
    rows = [r for r in read_csv(os.path.join(run_dir, "eval.csv")) if "success_rate" in r]
    return [int(r["samples"]) for r in rows], [r["success_rate"] for r in rows]


def plot(records, path: str) -> None:
    """Success rate against samples, one curve per row (method, config, overrides) and
    grid: the mean over seeds with the min-max spread shaded, each method's own colour for
    its default row and further colours for the others. A run that ended before the
    others (at its first 100%, or at a smaller budget) counts with its last evaluation
    after; runs without any evaluation are left out, with a warning."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    grids = sorted({r["grid"] for r in records})
    spare = iter(f"C{i}" for i in range(5, 10))
    colors = {key: COLORS[key[0]] if key[1:] == (None, ()) else next(spare, "k")
              for key in dict.fromkeys(row(r) for r in records)}
    fig, axes = plt.subplots(1, len(grids), figsize=(6 * len(grids), 4), squeeze=False)
    for ax, g in zip(axes[0], grids):
        for key, color in colors.items():
            rs = [r for r in records if r["grid"] == g and row(r) == key]
            if not rs:
                continue
            curves = [success_curve(r["run_dir"]) for r in rs]
            for r, c in zip(rs, curves):
                if not c[0]:
                    print(f"warning: {r['run_dir']} has no evaluation yet; not plotted")
            curves = [c for c in curves if c[0]]
            if not curves:
                continue
            xs = np.array(sorted({x for c in curves for x in c[0]}))
            ys = np.stack([np.interp(xs, c[0], c[1], right=c[1][-1]) for c in curves])
            ax.plot(xs / 1e6, ys.mean(0), color=color, label=f"{label(key)} ({len(curves)} seeds)")
            ax.fill_between(xs / 1e6, ys.min(0), ys.max(0), color=color, alpha=0.2)
        ax.set_title(f"Spiders-and-Fly {g}x{g}")
        ax.set_xlabel("samples (M)")
        ax.set_ylabel("success rate within 10 steps")
        ax.set_ylim(-0.02, 1.02)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""SMAX battles: learning curves, the paper's SMAC ablations and zero-shot transfer.

Trains every (variant, scenario, seed) with `acegnn train` (one thread per run, `--jobs`
runs at once; a run directory holding a checkpoint is resumed, so a larger
`--total-samples` trains finished runs further), then reports SMAC's protocol: the test
win rate over 32 greedy battles against environment steps, as the median and the 25-75%
percentiles over seeds, with environment steps per second, wall-clock and the wall-clock
projected to the paper's 2M steps.

Variants (all on the paper's SMAC hyper-parameters, configs/smax_5m_vs_6m*.yaml):
  ace           ACE-DQN
  ace_wo_ia     ACE-w/o-IA: passive action embeddings off (model.passive=false)
  ace_sorted    Sorted Order: agents by unit type, then position (algo.order=sorted)
  ace_shuffled  Shuffle Order: a random order per sample (algo.order=random)
  qmix          QMIX-SHARED with the same protocol

    python scripts/smax_study.py --variants ace qmix --scenarios 5m_vs_6m 3s_vs_5z --seeds 0 1 2 \\
        --total-samples 100000 --markdown curves.md --plot curves.png
    python scripts/smax_study.py --variants ace ace_wo_ia --scenarios 5m_vs_6m     # w/o-IA
    python scripts/smax_study.py --variants ace_sorted ace_shuffled                # the order
    python scripts/smax_study.py --transfer runs/smax/ace_5m_vs_6m_seed0           # zero-shot table
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Dict, List

from acegnn.utils.io import write_text
from acegnn.utils.runs import acegnn, read_csv, train_or_resume

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACE = os.path.join(ROOT, "configs", "smax_5m_vs_6m.yaml")
VARIANTS = {
    "ace": (ACE, [], "ACE"),
    "ace_wo_ia": (ACE, ["model.passive=false"], "ACE-w/o-IA"),
    "ace_sorted": (ACE, ["algo.order=sorted"], "ACE, sorted order"),
    "ace_shuffled": (ACE, ["algo.order=random"], "ACE, shuffled order"),
    "qmix": (os.path.join(ROOT, "configs", "smax_5m_vs_6m_qmix.yaml"), [], "QMIX-SHARED"),
}
#: The paper's transfer targets of a 5m_vs_6m policy.
TRANSFER_MAPS = ("4m_vs_5m", "5m_vs_5m", "5m_vs_6m", "6m_vs_7m", "8m_vs_9m", "10m_vs_11m")
PAPER_STEPS = 2_000_000


def run_one(variant: str, scenario: str, seed: int, ns: argparse.Namespace) -> dict:
    config, switches, _ = VARIANTS[variant]
    run_dir = os.path.join(ns.run_dir, f"{variant}_{scenario}_seed{seed}")
    summary = train_or_resume(config, run_dir, ns.total_samples, ns.overrides,
                              start=[f"seed={seed}", f"env.scenario={scenario}", *switches])
    rec = {"variant": variant, "scenario": scenario, "seed": seed, "run_dir": run_dir,
           "samples": summary["samples"], "wall_s": summary["wall_s"],
           "env_steps_per_s": summary["samples"] / max(summary["wall_s"], 1e-9),
           "curve": [(r["samples"], r["win_rate"]) for r in read_csv(os.path.join(run_dir, "eval.csv"))]}
    print(json.dumps({k: v for k, v in rec.items() if k != "curve"}), flush=True)
    return rec


def quantiles(values: List[float]) -> tuple:
    """Median and the 25% and 75% percentiles (linear interpolation)."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[1], q[0], q[2]


def curves(records: List[dict]) -> Dict[tuple, List[tuple]]:
    """(variant, scenario) -> [(median samples, median, p25, p75)] per evaluation index,
    over the seeds that reached it."""
    groups: Dict[tuple, List[dict]] = {}
    for r in records:
        groups.setdefault((r["variant"], r["scenario"]), []).append(r)
    out = {}
    for key, runs in groups.items():
        n = min(len(r["curve"]) for r in runs)
        out[key] = [(statistics.median(r["curve"][i][0] for r in runs),
                     *quantiles([r["curve"][i][1] for r in runs])) for i in range(n)]
    return out


def table(records: List[dict]) -> str:
    lines = ["| variant | scenario | seeds | env steps | final test win rate, median (25-75%) | "
             "env steps per second of training | wall-clock | projected to 2M steps |", "|---|---|---|---|---|---|---|---|"]
    for (variant, scenario), pts in sorted(curves(records).items()):
        runs = [r for r in records if r["variant"] == variant and r["scenario"] == scenario]
        rate = statistics.median(r["env_steps_per_s"] for r in runs)
        wall = statistics.median(r["wall_s"] for r in runs)
        final = pts[-1] if pts else (0, float("nan"), float("nan"), float("nan"))
        lines.append(f"| {VARIANTS[variant][2]} | {scenario} | {len(runs)} | {final[0]:,.0f} | "
                     f"{final[1]:.2f} ({final[2]:.2f}-{final[3]:.2f}) | {rate:,.0f} | "
                     f"{wall / 3600:.2f} h | {PAPER_STEPS / rate / 3600:.1f} h |")
    return "\n".join(lines) + "\n"


def plot(records: List[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = curves(records)
    scenarios = sorted({s for _, s in data})
    fig, axes = plt.subplots(1, len(scenarios), figsize=(5 * len(scenarios), 3.6), squeeze=False)
    for ax, scenario in zip(axes[0], scenarios):
        for k, variant in enumerate(VARIANTS):
            pts = data.get((variant, scenario))
            if not pts:
                continue
            x = [p[0] for p in pts]
            ax.plot(x, [p[1] for p in pts], color=f"C{k}", label=VARIANTS[variant][2])
            ax.fill_between(x, [p[2] for p in pts], [p[3] for p in pts], color=f"C{k}", alpha=0.2)
        ax.set_title(f"SMAX {scenario}")
        ax.set_xlabel("environment steps")
        ax.set_ylabel("test win rate (median, 25-75%)")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def transfer(run: str, maps, episodes: int, seed: int) -> str:
    """Zero-shot: the run's checkpoint, unchanged, on every map."""
    lines = ["| map | test win rate | mean return | battles |", "|---|---|---|---|"]
    for m in maps:
        out = json.loads(acegnn(["eval", run, f"env.scenario={m}", "--episodes", str(episodes),
                                 "--seed", str(seed)]).strip().splitlines()[-1])
        lines.append(f"| {m} | {out['win_rate']:.2f} | {out['mean_return']:.2f} | {episodes} |")
        print(lines[-1], flush=True)
    return f"checkpoint: {run} ({out['samples']:,} training samples)\n\n" + "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", nargs="+", default=["ace", "qmix"], choices=list(VARIANTS))
    p.add_argument("--scenarios", nargs="+", default=["5m_vs_6m"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--total-samples", type=int, default=100_000)
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel (one thread each)")
    p.add_argument("--run-dir", default=os.path.join(ROOT, "runs", "smax"))
    p.add_argument("--json", help="write the records (curves included) here")
    p.add_argument("--records", nargs="+", metavar="JSON", help="train nothing: report these records")
    p.add_argument("--markdown", help="write the table here")
    p.add_argument("--plot", help="plot the learning curves to this image file")
    p.add_argument("--transfer", metavar="RUN", help="evaluate RUN's checkpoint on --maps instead")
    p.add_argument("--maps", nargs="+", default=list(TRANSFER_MAPS))
    p.add_argument("--episodes", type=int, default=32)
    p.add_argument("overrides", nargs="*", help="config overrides for every run, after --")
    ns = p.parse_args(argv)
    if ns.transfer:
        text = transfer(ns.transfer, ns.maps, ns.episodes, seed=2024)
        if ns.markdown:
            write_text(ns.markdown, text)
        print(text)
        return
    t0 = time.perf_counter()
    failed: List[str] = []
    if ns.records:
        records = [r for path in ns.records for r in json.load(open(path))]
    else:
        jobs = [(v, s, seed) for v in ns.variants for s in ns.scenarios for seed in ns.seeds]
        records, failed = [], []
        with ThreadPoolExecutor(max_workers=ns.jobs) as pool:
            futures = {pool.submit(run_one, *job, ns): job for job in jobs}
            for f in as_completed(futures):
                try:
                    records.append(f.result())
                except RuntimeError as e:  # the others go on; their records are kept
                    failed.append(f"{futures[f]}: {e}")
        if ns.json:
            write_text(ns.json, json.dumps(sorted(records, key=lambda r: (r["variant"], r["scenario"],
                                                                          r["seed"])), indent=1))
    text = table(records)
    if ns.markdown:
        write_text(ns.markdown, text)
    if ns.plot:
        plot(records, ns.plot)
    print(text)
    print(f"study wall-clock {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if not ns.records and failed:
        sys.exit("failed runs (rerun the same command to resume them):\n" + "\n".join(failed))


if __name__ == "__main__":
    main()

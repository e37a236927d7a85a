#!/usr/bin/env python
"""Learning curves of SMAX battles and Google Research Football, the paper's SMAC
ablations and zero-shot transfer.

Trains every (variant, scenario, seed) of one environment with `acegnn train` (one
thread per run, `--jobs` runs at once; a run directory holding a checkpoint is resumed,
so a larger `--total-samples` trains finished runs further), then reports the paper's
protocol: the test win rate over 32 greedy episodes against environment steps, as the
median and the 25-75% percentiles over seeds (SMAX; football: the mean and standard
deviation), with environment steps per second,
wall-clock and the wall-clock projected to the paper's budget (the x-axis of its curve:
10M environment steps on SMAC, 2M on 2c_vs_64zg; 4M on academy_3_vs_1_with_keeper and 10M
on academy_counterattack_hard).

Variants of `--env smax` (the paper's SMAC hyper-parameters, configs/smax_5m_vs_6m*.yaml):
  ace           ACE-DQN
  ace_official  ACE with the official code's SMAC recipe (configs/smax_5m_vs_6m_official.yaml)
  ace_nstep3    ACE with the official code's 3-step returns alone (algo.nstep=3; Eq. 1's
                targets inside a step undiscounted: algo.intermediate_discount=false)
  ace_theta05   ACE with a faster target network (algo.target_theta=0.05; paper 0.008)
  ace_wo_ia     ACE-w/o-IA: passive action embeddings off (model.passive=false)
  ace_sorted    Sorted Order: agents by unit type, then position (algo.order=sorted)
  ace_shuffled  Shuffle Order: a random order per sample (algo.order=random)
  qmix          QMIX-SHARED with the same protocol
  ace_ppo       ACE-PPO with the paper's ACE-PPO table (configs/smax_5m_vs_6m_ppo.yaml)
  ace_ctde      ACE-CTDE: ACE-DQN plus the distilled individual values; eval.csv also
                holds the decentralised policy's dec_* figures
Variants of `--env grf` (the paper's GRF hyper-parameters, configs/grf_3_vs_1_with_keeper*.yaml):
  ace, qmix     as above
  ace_official  ACE with the official code's recipe (configs/grf_3_vs_1_with_keeper_official.yaml)
  ace_official_cds    the same with CDS's reward (env.reward=cds: -1 for every end without a goal)
  ace_official_probe  the same as the football issue's probe ran it: CDS's reward, the time
                      limit truncated, no sticky-action features
  ace_official_probe_wide  and the probe's passive encoder, 2432 wide inside
                      (model.passive_width=2432: hidden 128 x 19 kinds)
  ace_official_wide   the official recipe with that 2432-wide passive encoder alone

    python scripts/study.py --variants ace qmix --scenarios 5m_vs_6m 3s_vs_5z --seeds 0 1 2 \\
        --total-samples 100000 --markdown curves.md --plot curves.png
    python scripts/study.py --variants ace ace_wo_ia --scenarios 5m_vs_6m     # w/o-IA
    python scripts/study.py --variants ace_sorted ace_shuffled                # the order
    python scripts/study.py --transfer runs/smax/ace_5m_vs_6m_seed0           # zero-shot table
    python scripts/study.py --env grf --variants ace qmix --seeds 0 --total-samples 200000
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


def _config(name: str) -> str:
    return os.path.join(ROOT, "configs", name)


#: The football issue's probe: the official recipe with CDS's reward, the time limit
#: truncated and no sticky-action features.
PROBE = ["env.reward=cds", "env.time_limit_terminal=false", "env.sticky_features=false"]
#: env -> variant -> (config, overrides, label)
VARIANTS = {
    "smax": {
        "ace": (_config("smax_5m_vs_6m.yaml"), [], "ACE"),
        "ace_official": (_config("smax_5m_vs_6m_official.yaml"), [], "ACE, official recipe"),
        "ace_nstep3": (_config("smax_5m_vs_6m.yaml"),
                       ["algo.nstep=3", "algo.intermediate_discount=false"],
                       "ACE, 3-step returns (the official n)"),
        "ace_theta05": (_config("smax_5m_vs_6m.yaml"), ["algo.target_theta=0.05"],
                        "ACE, target theta 0.05"),
        "ace_wo_ia": (_config("smax_5m_vs_6m.yaml"), ["model.passive=false"], "ACE-w/o-IA"),
        "ace_sorted": (_config("smax_5m_vs_6m.yaml"), ["algo.order=sorted"], "ACE, sorted order"),
        "ace_shuffled": (_config("smax_5m_vs_6m.yaml"), ["algo.order=random"], "ACE, shuffled order"),
        "qmix": (_config("smax_5m_vs_6m_qmix.yaml"), [], "QMIX-SHARED"),
        "ace_ppo": (_config("smax_5m_vs_6m_ppo.yaml"), [], "ACE-PPO"),
        "ace_ctde": (_config("smax_5m_vs_6m_ctde.yaml"), [], "ACE-CTDE (centralised)"),
    },
    "grf": {
        "ace": (_config("grf_3_vs_1_with_keeper.yaml"), [], "ACE"),
        "ace_official": (_config("grf_3_vs_1_with_keeper_official.yaml"), [],
                         "ACE, official recipe"),
        "ace_official_cds": (_config("grf_3_vs_1_with_keeper_official.yaml"), ["env.reward=cds"],
                             "ACE, official recipe, CDS's reward"),
        "ace_official_probe": (_config("grf_3_vs_1_with_keeper_official.yaml"), PROBE,
                               "ACE, official recipe as the issue's probe"),
        "ace_official_probe_wide": (_config("grf_3_vs_1_with_keeper_official.yaml"),
                                    [*PROBE, "model.passive_width=2432"],
                                    "ACE, the issue's probe with its 2432-wide passive encoder"),
        "ace_official_wide": (_config("grf_3_vs_1_with_keeper_official.yaml"),
                              ["model.passive_width=2432"],
                              "ACE, official recipe, 2432-wide passive encoder"),
        "qmix": (_config("grf_3_vs_1_with_keeper_qmix.yaml"), [], "QMIX-SHARED"),
    },
}
TITLES = {"smax": "SMAX", "grf": "GRF"}
DEFAULT_SCENARIO = {"smax": "5m_vs_6m", "grf": "academy_3_vs_1_with_keeper"}
#: The paper's transfer targets of a 5m_vs_6m policy.
TRANSFER_MAPS = ("4m_vs_5m", "5m_vs_5m", "5m_vs_6m", "6m_vs_7m", "8m_vs_9m", "10m_vs_11m")
#: The paper's budget: the x-axis of its curves (official repository, img/SMAC.png and
#: img/GRF.png), by (env, scenario); SMAX maps take SMAC's.
PAPER_STEPS = {"smax": 10_000_000, ("smax", "2c_vs_64zg"): 2_000_000,
               "grf": 4_000_000, ("grf", "academy_counterattack_hard"): 10_000_000}


#: The paper's ACE curves where this machine can reach them, as (environment steps, mean
#: test win rate over 5 seeds), read by eye off the official repository's img/GRF.png
#: (one point per evaluation of the figure, about every 50k steps; +-1% and +-3k steps).
PAPER_CURVES = {
    ("grf", "academy_3_vs_1_with_keeper"): (
        (19_000, 0.05), (80_000, 0.16), (135_000, 0.50), (185_000, 0.45), (235_000, 0.47),
        (276_000, 0.47), (326_000, 0.53), (373_000, 0.44), (425_000, 0.42), (475_000, 0.57)),
}


def paper_at(env: str, scenario: str, steps: float) -> float:
    """The paper's curve at ``steps``, linear between its points (NaN outside them)."""
    pts = PAPER_CURVES.get((env, scenario), ())
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= steps <= x1:
            return y0 + (y1 - y0) * (steps - x0) / (x1 - x0)
    return float("nan")


def paper_steps(env: str, scenario: str) -> int:
    """The paper's environment steps for a scenario (:data:`PAPER_STEPS`)."""
    return PAPER_STEPS.get((env, scenario), PAPER_STEPS[env])


def run_one(variant: str, scenario: str, seed: int, ns: argparse.Namespace) -> dict:
    config, switches, _ = VARIANTS[ns.env][variant]
    run_dir = os.path.join(ns.run_dir, f"{variant}_{scenario}_seed{seed}")
    summary = train_or_resume(config, run_dir, ns.total_samples, ns.overrides,
                              start=[f"seed={seed}", f"env.scenario={scenario}", *switches])
    rec = {"env": ns.env, "variant": variant, "scenario": scenario, "seed": seed, "run_dir": run_dir,
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


def _key(record: dict) -> tuple:
    """(env, variant, scenario) of a record (records older than GRF are SMAX's)."""
    return record.get("env", "smax"), record["variant"], record["scenario"]


def records_of_eval_csv(paths: List[str], env: str) -> List[dict]:
    """Records of runs from their ``eval.csv`` files, each named
    ``<variant>_<scenario>_seed<seed>.csv`` (as committed under docs/); the wall-clock is
    not known there (NaN)."""
    out = []
    for path in paths:
        name = os.path.basename(path)[:-len(".csv")]
        head, _, seed = name.rpartition("_seed")
        variant = next((v for v in sorted(VARIANTS[env], key=len, reverse=True)
                        if head.startswith(v + "_")), None)
        if variant is None or not seed.isdigit():
            raise ValueError(f"{path}: name it <variant>_<scenario>_seed<seed>.csv with a "
                             f"variant of --env {env} ({', '.join(VARIANTS[env])})")
        curve = [(r["samples"], r["win_rate"]) for r in read_csv(path) if "win_rate" in r]
        out.append({"env": env, "variant": variant, "scenario": head[len(variant) + 1:],
                    "seed": int(seed), "run_dir": path, "samples": curve[-1][0] if curve else 0,
                    "wall_s": float("nan"), "env_steps_per_s": float("nan"), "curve": curve})
    return out


def mean_at(records: List[dict], at: List[int], window: int) -> str:
    """The test win rate over seeds at each of ``at``, by the environment's statistic
    (:data:`SPREAD`: SMAC's median and 25-75% percentiles, GRF's mean and standard
    deviation): per seed the mean of its evaluations within ``window`` steps either side;
    beside it the paper's curve there."""
    groups: Dict[tuple, List[dict]] = {}
    for r in records:
        groups.setdefault(_key(r), []).append(r)
    head = " | ".join(f"{x / 1000:g}k" for x in at)
    lines = [f"| variant | scenario | seeds | {head} |", "|---|---|---|" + "---|" * len(at)]
    for (env, variant, scenario), runs in sorted(groups.items()):
        cells = []
        for x in at:
            per_seed = [statistics.mean(v for s, v in r["curve"] if abs(s - x) <= window)
                        for r in runs if any(abs(s - x) <= window for s, _ in r["curve"])]
            if not per_seed:
                cells.append("")
                continue
            if env == "grf":
                sd = statistics.stdev(per_seed) if len(per_seed) > 1 else 0.0
                cells.append(f"{statistics.mean(per_seed):.2f} +- {sd:.2f} ({len(per_seed)})")
            else:
                mid, low, high = quantiles(per_seed)
                cells.append(f"{mid:.2f} ({low:.2f}-{high:.2f}; {len(per_seed)})")
        lines.append(f"| {VARIANTS[env][variant][2]} | {scenario} | {len(runs)} | "
                     + " | ".join(cells) + " |")
        paper = [paper_at(env, scenario, x) for x in at]
        if (env, scenario) in PAPER_CURVES and not any(ln.startswith(f"| paper's ACE | {scenario} |")
                                                        for ln in lines):
            lines.append(f"| paper's ACE | {scenario} | 5 | "
                         + " | ".join("" if p != p else f"{p:.2f}" for p in paper) + " |")
    return "\n".join(lines) + "\n"


def mean_sd(values: List[float]) -> tuple:
    """Mean, and the mean minus and plus the standard deviation (0 for one value)."""
    m = statistics.mean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return m, m - sd, m + sd


#: How the paper reports each environment over seeds (Experiment section): SMAC by the
#: median and the 25-75% percentiles, GRF by the mean and the variance (drawn here as the
#: mean +- one standard deviation).
SPREAD = {"smax": (quantiles, "median (25-75%)"), "grf": (mean_sd, "mean (+-sd)")}


def curves(records: List[dict]) -> Dict[tuple, List[tuple]]:
    """(env, variant, scenario) -> [(median samples, centre, low, high)] per evaluation
    index, over the seeds that reached it (:data:`SPREAD`: the environment's statistic)."""
    groups: Dict[tuple, List[dict]] = {}
    for r in records:
        groups.setdefault(_key(r), []).append(r)
    out = {}
    for key, runs in groups.items():
        n = min(len(r["curve"]) for r in runs)
        spread = SPREAD[key[0]][0]
        out[key] = [(statistics.median(r["curve"][i][0] for r in runs),
                     *spread([r["curve"][i][1] for r in runs])) for i in range(n)]
    return out


def table(records: List[dict]) -> str:
    lines = ["| variant | scenario | seeds | env steps | final test win rate, median (25-75%) "
             "or mean (+-sd) | "
             "env steps per second of training | wall-clock | projected to the paper's budget |",
             "|---|---|---|---|---|---|---|---|"]
    for (env, variant, scenario), pts in sorted(curves(records).items()):
        runs = [r for r in records if _key(r) == (env, variant, scenario)]
        rate = statistics.median(r["env_steps_per_s"] for r in runs)
        wall = statistics.median(r["wall_s"] for r in runs)
        final = pts[-1] if pts else (0, float("nan"), float("nan"), float("nan"))
        clock = "| - | - | - |" if rate != rate else (  # records of eval.csv files: no clock
            f"| {rate:,.0f} | {wall / 3600:.2f} h | {paper_steps(env, scenario) / rate / 3600:.1f} h "
            f"({paper_steps(env, scenario) / 1e6:g}M) |")
        spread = (f"{final[1]:.2f} ({final[2]:.2f}-{final[3]:.2f})" if env != "grf" else
                  f"{final[1]:.2f} (+-{final[3] - final[1]:.2f})")
        lines.append(f"| {VARIANTS[env][variant][2]} | {scenario} | {len(runs)} | {final[0]:,.0f} | "
                     f"{spread} {clock}")
    return "\n".join(lines) + "\n"


def plot(records: List[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = curves(records)
    panels = sorted({(env, s) for env, _, s in data})
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    for ax, (env, scenario) in zip(axes[0], panels):
        for k, (variant, (_, _, label)) in enumerate(VARIANTS[env].items()):
            pts = data.get((env, variant, scenario))
            if not pts:
                continue
            x = [p[0] for p in pts]
            ax.plot(x, [p[1] for p in pts], color=f"C{k}", label=label)
            ax.fill_between(x, [p[2] for p in pts], [p[3] for p in pts], color=f"C{k}", alpha=0.2)
        paper = PAPER_CURVES.get((env, scenario))
        if paper:
            ax.plot(*zip(*paper), "ko--", ms=4, lw=1, label="paper's ACE (mean of 5 seeds)")
        ax.set_title(f"{TITLES[env]} {scenario}")
        ax.set_xlabel("environment steps")
        ax.set_ylabel(f"test win rate, {SPREAD[env][1]}")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def transfer(run: str, maps, episodes: int, seed: int) -> str:
    """Zero-shot: the run's checkpoint, unchanged, on every map."""
    lines = ["| map | test win rate | enemies killed | mean return | battles |",
             "|---|---|---|---|---|"]
    for m in maps:
        out = json.loads(acegnn(["eval", run, f"env.scenario={m}", "--episodes", str(episodes),
                                 "--seed", str(seed)]).strip().splitlines()[-1])
        lines.append(f"| {m} | {out['win_rate']:.2f} | {1 - out['enemies_alive']:.2f} | "
                     f"{out['mean_return']:.2f} | {episodes} |")
        print(lines[-1], flush=True)
    return f"checkpoint: {run} ({out['samples']:,} training samples)\n\n" + "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", choices=list(VARIANTS), default="smax")
    p.add_argument("--variants", nargs="+", default=["ace", "qmix"],
                   help="names of the environment's variants (above)")
    p.add_argument("--scenarios", nargs="+", help="(default: 5m_vs_6m on smax, "
                                                  "academy_3_vs_1_with_keeper on grf)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--total-samples", type=int, default=100_000)
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel (one thread each)")
    p.add_argument("--run-dir", help="parent of the run directories (default: runs/ENV)")
    p.add_argument("--json", help="write the records (curves included) here")
    p.add_argument("--records", nargs="+", metavar="JSON", help="train nothing: report these records")
    p.add_argument("--eval-csv", nargs="+", metavar="CSV",
                   help="train nothing: report these eval.csv files, named "
                        "<variant>_<scenario>_seed<seed>.csv")
    p.add_argument("--at", nargs="+", type=int, metavar="STEPS",
                   help="also tabulate the mean and standard deviation over seeds at these "
                        "environment steps, beside the paper's curve")
    p.add_argument("--window", type=int, default=10_000,
                   help="with --at: a seed's figure is the mean of its evaluations within "
                        "this many steps either side (default: 10000)")
    p.add_argument("--markdown", help="write the table here")
    p.add_argument("--plot", help="plot the learning curves to this image file")
    p.add_argument("--transfer", metavar="RUN", help="evaluate RUN's checkpoint on --maps instead")
    p.add_argument("--maps", nargs="+", default=list(TRANSFER_MAPS))
    p.add_argument("--episodes", type=int, default=32)
    p.add_argument("overrides", nargs="*", help="config overrides for every run, after --")
    ns = p.parse_args(argv)
    unknown = sorted(set(ns.variants) - set(VARIANTS[ns.env]))
    if unknown:
        p.error(f"--env {ns.env} has no variant {', '.join(unknown)} "
                f"(its variants: {', '.join(VARIANTS[ns.env])})")
    if ns.transfer and ns.env != "smax":
        p.error("--transfer evaluates a SMAX run on other maps: use it with --env smax")
    ns.scenarios = ns.scenarios or [DEFAULT_SCENARIO[ns.env]]
    ns.run_dir = ns.run_dir or os.path.join(ROOT, "runs", ns.env)
    if ns.transfer:
        text = transfer(ns.transfer, ns.maps, ns.episodes, seed=2024)
        if ns.markdown:
            write_text(ns.markdown, text)
        print(text)
        return
    t0 = time.perf_counter()
    failed: List[str] = []
    if ns.records or ns.eval_csv:
        records = [r for path in ns.records or () for r in json.load(open(path))]
        records += records_of_eval_csv(ns.eval_csv or [], ns.env)
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
            write_text(ns.json, json.dumps(sorted(records, key=lambda r: (*_key(r),
                                                                          r["seed"])), indent=1))
    text = table(records)
    if ns.at:
        text += "\n" + mean_at(records, ns.at, ns.window)
    if ns.markdown:
        write_text(ns.markdown, text)
    if ns.plot:
        plot(records, ns.plot)
    print(text)
    print(f"study wall-clock {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if not (ns.records or ns.eval_csv) and failed:
        sys.exit("failed runs (rerun the same command to resume them):\n" + "\n".join(failed))


if __name__ == "__main__":
    main()

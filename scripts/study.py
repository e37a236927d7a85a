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
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import List

from acegnn.study import report
from acegnn.study.report import record_key
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
DEFAULT_SCENARIO = {"smax": "5m_vs_6m", "grf": "academy_3_vs_1_with_keeper"}
#: The paper's transfer targets of a 5m_vs_6m policy.
TRANSFER_MAPS = ("4m_vs_5m", "5m_vs_5m", "5m_vs_6m", "6m_vs_7m", "8m_vs_9m", "10m_vs_11m")
#: env -> variant -> label, as the report names the variants
LABELS = {env: {v: label for v, (_, _, label) in variants.items()}
          for env, variants in VARIANTS.items()}


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


def records_of_eval_csv(paths: List[str], env: str) -> List[dict]:
    """:func:`acegnn.study.report.records_of_eval_csv` with the variants of ``env``."""
    return report.records_of_eval_csv(paths, env, list(VARIANTS[env]))


def mean_at(records: List[dict], at: List[int], window: int) -> str:
    """:func:`acegnn.study.report.mean_at` with the variants' labels."""
    return report.mean_at(records, LABELS, at, window)


def table(records: List[dict]) -> str:
    """:func:`acegnn.study.report.table` with the variants' labels."""
    return report.table(records, LABELS)


def plot(records: List[dict], path: str) -> None:
    """:func:`acegnn.study.report.plot` with the variants' labels."""
    report.plot(records, LABELS, path)


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
            ordered = sorted(records, key=lambda r: (*record_key(r), r["seed"]))
            write_text(ns.json, json.dumps(ordered, indent=1))
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

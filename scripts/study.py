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

Runs on Ray Tune as `acegnn study` does (a local Ray with `--jobs` CPUs, one trial per
CPU); each run is a trial of a study built from the arguments. The variants are the named
ones of configs/studies/variants.yaml, each with its config, overrides and label.

    python scripts/study.py --variants ace qmix --scenarios 5m_vs_6m 3s_vs_5z --seeds 0 1 2 \\
        --total-samples 100000 --markdown curves.md --plot curves.png
    python scripts/study.py --variants ace ace_wo_ia --scenarios 5m_vs_6m     # w/o-IA
    python scripts/study.py --variants ace_sorted ace_shuffled                # the order
    python scripts/study.py --transfer runs/smax/ace_5m_vs_6m_seed0           # zero-shot table
    python scripts/study.py --env grf --variants ace qmix --seeds 0 --total-samples 200000
    python scripts/study.py --env grf --eval-csv docs/grf_runs/*academy_3_vs_1*.csv \\
        --at 150000 --against ace_official_probe_wide_decay8k   # each variant beside one
    python scripts/study.py --env grf --eval-csv docs/grf_runs/*academy_3_vs_1*seed0.csv \\
        --per-seed 105000 152000 --columns pass_share mean_steps  # each run of seed 0

A seed trained twice (say a rerun in docs/grf_runs and its first run in a folder below)
is listed run by run with --per-seed alone, each row naming its folder; the tables, the
curves and --against count each seed once and refuse two runs of one seed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import List

from acegnn.cli import train_study
from acegnn.study import report
from acegnn.study.report import record_key
from acegnn.study.spec import Study, catalogue, check_run_dirs
from acegnn.utils.io import write_text
from acegnn.utils.runs import acegnn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: env -> variant name -> Variant (config, overrides, label)
VARIANTS = {env: catalogue(env) for env in ("smax", "grf")}
DEFAULT_SCENARIO = {"smax": "5m_vs_6m", "grf": "academy_3_vs_1_with_keeper"}
#: The paper's transfer targets of a 5m_vs_6m policy.
TRANSFER_MAPS = ("4m_vs_5m", "5m_vs_5m", "5m_vs_6m", "6m_vs_7m", "8m_vs_9m", "10m_vs_11m")
#: env -> variant -> label, as the report names the variants
LABELS = {env: {v.name: v.label for v in variants.values()} for env, variants in VARIANTS.items()}


def study_of(ns: argparse.Namespace) -> Study:
    """The study of the arguments: their variants x scenarios x seeds, one CPU a trial."""
    study = Study(path="scripts/study.py", env=ns.env, dir=os.path.abspath(ns.run_dir),
                  total_samples=ns.total_samples, seeds=tuple(ns.seeds),
                  variants={v: VARIANTS[ns.env][v] for v in ns.variants},
                  scenarios=tuple(ns.scenarios), overrides=tuple(ns.overrides),
                  cwd=os.getcwd())
    check_run_dirs(study)
    return study


def records_of_eval_csv(paths: List[str], env: str) -> List[dict]:
    """:func:`acegnn.study.report.records_of_eval_csv` with the variants of ``env``."""
    return report.records_of_eval_csv(paths, env, list(VARIANTS[env]))


def mean_at(records: List[dict], at: List[int], window: int) -> str:
    """:func:`acegnn.study.report.mean_at` with the variants' labels."""
    return report.mean_at(records, LABELS, at, window)


def against(records: List[dict], base: str, at: List[int], window: int, above: float) -> str:
    """:func:`acegnn.study.report.against` with the variants' labels."""
    return report.against(records, LABELS, base, at, window, above)


def per_seed(records: List[dict], span: List[int], above: float, columns: List[str]) -> str:
    """:func:`acegnn.study.report.per_seed` with the variants' labels."""
    return report.per_seed(records, LABELS, tuple(span), above, columns)


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
    p.add_argument("--against", metavar="VARIANT",
                   help="with --at: also compare every variant with this one on the seeds "
                        "both ran (means, their difference and its standard error, and the "
                        "median first evaluation above --above)")
    p.add_argument("--above", type=float, default=0.1,
                   help="with --against or --per-seed: the rate a seed's take-off passes "
                        "(default: 0.1)")
    p.add_argument("--per-seed", nargs=2, type=int, metavar=("FROM", "TO"),
                   help="also a line per run: its first evaluation above --above, its "
                        "evaluations from FROM to TO environment steps and their mean")
    p.add_argument("--columns", nargs="+", default=[], metavar="COLUMN",
                   help="with --per-seed and --eval-csv: also the mean of these eval.csv "
                        "columns over those evaluations (football: pass_share, mean_steps)")
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
    if ns.columns and not ns.per_seed:
        p.error("--columns adds to the table of --per-seed: give --per-seed FROM TO too")
    if ns.per_seed and ns.per_seed[0] > ns.per_seed[1]:
        p.error(f"--per-seed {ns.per_seed[0]} {ns.per_seed[1]}: FROM is after TO")
    if ns.against and not ns.at:
        p.error("--against compares variants at the steps of --at: give --at too")
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
        study = study_of(ns)
        failed = [t.name for t in train_study(study, cpus=ns.jobs, every_s=600.0)]
        records = report.study_records(study)
        if ns.json:
            ordered = sorted(records, key=lambda r: (*record_key(r), r["seed"]))
            write_text(ns.json, json.dumps(ordered, indent=1))
    repeated = report.repeated_runs(records)
    if repeated and (not ns.per_seed or ns.at or ns.against or ns.plot):
        (_, variant, scenario, seed), paths = next(iter(repeated.items()))
        more = f" and {len(repeated) - 1} more seeds too" if len(repeated) > 1 else ""
        p.error(f"seed {seed} of {variant} on {scenario} has {len(paths)} runs "
                f"({', '.join(paths)}){more}: the tables, curves and --against count each "
                f"seed once, so give one run of each (--per-seed alone lists every run)")
    text = table(records) if not repeated else ""
    if ns.at:
        text += "\n" + mean_at(records, ns.at, ns.window)
    if ns.against:
        text += "\n" + against(records, ns.against, ns.at, ns.window, ns.above)
    if ns.per_seed:
        text += ("\n" if text else "") + per_seed(records, ns.per_seed, ns.above, ns.columns)
    if ns.markdown:
        write_text(ns.markdown, text)
    if ns.plot:
        plot(records, ns.plot)
    print(text)
    print(f"study wall-clock {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if not (ns.records or ns.eval_csv) and failed:
        sys.exit(f"runs that did not finish (their study.log says why; the same command "
                 f"resumes them): {', '.join(failed)}")


if __name__ == "__main__":
    main()

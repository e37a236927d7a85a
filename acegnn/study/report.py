"""Tables and learning curves of a grid of runs, by the paper's protocol: the headline
metric of the greedy policy against environment steps, over seeds, as the median and the
25-75% percentiles (SMAC, and every task but football) or the mean and standard
deviation (football).

A *record* is one run: ``env``, ``variant``, ``scenario``, ``seed``, ``run_dir``,
``samples``, ``wall_s``, ``env_steps_per_s`` and ``curve``, its evaluations as
``[(samples, value)]``; a record read from an ``eval.csv`` file also holds ``rows``, the
file's rows (every column of each evaluation). ``labels`` name the variants of each
environment, ``{env: {variant: label}}``, in the order the figure colours them.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from acegnn.study.spec import Study
from acegnn.study.trial import DONE, last_eval, kept
from acegnn.utils.io import write_text
from acegnn.utils.runs import read_csv

Labels = Dict[str, Dict[str, str]]

TITLES = {"smax": "SMAX", "grf": "GRF"}
#: The paper's budget: the x-axis of its curves (official repository, img/SMAC.png and
#: img/GRF.png), by (env, scenario); SMAX maps take SMAC's.
PAPER_STEPS = {"smax": 10_000_000, ("smax", "2c_vs_64zg"): 2_000_000,
               "grf": 4_000_000, ("grf", "academy_counterattack_hard"): 10_000_000}
#: The paper's ACE curves where this machine can reach them, as (environment steps, mean
#: test win rate over 5 seeds, the shaded band's low and high edges), read off the official
#: repository's img/GRF.png: the mean by eye (one point per evaluation of the figure, about
#: every 50k steps; +-1% and +-3k steps), the band from the figure's pixels at those steps
#: (x: 180 pixels a million steps, y: 5.1 pixels a percent; +-2%). The band is what the
#: paper calls "the variance across 5 seeds" (Experiment section), in win-rate units.
PAPER_CURVES = {
    ("grf", "academy_3_vs_1_with_keeper"): (
        (19_000, 0.05, 0.01, 0.10), (80_000, 0.16, 0.04, 0.30), (135_000, 0.50, 0.34, 0.65),
        (185_000, 0.45, 0.35, 0.56), (235_000, 0.47, 0.34, 0.60), (276_000, 0.47, 0.39, 0.56),
        (326_000, 0.53, 0.43, 0.63), (373_000, 0.44, 0.37, 0.53), (425_000, 0.42, 0.35, 0.51),
        (475_000, 0.57, 0.48, 0.65)),
}


def paper_at(env: str, scenario: str, steps: float, column: int = 1) -> float:
    """The paper's curve at ``steps``, linear between its points (NaN outside them):
    ``column`` 1 its mean, 2 and 3 its band's low and high edges."""
    pts = PAPER_CURVES.get((env, scenario), ())
    for p0, p1 in zip(pts, pts[1:]):
        if p0[0] <= steps <= p1[0]:
            return p0[column] + (p1[column] - p0[column]) * (steps - p0[0]) / (p1[0] - p0[0])
    return float("nan")


def paper_steps(env: str, scenario: str) -> Optional[int]:
    """The paper's environment steps for a scenario (:data:`PAPER_STEPS`; None for an
    environment the paper has no curve of)."""
    return PAPER_STEPS.get((env, scenario), PAPER_STEPS.get(env))


def quantiles(values: List[float]) -> tuple:
    """Median and the 25% and 75% percentiles (linear interpolation)."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[1], q[0], q[2]


def mean_sd(values: List[float]) -> tuple:
    """Mean, and the mean minus and plus the standard deviation (0 for one value)."""
    m = statistics.mean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return m, m - sd, m + sd


#: How the paper reports each environment over seeds (Experiment section): SMAC by the
#: median and the 25-75% percentiles, GRF by the mean and the variance (drawn here as the
#: mean +- one standard deviation).
SPREAD = {"smax": (quantiles, "median (25-75%)"), "grf": (mean_sd, "mean (+-sd)")}


def spread_of(env: str) -> Tuple[Callable[[List[float]], tuple], str]:
    """The statistic over seeds of an environment and its name (:data:`SPREAD`; SMAC's
    for every environment but football)."""
    return SPREAD.get(env, SPREAD["smax"])


def record_key(record: dict) -> tuple:
    """(env, variant, scenario) of a record (records older than GRF are SMAX's)."""
    return record.get("env", "smax"), record["variant"], record["scenario"]


def _seed_key(record: dict) -> tuple:
    """(env, variant, scenario, seed) of a record: one run per key in the tables."""
    return (*record_key(record), record["seed"])


def repeated_runs(records: List[dict]) -> Dict[tuple, List[str]]:
    """(env, variant, scenario, seed) -> the ``run_dir`` of each run, for the seeds with
    more than one run (a seed trained again, e.g. on another machine). The tables, curves
    and :func:`against` take one run per seed; :func:`per_seed` lists every run."""
    runs: Dict[tuple, List[str]] = {}
    for r in records:
        runs.setdefault(_seed_key(r), []).append(r["run_dir"])
    return {k: v for k, v in runs.items() if len(v) > 1}


def _groups(records: List[dict]) -> Dict[tuple, List[dict]]:
    """The records by (env, variant, scenario)."""
    groups: Dict[tuple, List[dict]] = {}
    for r in records:
        groups.setdefault(record_key(r), []).append(r)
    return groups


def _cell(env: str, centre: float, low: float, high: float) -> str:
    """A figure over seeds as the environment's statistic writes it."""
    if spread_of(env)[0] is mean_sd:
        return f"{centre:.2f} (+-{high - centre:.2f})"
    return f"{centre:.2f} ({low:.2f}-{high:.2f})"


def records_of_eval_csv(paths: List[str], env: str, variants: Sequence[str]) -> List[dict]:
    """Records of runs from their ``eval.csv`` files, each named
    ``<variant>_<scenario>_seed<seed>.csv`` (as committed under docs/) with a variant of
    ``variants``; the wall-clock is not known there (NaN)."""
    out = []
    for path in paths:
        name = os.path.basename(path)[:-len(".csv")]
        head, _, seed = name.rpartition("_seed")
        variant = next((v for v in sorted(variants, key=len, reverse=True)
                        if head.startswith(v + "_")), None)
        if variant is None or not seed.isdigit():
            raise ValueError(f"{path}: name it <variant>_<scenario>_seed<seed>.csv with a "
                             f"variant of --env {env} ({', '.join(variants)})")
        rows = read_csv(path)
        curve = [(r["samples"], r["win_rate"]) for r in rows if "win_rate" in r]
        out.append({"env": env, "variant": variant, "scenario": head[len(variant) + 1:],
                    "seed": int(seed), "run_dir": path, "samples": curve[-1][0] if curve else 0,
                    "wall_s": float("nan"), "env_steps_per_s": float("nan"), "curve": curve,
                    "rows": rows})
    return out


def mean_at(records: List[dict], labels: Labels, at: List[int], window: int) -> str:
    """The test win rate over seeds at each of ``at``, by the environment's statistic
    (:data:`SPREAD`: SMAC's median and 25-75% percentiles, GRF's mean and standard
    deviation): per seed the mean of its evaluations within ``window`` steps either side;
    beside it the paper's curve there."""
    head = " | ".join(f"{x / 1000:g}k" for x in at)
    lines = [f"| variant | scenario | seeds | {head} |", "|---|---|---|" + "---|" * len(at)]
    for (env, variant, scenario), runs in sorted(_groups(records).items()):
        cells = []
        for x in at:
            per_seed = [statistics.mean(v for s, v in r["curve"] if abs(s - x) <= window)
                        for r in runs if any(abs(s - x) <= window for s, _ in r["curve"])]
            if not per_seed:
                cells.append("")
                continue
            if spread_of(env)[0] is mean_sd:
                sd = statistics.stdev(per_seed) if len(per_seed) > 1 else 0.0
                cells.append(f"{statistics.mean(per_seed):.2f} +- {sd:.2f} ({len(per_seed)})")
            else:
                mid, low, high = quantiles(per_seed)
                cells.append(f"{mid:.2f} ({low:.2f}-{high:.2f}; {len(per_seed)})")
        lines.append(f"| {labels[env][variant]} | {scenario} | {len(runs)} | "
                     + " | ".join(cells) + " |")
        if (env, scenario) in PAPER_CURVES and not any(ln.startswith(f"| paper's ACE | {scenario} |")
                                                        for ln in lines):
            paper = [paper_at(env, scenario, x) for x in at]
            lines.append(f"| paper's ACE | {scenario} | 5 | "
                         + " | ".join("" if p != p else f"{p:.2f}" for p in paper) + " |")
            band = [(paper_at(env, scenario, x, 2), paper_at(env, scenario, x, 3)) for x in at]
            lines.append(f"| paper's ACE, its band | {scenario} | 5 | "
                         + " | ".join("" if lo != lo else f"{lo:.2f}-{hi:.2f}" for lo, hi in band)
                         + " |")
    return "\n".join(lines) + "\n"


def _near(curve: List[tuple], x: float, window: int) -> Optional[float]:
    """A seed's figure at ``x``: the mean of its evaluations within ``window`` steps
    either side (None where it has none)."""
    values = [v for s, v in curve if abs(s - x) <= window]
    return statistics.mean(values) if values else None


def take_off(curve: List[tuple], above: float) -> Optional[float]:
    """The environment steps of a seed's first evaluation above ``above`` (None: never)."""
    return next((s for s, v in curve if v > above), None)


def _median_take_off(steps: List[Optional[float]]) -> str:
    """The median of take-off steps, a seed that never took off counted as the latest;
    "never" where that median is one of those."""
    ordered = sorted(steps, key=lambda s: float("inf") if s is None else s)
    n = len(ordered)
    middle = ordered[(n - 1) // 2:n // 2 + 1]
    if any(s is None for s in middle):
        return "never"
    return f"{statistics.mean(middle) / 1000:,.0f}k"


def against(records: List[dict], labels: Labels, base: str, at: List[int], window: int,
            above: float = 0.1) -> str:
    """Each variant beside ``base`` on the seeds both ran: per step of ``at``, the
    variant's mean over those seeds, the base's, and their difference with its standard
    error; and the median first evaluation above ``above`` of each (a seed that never
    passes it counts as the latest). The standard error is Welch's, the two variances
    over the seeds added, as for independent runs: two variants' runs of one seed start
    alike but part once their networks differ, so no pairing is assumed.

    A seed's figure at a step is the mean of its evaluations within ``window`` steps
    either side; a seed without one there in either variant is left out of that step."""
    by_key = _groups(records)
    lines = ["| variant | scenario | seeds | "
             + " | ".join(f"{x / 1000:g}k: variant, {base}, difference +- se" for x in at)
             + f" | first evaluation above {above:g}, median: variant, {base} |",
             "|---|---|---|" + "---|" * (len(at) + 1)]
    for (env, variant, scenario), runs in sorted(by_key.items()):
        base_runs = {r["seed"]: r for r in by_key.get((env, base, scenario), [])}
        pairs = [(r, base_runs[r["seed"]]) for r in sorted(runs, key=lambda r: r["seed"])
                 if r["seed"] in base_runs]
        if variant == base or not pairs:
            continue
        cells = []
        for x in at:
            figures = [(_near(r["curve"], x, window), _near(b["curve"], x, window))
                       for r, b in pairs]
            figures = [(v, w) for v, w in figures if v is not None and w is not None]
            if not figures:
                cells.append("")
                continue
            mine, theirs = zip(*figures)
            n = len(figures)
            se = (statistics.variance(mine) / n + statistics.variance(theirs) / n) ** 0.5 \
                if n > 1 else float("nan")
            diff = statistics.mean(mine) - statistics.mean(theirs)
            cells.append(f"{statistics.mean(mine):.2f}, {statistics.mean(theirs):.2f}, "
                         f"{diff:+.2f} +- {se:.2f} ({n})")
        seeds = ", ".join(str(r["seed"]) for r, _ in pairs)
        starts = (_median_take_off([take_off(r["curve"], above) for r, _ in pairs]),
                  _median_take_off([take_off(b["curve"], above) for _, b in pairs]))
        lines.append(f"| {labels[env][variant]} | {scenario} | {seeds} | " + " | ".join(cells)
                     + f" | {starts[0]}, {starts[1]} |")
    if len(lines) == 2:
        raise ValueError(f"no variant shares a seed and scenario with {base} (got "
                         f"{', '.join(sorted({k[1] for k in by_key}))})")
    return "\n".join(lines) + "\n"


def per_seed(records: List[dict], labels: Labels, span: Tuple[int, int], above: float = 0.1,
             columns: Sequence[str] = ()) -> str:
    """One line per run, the seeds of all variants side by side (by scenario, seed, then
    variant in ``labels``' order): the first evaluation above ``above``, the evaluations
    from ``span[0]`` to ``span[1]`` environment steps (both included) and their mean, and
    the mean of each of ``columns`` over those evaluations (from the record's ``rows``;
    blank where the run has no such column). A seed with more than one run of a variant
    (:func:`repeated_runs`) names each run's folder beside the seed."""
    lo, hi = span
    if lo > hi:
        raise ValueError(f"the span {lo:,}-{hi:,} ends before it starts")
    order = {env: list(names) for env, names in labels.items()}
    span_k = f"{lo / 1000:g}k-{hi / 1000:g}k"
    lines = [(f"| variant | scenario | seed | first evaluation above {above:g} | mean {span_k} | "
              f"evaluations {span_k} | " + "".join(f"{c}, mean | " for c in columns)).rstrip(),
             "|---|---|---|---|---|---|" + "---|" * len(columns)]
    repeated = repeated_runs(records)
    for r in sorted(records, key=lambda r: (r["env"], r["scenario"], r["seed"],
                                            order[r["env"]].index(r["variant"]))):
        seed = str(r["seed"])
        if _seed_key(r) in repeated:
            seed += f" ({os.path.basename(os.path.dirname(os.path.abspath(r['run_dir'])))})"
        inside = [v for s, v in r["curve"] if lo <= s <= hi]
        start = take_off(r["curve"], above)
        cells = ["never" if start is None else f"{start / 1000:,.0f}k",
                 f"{statistics.mean(inside):.2f}" if inside else "",
                 " ".join(f"{v:.2f}" for v in inside)]
        for c in columns:
            values = [row[c] for row in r.get("rows", ())
                      if lo <= row["samples"] <= hi and c in row]
            cells.append(f"{statistics.mean(values):.2f}" if values else "")
        lines.append(f"| {labels[r['env']][r['variant']]} | {r['scenario']} | {seed} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def curves(records: List[dict], every_seed: bool = True) -> Dict[tuple, List[tuple]]:
    """(env, variant, scenario) -> [(median samples, centre, low, high, seeds)] per
    evaluation index, over the group's seeds that reached it (:data:`SPREAD`: the
    environment's statistic). With ``every_seed`` the curve ends at the last evaluation
    every seed reached; without, it goes on as far as any seed did, over fewer seeds."""
    out = {}
    for key, runs in _groups(records).items():
        lengths = [len(r["curve"]) for r in runs]
        n = min(lengths) if every_seed else max(lengths)
        spread = spread_of(key[0])[0]
        pts = []
        for i in range(n):
            reached = [r["curve"][i] for r in runs if len(r["curve"]) > i]
            pts.append((statistics.median(s for s, _ in reached),
                        *spread([v for _, v in reached]), len(reached)))
        out[key] = pts
    return out


def table(records: List[dict], labels: Labels, what: str = "test win rate") -> str:
    """Per (variant, scenario): the last evaluation every seed reached, the speed of
    training and the wall-clock projected to the paper's budget (medians over the seeds
    whose wall-clock is known). ``what`` names the metric of the curves."""
    lines = [f"| variant | scenario | seeds | env steps | final {what}, median (25-75%) "
             "or mean (+-sd) | "
             "env steps per second of training | wall-clock | projected to the paper's budget |",
             "|---|---|---|---|---|---|---|---|"]
    for (env, variant, scenario), pts in sorted(curves(records).items()):
        runs = [r for r in records if record_key(r) == (env, variant, scenario)]
        timed = [r for r in runs if r["wall_s"] == r["wall_s"]]  # not NaN: a known clock
        rate = statistics.median(r["env_steps_per_s"] for r in timed) if timed else float("nan")
        wall = statistics.median(r["wall_s"] for r in timed) if timed else float("nan")
        final = pts[-1][:4] if pts else (0, float("nan"), float("nan"), float("nan"))
        budget = paper_steps(env, scenario)
        projected = "-" if budget is None else f"{budget / rate / 3600:.1f} h ({budget / 1e6:g}M)"
        clock = "| - | - | - |" if rate != rate else (  # records of eval.csv files: no clock
            f"| {rate:,.0f} | {wall / 3600:.2f} h | {projected} |")
        lines.append(f"| {labels[env][variant]} | {scenario} | {len(runs)} | {final[0]:,.0f} | "
                     f"{_cell(env, *final[1:])} {clock}")
    return "\n".join(lines) + "\n"


def curve_table(records: List[dict], labels: Labels, what: str = "test win rate") -> str:
    """Per (variant, scenario) and evaluation (those every seed reached): the median
    environment steps and the metric over seeds by the environment's statistic."""
    data = curves(records)
    names = " or ".join(sorted({spread_of(env)[1] for env, _, _ in data}))
    lines = [f"| variant | scenario | seeds | evaluation | env steps | {what}, {names} |",
             "|---|---|---|---|---|---|"]
    for (env, variant, scenario), pts in sorted(data.items()):
        seeds = sum(record_key(r) == (env, variant, scenario) for r in records)
        for k, (steps, *figure, _) in enumerate(pts):
            lines.append(f"| {labels[env][variant]} | {scenario} | {seeds} | {k + 1} | "
                         f"{steps:,.0f} | {_cell(env, *figure)} |")
    return "\n".join(lines) + "\n"


def plot(records: List[dict], labels: Labels, path: str, what: str = "test win rate",
         unit_range: bool = True) -> None:
    """The learning curves, a panel per (env, scenario), with the environment's spread
    over seeds shaded; ``unit_range`` fixes the y-axis to [0, 1] (a rate). Where some
    seeds stop before others, the curve goes on over the seeds that remain, dotted, and
    its label says from where and over how many."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = curves(records, every_seed=False)
    panels = sorted({(env, s) for env, _, s in data})
    entries = max(sum((env, v, s) in data for v in labels[env]) for env, s in panels) + 2
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 3.6 + 0.2 * entries),
                             squeeze=False)
    for ax, (env, scenario) in zip(axes[0], panels):
        right = 0
        shown = [(v, lab) for v, lab in labels[env].items() if data.get((env, v, scenario))]
        for k, (variant, label) in enumerate(shown):  # colours: the panel's own variants
            pts = data[(env, variant, scenario)]
            right = max(right, pts[-1][0])
            full = sum(p[4] == pts[0][4] for p in pts)  # every seed's evaluations come first
            parts = [(pts[:full], "-", 0.2)]
            if full < len(pts):  # the rest, dotted, joined to the last point of every seed
                label += f" ({pts[full][4]} of {pts[0][4]} seeds from {pts[full][0] / 1000:,.0f}k)"
                parts.append((pts[full - 1:], ":", 0.1))
            for part, style, alpha in parts:
                x = [p[0] for p in part]
                ax.plot(x, [p[1] for p in part], style, color=f"C{k}",
                        label=label if style == "-" else None)
                ax.fill_between(x, [p[2] for p in part], [p[3] for p in part], color=f"C{k}",
                                alpha=alpha)
        paper = PAPER_CURVES.get((env, scenario))
        if paper:  # up to the first point past our curves
            shown = [p for p in paper if p[0] <= right] + [p for p in paper if p[0] > right][:1]
            x, mean, low, high = zip(*shown)
            ax.plot(x, mean, "ko--", ms=4, lw=1, label="paper's ACE (mean of 5 seeds)")
            ax.fill_between(x, low, high, color="k", alpha=0.08, label="paper's ACE, its band")
        ax.set_title(f"{TITLES.get(env, env)} {scenario}")
        ax.set_xlabel("environment steps")
        ax.set_ylabel(f"{what}, {spread_of(env)[1]}")
        if unit_range:
            ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _keep(curve: str, summary: str, csv: str, json_path: str) -> None:
    """Copy a finished trial's ``curve`` and ``summary`` to ``csv`` and ``json_path``,
    unless ``csv`` holds a curve that goes further (a longer run of the same name)."""
    if os.path.isfile(csv):
        old, new = last_eval(csv), last_eval(curve)
        if old and new and old["samples"] > new["samples"]:
            print(f"kept {csv} (to {int(old['samples']):,} steps), not replaced by "
                  f"{curve} (to {int(new['samples']):,})", file=sys.stderr)
            return
    os.makedirs(os.path.dirname(csv), exist_ok=True)
    shutil.copyfile(curve, csv)
    shutil.copyfile(summary, json_path)


def study_records(study: Study) -> List[dict]:
    """Records of a study's trials that have evaluated, their curves of
    ``study.metric``; the wall-clock from a finished trial's ``study.json`` (NaN
    before). With ``study.results``, a finished trial's ``eval.csv`` and ``study.json``
    are copied there (:func:`~acegnn.study.trial.kept`; not over a kept curve that goes
    further, which is kept and said), and a trial whose run directory holds no
    ``eval.csv`` is read from there."""
    out = []
    for trial in study.trials:
        where = os.path.join(trial.run_dir, "eval.csv")
        csv = kept(study.results, trial, ".csv") if study.results else None
        if csv and os.path.isfile(where) and os.path.isfile(os.path.join(trial.run_dir, DONE)):
            _keep(where, os.path.join(trial.run_dir, DONE), csv,
                  kept(study.results, trial, ".json"))
        elif csv and not os.path.isfile(where):
            where = csv
        rows = read_csv(where)
        curve = [(r["samples"], r[study.metric]) for r in rows if study.metric in r]
        if not curve:
            continue
        try:
            with open(os.path.join(trial.run_dir, DONE)) as f:
                done = json.load(f)
            samples, wall = done["samples"], done["wall_s"]
        except (OSError, ValueError, KeyError):
            samples, wall = curve[-1][0], float("nan")
        out.append({"env": study.env, "variant": trial.variant,
                    "scenario": trial.scenario or "-", "seed": trial.seed,
                    "run_dir": trial.run_dir, "samples": samples, "wall_s": wall,
                    "env_steps_per_s": samples / max(wall, 1e-9), "curve": curve})
    return out


def write_report(study: Study) -> str:
    """The study's tables (:func:`table`, :func:`curve_table`), written to
    ``report.md`` in the study directory, and its learning curves to ``curves.png``
    (where matplotlib is installed); the text.

    Raises:
        ValueError: when no trial has evaluated yet.
    """
    records = study_records(study)
    if not records:
        raise ValueError(f"study {study.name}: no trial in {study.dir} has evaluated "
                         f"{study.metric} yet")
    what = study.metric.replace("_", " ")
    text = (f"# Study {study.name}\n\n{len(records)} of {len(study.trials)} trials have "
            f"evaluated; {study.metric} of the greedy policy over seeds.\n\n"
            f"{table(records, study.labels, what)}\n{curve_table(records, study.labels, what)}")
    if study.at:
        text += (f"\n{what} at {', '.join(f'{x:,}' for x in study.at)} steps, each seed's "
                 f"evaluations within {study.window:,} steps:\n\n"
                 + mean_at(records, study.labels, list(study.at), study.window))
    os.makedirs(study.dir, exist_ok=True)  # (absent where every curve comes from results)
    write_text(os.path.join(study.dir, "report.md"), text)
    try:
        plot(records, study.labels, os.path.join(study.dir, "curves.png"), what,
             unit_range=study.metric.endswith("rate"))
    except ImportError:
        text += "\n(no curves.png: the figure needs matplotlib, pip install -e .[plot])\n"
    return text

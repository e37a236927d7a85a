"""Command line: ``acegnn train | eval | viz | config | oracle | study``."""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from typing import Optional, Sequence


def _run_dir(cfg) -> str:
    name = cfg.run.name or (f"{cfg.env.name}_{cfg.algo.name}_seed{cfg.seed}_"
                            f"{time.strftime('%Y%m%d-%H%M%S')}")
    return os.path.join(cfg.run.dir, name)


def cmd_train(args: argparse.Namespace) -> int:
    from acegnn.algos.checkpoint import CHECKPOINT
    from acegnn.config import load_config, to_yaml
    from acegnn.run import train
    from acegnn.utils.io import write_text
    from acegnn.utils.runs import lock_run_dir

    resume = None
    if args.resume:
        if args.config is not None:
            raise ValueError(f"--resume takes its config from {args.resume}/config.yaml; "
                             f"do not also give {args.config}")
        run_dir = args.resume
        path = os.path.join(run_dir, "config.yaml")
        if not os.path.exists(path):
            raise ValueError(f"{run_dir} has no config.yaml; is it a run directory?")
        lock = lock_run_dir(run_dir)  # noqa: F841 (held while this process trains)
        cfg = load_config(path, ["train.halt_after=0", *args.overrides])
        resume = os.path.join(run_dir, CHECKPOINT)
    else:
        if args.config is None:
            raise ValueError("give a CONFIG file or --resume RUN_DIR")
        cfg = load_config(args.config, args.overrides)
        run_dir = _run_dir(cfg)
        lock = lock_run_dir(run_dir)  # noqa: F841
        if os.path.exists(os.path.join(run_dir, CHECKPOINT)):
            raise ValueError(f"{run_dir} already holds a run; resume it with --resume {run_dir} "
                             f"or choose another run.name")
        os.makedirs(run_dir, exist_ok=True)
        write_text(os.path.join(run_dir, "config.yaml"), to_yaml(cfg))
    # a raised budget stays raised when the run is resumed again
    summary = train(cfg, run_dir, resume, rewrite_config=bool(args.overrides))
    print(json.dumps(summary))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from acegnn.run import evaluate_checkpoint

    out = evaluate_checkpoint(args.run, args.episodes, args.seed, args.overrides)
    metrics = out["evaluation"].metrics()
    if out["exact"] is not None:
        metrics.update(out["exact"].metrics())
    print(json.dumps({"checkpoint": out["checkpoint"], "samples": out["samples"], **metrics}))
    return 0


def cmd_viz(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from acegnn.run import restore
    from acegnn.viz.episode import check_drawable, record_run

    cfg, state, task, learner = restore(args.run)
    task.close()
    check_drawable(learner)
    from acegnn.viz.draw import animate
    from acegnn.viz.html import episode_page

    out = args.out or os.path.join(os.path.dirname(state["path"]), "viz")
    os.makedirs(out, exist_ok=True)
    episodes = record_run(cfg, learner, args.episodes, args.seed, args.max_steps)
    written = []
    for k, episode in enumerate(tqdm(episodes, desc="drawing episodes", unit="episode",
                                     disable=not args.progress)):
        name = os.path.join(out, f"episode{k}")
        title = f"{cfg.env.name}, {cfg.algo.name}, {state['samples']:,} samples, episode {k}"
        written += [animate(episode, f"{name}.{args.format}", fps=args.fps),
                    episode_page(episode, f"{name}.html", title=title, max_edges=args.max_edges)]
    print(json.dumps({"checkpoint": state["path"], "samples": state["samples"],
                      "steps": [len(e) for e in episodes], "files": written}))
    return 0


def cmd_oracle(args: argparse.Namespace) -> int:
    from acegnn.envs.spiders_fly.oracle import summary

    print(json.dumps(summary(args.grid, args.horizon)))
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    from acegnn.config import describe, load_config

    print(describe(load_config(args.config, args.overrides)), end="")
    return 0


def check_study(study, backend: bool = True) -> None:
    """Load every config of a study (:meth:`acegnn.study.Study.configs`) and check that
    it trains the study's ``env``.

    Raises:
        ValueError: naming the study file, the variant and scenario, and the config's
            error or its ``env.name``.
    """
    from acegnn.config import load_config

    for where, config, overrides in study.configs():
        try:
            cfg = load_config(config, overrides, backend=backend)
        except ValueError as e:
            raise ValueError(f"{study.path}: {where}: {e}") from None
        if cfg.env.name != study.env:
            raise ValueError(f"{study.path}: {where}: {config} trains env.name "
                             f"{cfg.env.name}, and the study's env is {study.env}")


def train_study(study, address: Optional[str] = None, cpus: Optional[int] = None,
                every_s: float = 30.0) -> list:
    """Check the study's configs (:func:`check_study`), then train its unfinished trials
    on Ray Tune (:func:`acegnn.study.runner.run_study`); the trials left unfinished.

    Raises:
        ValueError: a config that does not load or train the study's env, or no Ray.
    """
    check_study(study)
    if importlib.util.find_spec("ray") is None:
        raise ValueError("acegnn study trains on Ray Tune: pip install -e .[ray]")
    from acegnn.study.runner import run_study

    return run_study(study, address, cpus, every_s)


def cmd_study(args: argparse.Namespace) -> int:
    from acegnn.study import finished, load_study, write_report

    study = load_study(args.study, args.dir)
    chosen = study.only(args.trials) if args.trials else study
    todo = [t for t in chosen.trials if not finished(t, study.total_samples, study.results)]
    if not args.report:
        of = f" (--trials: {len(chosen.trials)} of {len(study.trials)})" if args.trials else ""
        print(f"study {study.name}: {len(chosen.trials)} trials in {study.dir}{of}, "
              f"{len(chosen.trials) - len(todo)} finished, {len(todo)} to train", flush=True)
    if todo and not args.report:
        left = train_study(chosen, args.address, args.cpus, args.progress_every)
        if left:
            print(f"acegnn: {len(left)} trials did not finish: {', '.join(t.name for t in left)} "
                  f"(the study.log of each and the errors printed above say why); the same "
                  f"command resumes them", file=sys.stderr)
            return 1
    print(write_report(study), end="")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="acegnn", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train from a YAML config (+ key=value overrides)")
    t.add_argument("config", nargs="?", help="YAML file under configs/")
    t.add_argument("overrides", nargs="*", help="key=value, e.g. algo.lr=1e-3 env.grid_size=7")
    t.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its checkpoint")
    t.set_defaults(fn=cmd_train)
    e = sub.add_parser("eval", help="greedy test episodes of a run's checkpoint")
    e.add_argument("run", help="run directory or checkpoint file")
    e.add_argument("overrides", nargs="*",
                   help="env.key=value: evaluate on another task of the same schema, e.g. "
                        "env.scenario=10m_vs_11m (zero-shot transfer)")
    e.add_argument("--episodes", type=int, default=32)
    e.add_argument("--seed", type=int, default=2024)
    e.set_defaults(fn=cmd_eval)
    v = sub.add_parser("viz", help="draw greedy episodes of a run's checkpoint (animation "
                                   "and an interactive HTML page per episode)")
    v.add_argument("run", help="run directory or checkpoint file")
    v.add_argument("--episodes", type=int, default=1)
    v.add_argument("--seed", type=int, default=0, help="seed of the episodes' starts")
    v.add_argument("--out", help="output directory (default: RUN/viz)")
    v.add_argument("--format", choices=("gif", "mp4"), default="gif")
    v.add_argument("--fps", type=float, default=2.0)
    v.add_argument("--max-steps", type=int, default=200, help="steps drawn per episode at most")
    v.add_argument("--max-edges", type=int, default=500, help="edges drawn per state at most")
    v.add_argument("--no-progress", dest="progress", action="store_false")
    v.set_defaults(fn=cmd_viz)
    c = sub.add_parser("config", help="print the resolved config of a YAML file and "
                                      "overrides, each key with its comment")
    c.add_argument("config", help="YAML file under configs/")
    c.add_argument("overrides", nargs="*", help="key=value")
    c.set_defaults(fn=cmd_config)
    o = sub.add_parser("oracle", help="exact optimum of Spiders-and-Fly")
    o.add_argument("--grid", type=int, default=5)
    o.add_argument("--horizon", type=int, default=10)
    o.set_defaults(fn=cmd_oracle)
    s = sub.add_parser("study", help="train a study's runs on Ray Tune (a rerun resumes "
                                     "it), then write and print its tables and curves")
    s.add_argument("study", help="YAML study file, e.g. configs/studies/smoke.yaml")
    s.add_argument("--address", help="Ray cluster to run on (default: a local Ray, "
                                     "started and stopped by the command)")
    s.add_argument("--dir", help="study directory (default: the study file's dir key, else "
                                 "runs/studies/<its name>; relative to the current directory)")
    s.add_argument("--report", action="store_true",
                   help="train nothing: write and print the tables and curves")
    s.add_argument("--cpus", type=int, help="CPUs of the local Ray (default: all)")
    s.add_argument("--trials", nargs="+", metavar="PATTERN",
                   help="train only the trials whose names match a shell pattern, e.g. "
                        "'ace_rec_wo_ia_*' '*_seed2' (the report covers the whole study)")
    s.add_argument("--progress-every", type=float, default=30.0, metavar="SECONDS",
                   help="seconds between progress lines (default: 30)")
    s.set_defaults(fn=cmd_study)
    args = p.parse_args(argv)
    if args.command == "train" and args.config and "=" in args.config:
        args.overrides.insert(0, args.config)  # `acegnn train --resume R key=value`
        args.config = None
    from acegnn.algos.trainer import Halted

    try:
        return args.fn(args)
    except ValueError as e:
        print(f"acegnn: error: {e}", file=sys.stderr)
        return 2
    except Halted as e:
        print(f"acegnn: {e}", file=sys.stderr)
        return 3
    except (RuntimeError, FloatingPointError) as e:  # e.g. a device that does not exist
        print(f"acegnn: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

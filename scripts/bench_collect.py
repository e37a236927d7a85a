#!/usr/bin/env python
"""Time the training loop's collection: CPU milliseconds per environment step of a round.

Builds the task and learner of a config, collects one round to warm up (compilation,
first graphs), then times ``--rounds`` rounds of ``Trainer.collect`` by the process's
CPU time, once for each number of environments stepped together (``--envs``, the
config's ``env.num_envs`` when not given). ``--profile`` prints the functions that took
the most time in one more round (cProfile, by their own time).

    python scripts/bench_collect.py configs/smax_5m_vs_6m_recommended.yaml env.scenario=2s3z --envs 8 32
    python scripts/bench_collect.py configs/smax_5m_vs_6m.yaml --profile 25
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import tempfile
import time
from typing import List, Optional

import torch

from acegnn.algos.trainer import Trainer
from acegnn.config import load_config
from acegnn.run import make_learner, make_task
from acegnn.utils.runs import write_json


def time_rounds(config: str, overrides: List[str], rounds: int, profile: int = 0) -> dict:
    """Collect a warm-up round and ``rounds`` timed ones; the record of the timings."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(config, [*overrides, f"run.dir={tmp}", "train.progress=false"])
        task = make_task(cfg)
        trainer = Trainer(task, make_learner(cfg, task), cfg.train, cfg.seed, tmp)
        trainer.collect()
        per_step, steps = [], []
        for _ in range(rounds):
            before, t0 = trainer.collector.samples, time.process_time()
            trainer.collect()
            n = trainer.collector.samples - before
            per_step.append((time.process_time() - t0) / n * 1e3)
            steps.append(n)
        if profile:
            prof = cProfile.Profile()
            prof.enable()
            trainer.collect()
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(profile)
        return {"config": config, "overrides": overrides, "num_envs": task.num_envs,
                "rounds": rounds, "steps_per_round": statistics.mean(steps),
                "cpu_ms_per_env_step": statistics.median(per_step),
                "cpu_ms_per_batched_step": statistics.median(per_step) * task.num_envs}


def main(argv: Optional[List[str]] = None) -> List[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--envs", type=int, nargs="+", metavar="N",
                   help="env.num_envs values to time, one after another (default: the config's)")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per value (median reported)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="print the N functions with the most own time of one more round")
    p.add_argument("--json", metavar="FILE", help="also write the records to FILE")
    ns = p.parse_args(argv)
    if ns.rounds < 1:
        p.error(f"--rounds must be at least 1 (got {ns.rounds})")
    if any(n < 1 for n in ns.envs or ()):
        p.error(f"--envs must be at least 1 each (got {ns.envs})")
    torch.set_num_threads(1)
    records = []
    for n in ns.envs or [None]:
        extra = [] if n is None else [f"env.num_envs={n}"]
        rec = time_rounds(ns.config, [*ns.overrides, *extra], ns.rounds, ns.profile)
        print(json.dumps(rec), flush=True)
        records.append(rec)
    write_json(ns.json, records)
    return records


if __name__ == "__main__":
    main()

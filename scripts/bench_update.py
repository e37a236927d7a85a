#!/usr/bin/env python
"""Time one learner update (a replayed batch through the TD loss and the optimiser).

Builds the task and learner of a config, fills the replay buffer with a few collects, and
times ``learner.update`` on a fixed batch (``update_ms``) and one step as the training
loop takes it: sample the replay, build the graphs, update (``step_ms``). With ``--compare-all-values`` (ACE only) it
alternates with an update whose rollouts value every candidate, the path before the
``values="chosen"`` / ``"successors"`` passes, so both see the same machine load.
``train.compile``, ``train.flush_denormal`` and ``train.keep_heap`` act as in training; the
first call of each timing (``*_first_s``) includes the compilation.

On a GPU (``train.device=cuda``) each timing waits for the device to finish. A batch can
be saved where the task runs (``--save-batch``) and timed where it does not
(``--batch``, ``update_ms`` only): football's engine is built on this machine, its update
timed on a GPU machine without it.

    python scripts/bench_update.py configs/spiders_fly_5x5.yaml --compare-all-values
    python scripts/bench_update.py configs/spiders_fly_5x5_baselines.yaml algo.name=qmix
    python scripts/bench_update.py configs/smax_5m_vs_6m.yaml train.device=cuda
    python scripts/bench_update.py configs/smax_5m_vs_6m.yaml train.compile=true
    python scripts/bench_update.py configs/smax_5m_vs_6m.yaml --count-ops
    python scripts/bench_update.py configs/grf_3_vs_1_with_keeper_recommended.yaml --checkpoint RUN
    python scripts/bench_update.py configs/grf_3_vs_1_with_keeper.yaml --save-batch grf.pt
    python scripts/bench_update.py configs/grf_3_vs_1_with_keeper.yaml train.device=cuda --batch grf.pt
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from typing import Callable, Dict

import torch

import acegnn.nn.ace as ace_module
from acegnn.algos.checkpoint import checkpoint_path, load_checkpoint
from acegnn.algos.trainer import Trainer
from acegnn.config import load_config
from acegnn.run import make_learner, make_task
from acegnn.nn.rollout import sequential_rollout
from acegnn.utils.heap import keep_freed_memory
from acegnn.utils.opcount import OpCounter
from acegnn.utils.phases import PhaseClock


def _all_values(*args, **kwargs):
    kwargs["values"] = "all"
    return sequential_rollout(*args, **kwargs)


def minor_faults() -> int:
    """Pages this process has faulted in so far (0 where ``resource`` is missing)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def step_phases(step: Callable[[], object], n: int, clock: Callable[[], float],
                wait: Callable[[], None]) -> Dict[str, float]:
    """Mean ms per step of each phase of ``n`` calls of ``step`` (acegnn.utils.phases), of
    the whole step (``step``) and of what lies outside every top-level phase (``rest``).
    ``aux_loss`` runs outside the others; none of the phases nest in the learners here."""
    with PhaseClock(clock, wait) as phases:
        wait()
        t0 = clock()
        for _ in range(n):
            step()
        wait()
        total = clock() - t0
    out = {k: v / n * 1e3 for k, v in phases.totals.items()}
    out["rest"] = (total - sum(phases.totals.values())) / n * 1e3
    out["step"] = total / n * 1e3
    return out


class SavedBatch:
    """What :func:`make_learner` reads of a task, from a saved batch: the schema and an
    example batch of graphs."""

    def __init__(self, schema, example) -> None:
        self.schema, self.example = schema, example

    def observe(self):
        return None

    def graphs(self, obs):
        return self.example


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=6, help="timed rounds (median reported)")
    p.add_argument("--updates", type=int, default=10, help="updates per round")
    p.add_argument("--compare-all-values", action="store_true")
    p.add_argument("--cpu-time", action="store_true", help="time by the process's CPU time "
                   "(time.process_time) instead of the wall clock: steadier beside other "
                   "processes on few cores; one thread only, and not on a GPU")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="also profile N loop steps with torch.profiler and print the "
                        "operators that took the most time, with FLOP counts")
    p.add_argument("--profile-rows", type=int, default=25)
    p.add_argument("--phases", type=int, default=0, metavar="N",
                   help="also time N loop steps phase by phase with the timing clock "
                        "(acegnn.utils.phases; no profiler) and print each phase's mean ms "
                        "and share of the step")
    p.add_argument("--count-ops", action="store_true", help="count the operators one call of "
                   "each timing dispatches, the kernels among them and the host-device syncs "
                   "(acegnn.utils.opcount): what bounds a small update on a GPU")
    p.add_argument("--save-batch", metavar="FILE", help="save the timed batch (and what builds "
                   "the learner) to FILE")
    p.add_argument("--batch", metavar="FILE", help="time the batch saved in FILE (made with the "
                   "same config) instead of building the task; update_ms only")
    p.add_argument("--checkpoint", metavar="RUN", help="start from the learner (weights and "
                   "optimiser state) of a run's checkpoint, made with the same config: a "
                   "trained network's update (its denormals, train.flush_denormal)")
    ns = p.parse_args(argv)
    if ns.batch and (ns.save_batch or ns.profile or ns.phases):
        p.error("--batch times a saved batch only: no --save-batch, --profile or --phases "
                "with it")
    if ns.cpu_time and ns.threads != 1:
        p.error("--cpu-time sums the CPU time of every thread: use it with --threads 1")
    clock = time.process_time if ns.cpu_time else time.perf_counter
    torch.set_num_threads(ns.threads)
    trainer = None
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(ns.config, [*ns.overrides, f"run.dir={tmp}", "train.progress=false"],
                          backend=not ns.batch)  # a saved batch needs no engine
        if ns.batch:
            saved = torch.load(ns.batch, weights_only=False)
            if saved["config"] != ns.config:
                p.error(f"{ns.batch} holds a batch of {saved['config']}, not of {ns.config}")
            learner = make_learner(cfg, SavedBatch(saved["schema"], saved["example"]))
            args, nstep = saved["args"], saved["nstep"]
        else:
            task = make_task(cfg)
            learner = make_learner(cfg, task)
            trainer = Trainer(task, learner, cfg.train, cfg.seed, tmp)
            while len(trainer.buffer) < max(cfg.train.batch_size, cfg.train.learning_starts):
                trainer.collect()
            args, nstep = trainer.batch(trainer.buffer.sample(cfg.train.batch_size,
                                                              trainer.sample_gen))
            if ns.save_batch:
                torch.save({"config": ns.config, "schema": task.schema,
                            "example": task.graphs(task.observe()), "args": args,
                            "nstep": nstep}, ns.save_batch)
    if ns.checkpoint:
        try:
            learner.load_state_dict(load_checkpoint(checkpoint_path(ns.checkpoint))["learner"])
        except ValueError as e:
            p.error(f"--checkpoint {ns.checkpoint}: {e}")
        loaded_updates = learner.num_updates  # the run's gradient steps
    if ns.batch and cfg.train.compile:  # the Trainer switches them on otherwise
        learner.use_compiled(True)
    if ns.batch and cfg.train.compile_optimizer:
        learner.compile_optimizer()
    torch.set_flush_denormal(cfg.train.flush_denormal)  # as a training session does
    if cfg.train.keep_heap:
        keep_freed_memory()
    device = torch.device(getattr(learner, "device", "cpu"))
    if ns.cpu_time and device.type == "cuda":
        p.error("--cpu-time does not count the GPU's time: time a GPU by the wall clock")

    def wait():  # a GPU runs asynchronously: time what it has done
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def update():  # the same batch every time
        learner.update(*args, **nstep)

    def step():  # as the loop does it: sample, build the graphs, update
        trainer.update_once()

    modes = {"update_ms": (update, sequential_rollout)}
    if trainer is not None:
        modes["step_ms"] = (step, sequential_rollout)
    if ns.compare_all_values:
        modes["all_values_update_ms"] = (update, _all_values)
    times = {k: [] for k in modes}
    faults = dict.fromkeys(modes, 0.0)  # pages faulted in per call (train.keep_heap)
    first_s = {}  # the first call of each mode: with train.compile, the compilation
    for _ in range(ns.repeats):
        for key, (fn, rollout) in modes.items():
            ace_module.sequential_rollout = rollout
            t0 = clock()
            fn()
            wait()
            first_s.setdefault(key.replace("_ms", "_first_s"), clock() - t0)
            t0, f0 = clock(), minor_faults()
            for _ in range(ns.updates):
                fn()
            wait()
            times[key].append((clock() - t0) / ns.updates * 1e3)
            faults[key] += (minor_faults() - f0) / ns.updates / ns.repeats
    if ns.count_ops:
        ops = {}
        for key, (fn, rollout) in modes.items():
            ace_module.sequential_rollout = rollout
            with OpCounter() as counter:
                fn()
            ops[key.replace("_ms", "")] = counter.summary()
    ace_module.sequential_rollout = sequential_rollout
    out = {"config": ns.config, "overrides": ns.overrides, "algo": cfg.algo.name,
           "batch_size": cfg.train.batch_size, "threads": ns.threads, "device": str(device),
           **{k: statistics.median(v) for k, v in times.items()}, **first_s,
           "compile": cfg.train.compile, "flush_denormal": cfg.train.flush_denormal,
           "keep_heap": cfg.train.keep_heap,
           "page_faults": {k.replace("_ms", ""): v for k, v in faults.items()},
           "clock": "cpu" if ns.cpu_time else "wall"}
    if ns.count_ops:
        out["ops"] = ops
        for key, c in ops.items():
            print(f"{key}: {c['dispatched']} operators dispatched, {c['kernels']} kernels, "
                  f"{c['syncs']} host-device syncs ({c['sync_ops']})")
    if ns.checkpoint:
        out["checkpoint_updates"] = loaded_updates
    if device.type == "cuda":
        out["device_name"] = torch.cuda.get_device_name(device)
    if ns.phases:
        out["phases_clock_ms"] = step_phases(step, ns.phases, clock, wait)
        print("phases of a step by the clock (ms, share):", ", ".join(
            f"{k} {v:.1f} ({v / out['phases_clock_ms']['step']:.0%})"
            for k, v in out["phases_clock_ms"].items() if k != "step"))
    if ns.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
            for _ in range(ns.profile):
                step()
        events = prof.key_averages()
        print(events.table(sort_by="self_cpu_time_total", row_limit=ns.profile_rows))
        total = sum(e.self_cpu_time_total for e in events)
        phases = {e.key[len("phase/"):]: e.cpu_time_total for e in events if e.key.startswith("phase/")}
        out["phases_ms"] = {k: v / 1e3 / ns.profile for k, v in phases.items()}
        print("phases of a step (ms, share):", ", ".join(
            f"{k} {v / 1e3 / ns.profile:.1f} ({v / total:.0%})" for k, v in phases.items()))
        out["flop_per_step"] = sum(e.flops for e in events) / ns.profile
        print(f"FLOP per step (matrix products and convolutions): "
              f"{out['flop_per_step'] / 1e9:.2f} G")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()

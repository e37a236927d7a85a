#!/usr/bin/env python
"""CPU time of one gfootball step of a :class:`acegnn.envs.grf.Game`: gfootball's own
observation path against ``lean_observations`` (:mod:`acegnn.envs.grf.engine`).

Two games of the scenario, one of each, play uniformly random available actions in one
process; rounds of ``--steps`` steps alternate between them, so both see the same load.
Each round records the process's CPU time per step and, of it, the engine's C++ step
(``libgame``'s ``step``; the rest is Python: gfootball's wrapper and our rules). Prints the
median over ``--rounds`` rounds of each and the ratio.

    OMP_NUM_THREADS=1 python scripts/bench_grf_game.py [--scenario academy_counterattack_hard]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


class _TimedEngine:
    """The core's ``libgame`` object, its ``step`` timed in CPU seconds."""

    def __init__(self, inner) -> None:
        self.__dict__.update(inner=inner, seconds=0.0)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __setattr__(self, name, value) -> None:
        setattr(self.inner, name, value)

    def step(self):
        start = time.process_time()
        try:
            return self.inner.step()
        finally:
            self.__dict__["seconds"] += time.process_time() - start


def _game(scenario: str, lean: bool):
    from acegnn.envs.grf import Game, engine

    if lean:
        game = Game(scenario, seed=0, reward="cds")
    else:
        with mock.patch.object(engine, "lean_observations", lambda env: None):
            game = Game(scenario, seed=0, reward="cds")
    core = game.env.unwrapped._env
    core._env = _TimedEngine(core._env)
    return game, core._env


def main(argv=None) -> None:
    import numpy as np

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", default="academy_3_vs_1_with_keeper")
    p.add_argument("--steps", type=int, default=500, help="steps a round")
    p.add_argument("--rounds", type=int, default=6, help="rounds of each path")
    args = p.parse_args(argv)

    rng = np.random.default_rng(0)
    paths = {"gfootball's own": _game(args.scenario, False), "lean": _game(args.scenario, True)}

    def play(game, n):
        for _ in range(n):
            game.step([int(rng.choice(np.flatnonzero(a))) for a in game.avail])

    for game, _ in paths.values():
        play(game, 100)  # warm up
    cpu = {k: [] for k in paths}
    engine = {k: [] for k in paths}
    for _ in range(args.rounds):
        for name, (game, timed) in paths.items():
            engine_before, start = timed.seconds, time.process_time()
            play(game, args.steps)
            cpu[name].append(1e3 * (time.process_time() - start) / args.steps)
            engine[name].append(1e3 * (timed.seconds - engine_before) / args.steps)
    print(f"{args.scenario}: CPU ms a step, median of {args.rounds} rounds of {args.steps}")
    for name in paths:
        c, e = statistics.median(cpu[name]), statistics.median(engine[name])
        print(f"  {name:16s} {c:6.3f} (engine's C++ step {e:.3f}, the rest {c - e:.3f})")
        paths[name][0].close()
    own, lean = (statistics.median(cpu[k]) for k in paths)
    print(f"  lean / own: {lean / own:.2f}")


if __name__ == "__main__":
    main()

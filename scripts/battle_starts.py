#!/usr/bin/env python
"""Which test battles each policy loses: are the losses the same starts for every policy
(starts nobody wins) or each policy's own?

Plays the greedy policy of each run's checkpoint on the same SMAX test battles
(``--episodes`` starts of test seed ``--seed``, as ``acegnn eval`` plays them) and
prints each policy's win rate, how many starts are won by k of the policies (beside the
count expected if the policies won independently at their own rates), and the losses
each pair shares.

    python scripts/battle_starts.py runs/smax/ace_3m_seed0 runs/smax/qmix_3m_seed0 --episodes 128
"""
from __future__ import annotations

import argparse
import itertools
import json
from typing import Dict, List, Tuple

import numpy as np


def overlap_report(won: Dict[str, List[bool]]) -> Dict:
    """From each policy's outcome per start: ``won_by`` (starts won by exactly k
    policies, k = 0 .. n), ``independent`` (the counts expected if each policy won each
    start independently at its own rate) and ``shared_losses`` (per pair, the starts both
    lost)."""
    names = list(won)
    m = np.array([won[k] for k in names], dtype=bool)
    n, starts = m.shape
    won_by = np.bincount(m.sum(0), minlength=n + 1)
    dist = np.zeros(n + 1)
    dist[0] = 1.0
    for p in m.mean(1):  # the number of wins of independent Bernoulli policies
        dist[1:], dist[:1] = dist[1:] * (1 - p) + dist[:-1] * p, dist[:1] * (1 - p)
    pairs = {f"{a} | {b}": int((~m[i] & ~m[j]).sum())
             for (i, a), (j, b) in itertools.combinations(enumerate(names), 2)}
    return {"starts": starts, "won_by_policies": m.sum(0).tolist(), "win_rate": {k: float(m[i].mean()) for i, k in enumerate(names)},
            "won_by": won_by.tolist(), "independent": (dist * starts).tolist(),
            "shared_losses": pairs}


def spread(positions: np.ndarray) -> np.ndarray:
    """The largest distance between two units of a side, per battle: ``[B, n, 2]`` ->
    ``[B]``."""
    gaps = positions[:, :, None, :] - positions[:, None, :, :]
    return np.sqrt((gaps ** 2).sum(-1)).max(axis=(1, 2))


def start_outcomes(run: str, episodes: int, seed: int) -> Tuple[List[bool], np.ndarray, int]:
    """Whether the greedy policy of ``run`` won each of the test battles, the units'
    positions at the start ``[B, U, 2]`` and the number of allies (the first units)."""
    from acegnn.algos.trainer import greedy
    from acegnn.envs.base import first_episodes
    from acegnn.envs.smac.smax import SMAXTask
    from acegnn.run import restore

    cfg, state, task, learner = restore(run)
    try:
        if not isinstance(task, SMAXTask):
            raise SystemExit(f"{run}: not a SMAX battle ({cfg.env.name})")
        test = SMAXTask(task.battle, episodes, seed, task.time_limit, task.reward_scale)
        start = test.observe()["units"][:, :, 1:3].numpy().copy()
        n_allies = test.spec.n_allies
        ep = first_episodes(test, greedy(learner, seed), task.time_limit)
        test.close()
    finally:
        task.close()
    return [bool(w) for w in ep.info["won"]], start, n_allies


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="run directories or checkpoint files")
    p.add_argument("--episodes", type=int, default=128)
    p.add_argument("--seed", type=int, default=2024, help="test seed (acegnn eval's)")
    p.add_argument("--json", help="write the outcomes and the report here")
    args = p.parse_args()
    won, starts = {}, []
    for run in args.runs:
        won[run], *start = start_outcomes(run, args.episodes, args.seed)
        starts.append(start)
    pos, n_allies = starts[0]
    if any(p.shape != pos.shape or not np.array_equal(p, pos) for p, _ in starts):
        raise SystemExit("the runs do not play the same battles (another map?): their "
                         "outcomes cannot be compared start by start")
    rep = overlap_report(won)
    rep["ally_spread"] = spread(pos[:, :n_allies]).tolist()
    rep["enemy_spread"] = spread(pos[:, n_allies:]).tolist()
    for run, rate in rep["win_rate"].items():
        print(f"{run}: won {rate:.3f} of {rep['starts']}")
    n = len(won)
    print(f"starts won by k of {n} policies, k = 0..{n}: {rep['won_by']}")
    print("if independent at their rates:         "
          f"[{', '.join(f'{x:.1f}' for x in rep['independent'])}]")
    for pair, both in rep["shared_losses"].items():
        print(f"lost by both {pair}: {both}")
    wins = np.array(rep["won_by_policies"])
    mean = lambda v: f"{v.mean():.2f}" if len(v) else "-"  # noqa: E731
    for side in ("ally", "enemy"):
        v = np.array(rep[f"{side}_spread"])
        corr = np.corrcoef(v, wins)[0, 1] if wins.std() > 0 else float("nan")
        print(f"{side} spread at the start (largest distance between two units): mean "
              f"{mean(v)}; over starts won by at most one policy {mean(v[wins <= 1])}, by "
              f"all {mean(v[wins == n])}; correlation with the policies winning {corr:+.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"won": won, **rep}, f, indent=1)


if __name__ == "__main__":
    main()

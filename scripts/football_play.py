"""How a football policy plays: greedy test episodes of a GRF run's checkpoint, how they
end and what the ball owner does.

    python scripts/football_play.py RUN [RUN ...] --episodes 64 --seed 2024

prints, per run, the episodes' win rate and length, how they ended (a goal, the ball or a
player back in our half, the time limit, any other end: the keeper's catch, the ball out
of play, the opponents' ball), the share of agent-steps in which one of our agents owns
the ball, the ball owner's actions by group (``OWNER_GROUPS`` of :mod:`acegnn.envs.grf.task`), and the shots: per episode,
the share that scored, and the mean ``x`` of the shooter (the goal line is at 1). A
policy that keeps the ball and never shoots, or shoots from afar, is told apart from one
that loses it.
"""
from __future__ import annotations

import argparse
from typing import List

import torch

from acegnn.envs.grf.task import OWNER_GROUPS as GROUPS
from acegnn.envs.grf.task import OwnerTally
from acegnn.utils.runs import add_test_play_args, write_json

ENDS = ("goal", "back in our half", "time limit", "other end")


def run_counts(run: str, episodes: int, seed: int) -> dict:
    """A run's checkpoint in ``episodes`` greedy test episodes (:meth:`GRFTask.test_rounds`):
    the ends, and :class:`~acegnn.envs.grf.task.OwnerTally`'s counts summed."""
    from acegnn.algos.trainer import greedy
    from acegnn.envs.base import first_episodes
    from acegnn.envs.grf.task import GRFTask
    from acegnn.run import restore

    # one training game in one engine process: only the test games play
    cfg, _, task, learner = restore(run, ["env.num_envs=1", "env.num_workers=1"])
    try:
        if not isinstance(task, GRFTask):
            raise SystemExit(f"{run}: a football run is needed (env.name={cfg.env.name})")
        ends = torch.zeros(len(ENDS), dtype=torch.long)
        owner = torch.zeros(len(GROUPS) + 2)
        steps, won_shots = 0, 0
        act = greedy(learner, seed)
        for test, k in task.test_rounds(episodes, seed):
            tally = OwnerTally(task.n_agents, test.num_envs, task.features)
            ep = first_episodes(test, act, task.time_limit, tally)
            per_env = tally.counts
            won = ep.info["won"][:k].bool()
            half = ep.info["half_court"][:k].bool() & ~won
            limit = (ep.length[:k] >= task.time_limit) & ~won & ~half
            ends += torch.stack([won.sum(), half.sum(), limit.sum(),
                                 (~(won | half | limit)).sum()])
            owner += per_env[:k].sum(0)
            steps += int(ep.length[:k].sum())
            shots = per_env[:k, list(GROUPS).index("shot")]
            won_shots += int(((shots > 0) & won).sum())
    finally:
        task.close()
    n_groups = len(GROUPS)
    return {"run": run, "episodes": episodes, "seed": seed,
            "win_rate": float(ends[0]) / episodes, "mean_steps": steps / episodes,
            "ends": dict(zip(ENDS, ends.tolist())),
            "owned_steps": int(owner[n_groups + 1]), "steps": steps,
            "owner_actions": dict(zip(GROUPS, owner[:n_groups].long().tolist())),
            "shot_x_sum": float(owner[n_groups]), "goals_after_a_shot": won_shots}


def main(argv: List[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="run directories or checkpoint files (football)")
    add_test_play_args(p, "episodes")
    args = p.parse_args(argv)
    out = [run_counts(r, args.episodes, args.seed) for r in args.runs]
    for r in out:
        print(f"{r['run']}: win rate {r['win_rate']:.2f} in {r['episodes']} episodes "
              f"(seed {r['seed']}), {r['mean_steps']:.1f} steps on average")
        print("  ends: " + ", ".join(f"{k} {v}" for k, v in r["ends"].items()))
        owned = r["owned_steps"]
        print(f"  steps with our ball: {owned} of {r['steps']}"
              + (f" ({owned / r['steps']:.2f})" if r["steps"] else ""))
        if owned:
            print("  the ball owner's actions: " + ", ".join(
                f"{k} {v / owned:.2f}" for k, v in r["owner_actions"].items()))
        shots = r["owner_actions"]["shot"]
        print(f"  shots: {shots / r['episodes']:.2f} per episode"
              + (f", mean x of the shooter {r['shot_x_sum'] / shots:.2f}" if shots else "")
              + f"; won episodes with a shot: {r['goals_after_a_shot']}")
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python
"""Hand-written focus-fire policies on SMAX battles: what a script wins on the battles the
evaluation plays.

A yardstick for the learning curves of docs/battles.md: the test win rate of a policy
that knows SMAC's usual first lesson and nothing else, on the same battles as
``acegnn eval`` (``SMAXTask.evaluate``: the seed fixes the starts and the enemy's
randomness). Two scripts, acting on the graphs as a learner does:

* ``weakest``: every ally attacks, among the enemies in its range, the one with the
  least health left as a fraction of its own maximum (ties: the lowest index), so that allies in range of the same
  enemies shoot the same one; with none in range it moves towards the closest live
  enemy (the move whose direction is nearest), or stops when it cannot;
* ``closest``: as ``weakest``, attacking the closest enemy in range.

    python scripts/smax_scripted.py --scenarios 3m 2s3z 5m_vs_6m --episodes 256
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

#: Directions of the move kinds (x east, y north).
DIRECTIONS = {"move_north": (0.0, 1.0), "move_south": (0.0, -1.0),
              "move_east": (1.0, 0.0), "move_west": (-1.0, 0.0)}
SCRIPTS = ("weakest", "closest")


def focus_fire(spec, target: str = "weakest"):
    """The scripted policy (module docstring) for a map's :class:`BattleSpec`: graphs ->
    ``[num_agents]`` action slots."""
    from acegnn.envs.smac.units import UNIT_TYPES

    if target not in SCRIPTS:
        raise ValueError(f"target must be one of {list(SCRIPTS)} (got {target!r})")
    n, m, S = spec.n_allies, spec.n_enemies, spec.slots
    first, fixed = spec.actions.first_target, spec.actions.fixed
    # node features: type one-hot, x, y, health, shield, cooldown
    xy, health = slice(len(UNIT_TYPES), len(UNIT_TYPES) + 2), len(UNIT_TYPES) + 2
    move_slots = torch.tensor([fixed.index(k) for k in DIRECTIONS])
    directions = torch.tensor(list(DIRECTIONS.values()))
    stop = fixed.index("stop")

    def act(graphs):
        ally = graphs["ally"].x.view(-1, n, graphs["ally"].x.size(-1))
        enemy = graphs["enemy"].x.view(-1, m, graphs["enemy"].x.size(-1))
        avail = graphs["action"].available.view(-1, n, S)
        B = ally.size(0)
        d = torch.cdist(ally[..., xy], enemy[..., xy])  # [B, n, m], map widths (square maps)
        in_range = avail[..., first:first + m]
        key = enemy[..., health].unsqueeze(1).expand(B, n, m) if target == "weakest" else d
        key = (key + 1e-6 * torch.arange(m)).masked_fill(~in_range, float("inf"))
        attack = first + key.argmin(-1)
        alive = enemy[..., health] > 0  # a dead unit's features read 0
        nearest = d.masked_fill(~alive.unsqueeze(1), float("inf")).argmin(-1)  # [B, n]
        to = torch.gather(enemy[..., xy], 1, nearest.unsqueeze(-1).expand(B, n, 2)) - ally[..., xy]
        move = move_slots[(to @ directions.T).argmax(-1)]
        move = torch.where(alive.any(-1, keepdim=True), move, torch.full_like(move, stop))
        choice = torch.where(in_range.any(-1), attack, move)
        ok = torch.gather(avail, 2, choice.unsqueeze(-1)).squeeze(-1)
        return torch.where(ok, choice, avail.float().argmax(-1)).view(-1)  # (dead: the no-op)

    return act


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", default=["3m"])
    parser.add_argument("--scripts", nargs="+", choices=SCRIPTS, default=list(SCRIPTS))
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--seed", type=int, default=2024, help="the test battles' seed")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes must be positive (got {args.episodes})")
    from acegnn.envs.smac.smax import SMAXTask

    rows = []
    for scenario in args.scenarios:
        task = SMAXTask(scenario, num_envs=1, seed=0)
        for script in args.scripts:
            res = task.evaluate(focus_fire(task.spec, script), args.episodes, args.seed)
            rows.append({"scenario": scenario, "script": script, "episodes": args.episodes,
                         "seed": args.seed, **res.metrics()})
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'map':<12}{'script':<10}{'won':>6}{'drawn':>7}{'cut':>6}{'enemies left':>14}")
    for r in rows:
        print(f"{r['scenario']:<12}{r['script']:<10}{r['win_rate']:>6.2f}{r['draw_rate']:>7.2f}"
              f"{r['timeout_rate']:>6.2f}{r['enemies_alive']:>14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How a SMAX policy fights: its live agents' actions by group (move, stop, attack) in
greedy test battles, split by whether an enemy is within the agent's attack range (an
attack is available) and whether its weapon is ready (cooldown 0) or cooling down.

    python scripts/battle_actions.py RUN [RUN ...] --episodes 64 --seed 2024

prints, per run, the battles' win rate and a row per situation: how often it came up (the
agent-steps) and the shares of moves, stops and attacks. A policy that shoots and steps
back (kiting) attacks when its weapon is ready and moves while it cools down; one that
stands and fights attacks in both. It also prints how the attacks of a step spread over
the enemies: of the attacks in steps where two or more live agents attack, the share on
that step's most attacked enemy (1 when they all shoot one enemy; SMAX's heuristic enemy
shoots the nearest agent in range and stays on it).
"""
from __future__ import annotations

import argparse
from typing import List

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.envs.smac.units import (ACTION_GROUPS, UNIT_TYPES, BattleSpec, in_range,
                                    live_action_groups)
from acegnn.utils.runs import add_test_play_args, write_json

COOLDOWN = len(UNIT_TYPES) + 4  # the node features' cooldown column (0: ready)
SITUATIONS = ("no enemy in range", "enemy in range, weapon ready", "enemy in range, cooling down")


def situation_counts(graphs: Batch, live: Tensor, groups: Tensor, spec: BattleSpec) -> Tensor:
    """``[num_envs, 3, 3]``: per environment, agent-steps of live agents by situation
    (:data:`SITUATIONS`) and action group (:data:`acegnn.envs.smac.units.ACTION_GROUPS`),
    for ``live`` and ``groups`` ``[num_envs, n_agents]`` of
    :func:`acegnn.envs.smac.units.live_action_groups` on ``graphs``."""
    n, agents = groups.shape
    cooling = (graphs["ally"].x[:, COOLDOWN].cpu() > 0).view(n, agents)
    situation = torch.where(in_range(graphs, spec), torch.where(cooling, 2, 1), 0)
    cells = len(SITUATIONS) * len(ACTION_GROUPS)
    one_hot = F.one_hot(situation * len(ACTION_GROUPS) + groups, cells) * live.unsqueeze(-1)
    return one_hot.sum(1).view(n, len(SITUATIONS), len(ACTION_GROUPS))


def focus_counts(actions: Tensor, live: Tensor, groups: Tensor, spec: BattleSpec) -> Tensor:
    """``[num_envs, 2]``: per environment, the live agents' attacks in a step where two or
    more of them attack, and of those the attacks on the step's most attacked enemy, for
    ``actions`` ``[num_envs, n_agents]`` and ``live``, ``groups`` of
    :func:`acegnn.envs.smac.units.live_action_groups`. A medivac's heal is in the attack
    group with the healed ally's slot as its target, so on maps with medivacs the figure
    mixes heals into the attacks."""
    attacking = live & (groups == ACTION_GROUPS.index("attack"))
    target = (actions.cpu() - spec.actions.first_target).clamp(min=0)
    slots = spec.slots - spec.actions.first_target
    per_target = (F.one_hot(target, slots) * attacking.unsqueeze(-1)).sum(1)
    attacks = attacking.sum(1)
    several = attacks >= 2
    return torch.stack([attacks * several, per_target.amax(1) * several], 1)


def run_counts(run: str, episodes: int, seed: int) -> dict:
    """A run's checkpoint in ``episodes`` greedy SMAX test battles: its win rate and
    :func:`situation_counts` summed over them."""
    from acegnn.algos.trainer import greedy
    from acegnn.envs.base import first_episodes
    from acegnn.envs.smac.smax import SMAXTask
    from acegnn.run import restore

    cfg, _, task, learner = restore(run)
    try:
        if not isinstance(task, SMAXTask):
            raise SystemExit(f"{run}: a SMAX run is needed (env.name={cfg.env.name})")
        test = task.test_task(episodes, seed)
        per_env = torch.zeros(episodes, len(SITUATIONS), len(ACTION_GROUPS), dtype=torch.long)
        focus = torch.zeros(episodes, 2, dtype=torch.long)

        def on_step(graphs, actions, counted, restarted):
            per_env[restarted] = 0
            focus[restarted] = 0
            live, groups = live_action_groups(graphs, actions, counted, task.spec)
            per_env.add_(situation_counts(graphs, live, groups, task.spec))
            focus.add_(focus_counts(actions, live, groups, task.spec))

        ep = first_episodes(test, greedy(learner, seed), task.time_limit, on_step)
    finally:
        task.close()
    return {"run": run, "episodes": episodes, "seed": seed,
            "win_rate": float(ep.info["won"].float().mean()), "counts": per_env.sum(0).tolist(),
            "focus": focus.sum(0).tolist()}


def main(argv: List[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="run directories or checkpoint files (SMAX)")
    add_test_play_args(p, "battles")
    args = p.parse_args(argv)
    out = [run_counts(r, args.episodes, args.seed) for r in args.runs]
    for r in out:
        print(f"{r['run']}: win rate {r['win_rate']:.2f} in {r['episodes']} battles (seed {r['seed']})")
        print(f"  {'situation':<32}{'agent-steps':>12}" + "".join(f"{g:>8}" for g in ACTION_GROUPS))
        for name, row in zip(SITUATIONS, r["counts"]):
            n = sum(row)
            shares = "".join(f"{c / n:>8.2f}" if n else f"{'-':>8}" for c in row)
            print(f"  {name:<32}{n:>12}{shares}")
        shared, on_one = r["focus"]
        print(f"  attacks in steps with two or more attackers: {shared}; on the step's most "
              f"attacked enemy: " + (f"{on_one / shared:.2f}" if shared else "-"))
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How a SMAX policy fights: its live agents' actions by group (move, stop, attack) in
greedy test battles, split by whether an enemy is within the agent's attack range (an
attack is available) and whether its weapon is ready (cooldown 0) or cooling down.

    python scripts/battle_actions.py RUN [RUN ...] --episodes 64 --seed 2024

prints, per run, the battles' win rate and a row per situation: how often it came up (the
agent-steps) and the shares of moves, stops and attacks. A policy that shoots and steps
back (kiting) attacks when its weapon is ready and moves while it cools down; one that
stands and fights attacks in both.
"""
from __future__ import annotations

import argparse
import json
from typing import List

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Batch

from acegnn.envs.smac.units import ACTION_GROUPS, UNIT_TYPES, BattleSpec, live_action_groups

COOLDOWN = len(UNIT_TYPES) + 4  # the node features' cooldown column (0: ready)
SITUATIONS = ("no enemy in range", "enemy in range, weapon ready", "enemy in range, cooling down")


def situation_counts(graphs: Batch, actions: Tensor, counted: Tensor, spec: BattleSpec) -> Tensor:
    """``[num_envs, 3, 3]``: per environment, agent-steps of live agents by situation
    (:data:`SITUATIONS`) and action group (:data:`acegnn.envs.smac.units.ACTION_GROUPS`),
    for ``actions`` ``[num_envs, n_agents]`` chosen on ``graphs``; ``counted``
    ``[num_envs]`` the environments whose step counts (``first_episodes``' ``on_step``)."""
    n, agents = actions.shape
    live, groups = live_action_groups(graphs, actions, counted, spec)
    avail = graphs["action"].available.view(n * agents, -1).cpu()
    in_range = avail[:, spec.actions.first_target:].any(1).view(n, agents)
    cooling = (graphs["ally"].x[:, COOLDOWN].cpu() > 0).view(n, agents)
    situation = torch.where(in_range, torch.where(cooling, 2, 1), 0)
    cells = len(SITUATIONS) * len(ACTION_GROUPS)
    one_hot = F.one_hot(situation * len(ACTION_GROUPS) + groups, cells) * live.unsqueeze(-1)
    return one_hot.sum(1).view(n, len(SITUATIONS), len(ACTION_GROUPS))


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

        def on_step(graphs, actions, counted, restarted):
            per_env[restarted] = 0
            per_env.add_(situation_counts(graphs, actions, counted, task.spec))

        ep = first_episodes(test, greedy(learner, seed), task.time_limit, on_step)
    finally:
        task.close()
    return {"run": run, "episodes": episodes, "seed": seed,
            "win_rate": float(ep.info["won"].float().mean()), "counts": per_env.sum(0).tolist()}


def main(argv: List[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="run directories or checkpoint files (SMAX)")
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--seed", type=int, default=2024, help="the test battles' seed")
    p.add_argument("--json", help="also write the counts to this file")
    args = p.parse_args(argv)
    out = [run_counts(r, args.episodes, args.seed) for r in args.runs]
    for r in out:
        print(f"{r['run']}: win rate {r['win_rate']:.2f} in {r['episodes']} battles (seed {r['seed']})")
        print(f"  {'situation':<32}{'agent-steps':>12}" + "".join(f"{g:>8}" for g in ACTION_GROUPS))
        for name, row in zip(SITUATIONS, r["counts"]):
            n = sum(row)
            shares = "".join(f"{c / n:>8.2f}" if n else f"{'-':>8}" for c in row)
            print(f"  {name:<32}{n:>12}{shares}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

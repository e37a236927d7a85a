"""Does an ACE network value the battles another policy plays? Each policy (a SMAX run's
checkpoint) plays greedy test battles; at every state of them the ACE run's online
network gives the value of its own greedy decision there (V of the last agent's
SE-state), and the battle gives the discounted return from that state on (the ACE run's
gamma; both runs must train with the same reward scale).

    python scripts/value_on_states.py --ace ACE_RUN ACE_RUN QMIX_RUN --episodes 64 --seed 2024

prints, per playing policy, the mean value against the mean return-to-go and their
correlation over the states of the live battles, all of them and split by whether any
live agent has an enemy within attack range, and over the first 10 steps. On its own
battles a well-fitted value meets the return; on another policy's it shows whether the
network knows what that play is worth, i.e. whether its greedy policy could prefer it.
The return-to-go stops at a battle's end, also at the time limit, which the network
does not see: near the limit the two differ for that reason alone.
"""
from __future__ import annotations

import argparse
from typing import Dict, List

import torch
from torch import Tensor

from acegnn.utils.runs import add_test_play_args, write_json

#: The first steps of a battle: from the same starts, where the policies have not yet
#: drawn apart.
EARLY_STEPS = 10


def returns_to_go(rewards: Tensor, counted: Tensor, gamma: float) -> Tensor:
    """``[T, n]``: at each step of each environment the discounted sum of its rewards
    from that step to the last counted one; ``rewards``, ``counted`` ``[T, n]`` (a step
    counts while the environment plays its first episode, so the sum stops at its end)."""
    out = torch.zeros_like(rewards)
    acc = torch.zeros(rewards.size(1), dtype=rewards.dtype)
    for t in range(rewards.size(0) - 1, -1, -1):
        acc = torch.where(counted[t], rewards[t] + gamma * acc, torch.zeros_like(acc))
        out[t] = acc
    return out


def decision_values(rollout, num_envs: int) -> Tensor:
    """``[num_envs]``: V of each graph's final SE-state of a greedy ``rollout`` (the last
    agent's chosen value)."""
    last = rollout.next_agent.view(num_envs, -1) == -1
    if not bool((last.sum(1) == 1).all()):
        raise ValueError("every graph needs exactly one last agent")
    return rollout.chosen_value.view(num_envs, -1)[last]


def play(ace, ace_task, run: str, episodes: int, seed: int) -> Dict[str, Tensor]:
    """``run``'s greedy policy in ``episodes`` SMAX test battles: per step ``[T, n]`` the
    value ``ace`` (a learner of ``ace_task``'s graphs) gives the state, the reward,
    whether the step counts, whether a live agent had a target in reach, and the step's
    index in its battle."""
    from acegnn.algos.trainer import greedy
    from acegnn.envs.base import first_episodes
    from acegnn.envs.smac.smax import SMAXTask
    from acegnn.envs.smac.units import in_range
    from acegnn.run import graphs_differ, restore

    cfg, _, task, player = restore(run)
    try:
        if not isinstance(task, SMAXTask):
            raise SystemExit(f"{run}: a SMAX run is needed (env.name={cfg.env.name})")
        differ = graphs_differ(ace_task, task)
        if not differ and task.reward_scale != ace_task.reward_scale:
            differ = f"reward scale {task.reward_scale}, the ACE run's {ace_task.reward_scale}"
        if differ:
            raise SystemExit(f"{run}: its battles are not the ACE run's: {differ}")
        test = task.test_task(episodes, seed)
        steps: List[Dict[str, Tensor]] = []
        reward: Dict[str, Tensor] = {}
        step = test.step

        def stepped(actions):  # first_episodes steps, then calls on_step
            tr = step(actions)
            reward["last"] = tr.reward.cpu().float()
            return tr

        def on_step(graphs, actions, counted, restarted):
            with torch.no_grad():
                value = decision_values(ace.decide(graphs, torch.Generator().manual_seed(0)),
                                        episodes).cpu()
            live = graphs["ally"].alive.view(actions.shape).cpu()
            if bool(restarted.any()):  # a battle played again: forget its steps
                for s in steps:
                    s["counted"] = s["counted"] & ~restarted
            steps.append({"value": value, "reward": reward["last"], "counted": counted.cpu(),
                          "in_range": (in_range(graphs, task.spec) & live).any(1)})

        test.step = stepped
        ep = first_episodes(test, greedy(player, seed), task.time_limit, on_step)
        won = float(ep.info["won"].float().mean())
    finally:
        task.close()
    out = {k: torch.stack([s[k] for s in steps]) for k in steps[0]}
    counted = out["counted"]
    out["t"] = (counted.long().cumsum(0) - 1).clamp(min=0)
    out["won"] = torch.tensor(won)
    return out


def summary(rec: Dict[str, Tensor], gamma: float) -> Dict[str, dict]:
    """Mean value, mean return-to-go, correlation and count over the counted states: all,
    with no live agent in reach of a target, with one in reach, and the first
    :data:`EARLY_STEPS`."""
    counted = rec["counted"]
    ret = returns_to_go(rec["reward"] * counted, counted, gamma)
    groups = {"all": counted, "no agent in range": counted & ~rec["in_range"],
              "an agent in range": counted & rec["in_range"],
              f"first {EARLY_STEPS} steps": counted & (rec["t"] < EARLY_STEPS)}
    out = {}
    for name, sel in groups.items():
        v, g = rec["value"][sel], ret[sel]
        corr = float(torch.corrcoef(torch.stack([v, g]))[0, 1]) if v.numel() > 1 else float("nan")
        out[name] = {"states": int(sel.sum()), "value": float(v.mean()),
                     "return_to_go": float(g.mean()), "corr": corr}
    return out


def main(argv: List[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ace", required=True, help="the ACE run whose network values the states")
    p.add_argument("runs", nargs="+", help="the runs whose greedy policies play (SMAX)")
    add_test_play_args(p, "battles")
    args = p.parse_args(argv)
    from acegnn.run import restore

    cfg, _, task, ace = restore(args.ace)
    try:
        if not hasattr(ace, "decide"):
            raise SystemExit(f"{args.ace}: an ACE-DQN run is needed (algo.name={cfg.algo.name})")
        gamma = cfg.algo.gamma
        out = []
        for run in args.runs:
            rec = play(ace, task, run, args.episodes, args.seed)
            out.append({"run": run, "won": float(rec["won"]), "groups": summary(rec, gamma)})
    finally:
        task.close()
    print(f"values by {args.ace} (gamma {gamma}); {args.episodes} battles, seed {args.seed}")
    for r in out:
        print(f"{r['run']} plays: won {r['won']:.2f}")
        print(f"  {'states':<22}{'count':>7}{'value':>8}{'return':>8}{'corr':>7}")
        for name, s in r["groups"].items():
            print(f"  {name:<22}{s['states']:>7}{s['value']:>8.2f}{s['return_to_go']:>8.2f}"
                  f"{s['corr']:>7.2f}")
    write_json(args.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

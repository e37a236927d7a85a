#!/usr/bin/env python
"""Where a learned ACE policy on Spiders-and-Fly loses steps: the decision or the value.

For the checkpoint of an ACE run, two greedy policies are evaluated exactly (every
state tabulated, the fly's moves in expectation, every valid start weighted alike):

* ``sequential``: decision with rollout, as the agent acts (each spider maximises the
  value of its next SE-state);
* ``joint``: the argmax over all joint actions of the learned value of the final
  SE-state ``V(s, a_1, a_2)``.

If the two gaps agree, deciding one agent after another loses nothing and the steps gap
comes from the error of the learned value itself; if ``sequential`` is worse, the values
of the intermediate SE-states are what is off. ``disagree`` is the fraction of live
states where the two policies choose differently.

    python scripts/spiders_regret.py runs/bench/bench_5x5_seed0 [--json out.json]
"""
from __future__ import annotations

import argparse
import itertools
import json
import os

import torch

from acegnn.algos.ace_dqn import ACEDQN
from acegnn.algos.trainer import CHECKPOINT, load_checkpoint
from acegnn.config import from_dict, make_learner, make_task
from acegnn.envs.spiders_fly_task import live_states


@torch.no_grad()
def joint_argmax(net, graphs, n_agents: int) -> torch.Tensor:
    """``[num_agents]`` slots of the joint action with the largest final-SE-state value."""
    B = graphs.num_graphs
    avail = graphs["action"].available.view(B, n_agents, -1)
    num = avail.size(-1)
    fallback = avail.float().argmax(-1)  # some available slot per agent
    best = torch.full((B,), -float("inf"))
    arg = fallback.clone()
    for combo in itertools.product(range(num), repeat=n_agents):
        acts = torch.tensor(combo).expand(B, n_agents)
        ok = avail.gather(-1, acts.unsqueeze(-1)).squeeze(-1).all(-1)
        ro = net.rollout(graphs, actions=torch.where(ok[:, None], acts, fallback).reshape(-1),
                         values="chosen", check=False)
        v = ro.chosen_value.view(B, n_agents)[:, -1]  # V after the last agent's action
        better = ok & (v > best)
        best = torch.where(better, v, best)
        arg[better] = acts[better]
    return arg.reshape(-1)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="run directory (or checkpoint file) of an ACE run")
    p.add_argument("--json", help="write the result to this file")
    ns = p.parse_args(argv)
    path = ns.run if ns.run.endswith(".pt") else os.path.join(ns.run, CHECKPOINT)
    state = load_checkpoint(path)
    cfg = from_dict(state["config"])
    task = make_task(cfg)
    learner = make_learner(cfg, task)
    if not isinstance(learner, ACEDQN) or not hasattr(task, "exact_evaluate"):
        raise SystemExit(f"{path}: needs an ACE run on Spiders-and-Fly "
                         f"(got {cfg.algo.name} on {cfg.env.name})")
    learner.load_state_dict(state["learner"])
    seq = lambda g: learner.act(g, 0.0)  # noqa: E731
    joint = lambda g: joint_argmax(learner.net, g, task.n_agents)  # noqa: E731
    out = {"checkpoint": path, "samples": state["samples"]}
    for name, act in (("sequential", seq), ("joint", joint)):
        r = task.exact_evaluate(act)
        out[f"{name}_steps_gap"] = r["exact_steps_gap"]
        out[f"{name}_success_rate"] = r["exact_success_rate"]
    a, b = task.policy_table(seq), task.policy_table(joint)
    out["disagree"] = float((a != b)[live_states(task.grid_size)].float().mean())
    print(json.dumps(out))
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()

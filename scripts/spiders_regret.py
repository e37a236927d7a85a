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

Then the anatomy of the sequential policy's gap (:func:`anatomy`): how many of the
states it visits it decides worse than the oracle, how much of the gap each share
carries, and how far its learned values are from the exact optimum of the return it
fits, next to the optimum's own margin between the best and second-best joint action.

    python scripts/spiders_regret.py runs/bench/bench_5x5_seed0 [--json out.json]
"""
from __future__ import annotations

import argparse
import itertools
import json

import torch

from acegnn.algos.ace_dqn import ACEDQN
from acegnn.nn import Forced
from acegnn.algos.checkpoint import checkpoint_path, load_checkpoint
from acegnn.config import from_dict
from acegnn.run import make_learner, make_task
from acegnn.envs.spiders_fly import (SpidersFlyTask, cell_coords, gap_anatomy, live_states,
                                     oracle_solution)
from acegnn.envs.spiders_fly.oracle import optimal_discounted_q


@torch.no_grad()
def final_values(net, graphs, n_agents: int) -> torch.Tensor:
    """``[num_graphs, A ** n_agents]`` learned value of the last SE-state
    ``V(s, a_1, ..., a_n)`` for every joint action (index ``a_1 * A + a_2 ...``), ``-inf``
    where an agent's action is unavailable."""
    B = graphs.num_graphs
    avail = graphs["action"].available.view(B, n_agents, -1)
    num = avail.size(-1)
    fallback = avail.float().argmax(-1)  # some available slot per agent
    out = []
    for combo in itertools.product(range(num), repeat=n_agents):
        acts = torch.tensor(combo).expand(B, n_agents)
        ok = avail.gather(-1, acts.unsqueeze(-1)).squeeze(-1).all(-1)
        ro = net.rollout(graphs, selector=Forced(torch.where(ok[:, None], acts, fallback).reshape(-1)),
                         values="chosen", check=False)
        v = ro.chosen_value.view(B, n_agents)[:, -1]  # V after the last agent's action
        out.append(torch.where(ok, v, torch.full_like(v, -float("inf"))))
    return torch.stack(out, dim=1)


def joint_argmax(net, graphs, n_agents: int) -> torch.Tensor:
    """``[num_agents]`` slots of the joint action with the largest final-SE-state value."""
    v = final_values(net, graphs, n_agents)
    num = graphs["action"].available.view(graphs.num_graphs, n_agents, -1).size(-1)
    best = v.argmax(1)  # first maximum: the lowest joint index among ties
    slots = [(best // num ** (n_agents - 1 - k)) % num for k in range(n_agents)]
    return torch.stack(slots, dim=1).reshape(-1)


def anatomy(task, learner, table: torch.Tensor, gamma_se: float) -> dict:
    """Where the steps gap of a policy table comes from, and how precise the value is.

    Regret: :func:`~acegnn.envs.spiders_fly.analysis.gap_anatomy` over episodes of
    ``10 x time_limit`` steps. Value precision: over the visited states and all their
    joint actions, the learned last-SE-state value against the exact optimum of the
    return it fits (capture reward, ``gamma_se`` per step); ``centred`` removes each
    state's mean first, the part that decides actions, to be compared with the optimum's
    margin between its best and second-best joint action.
    """
    n = task.grid_size
    c = n * n
    horizon = 10 * task.time_limit  # long enough that the gap splits exactly
    out, visited = gap_anatomy(oracle_solution(n), table, horizon)
    rows = visited.view(-1).nonzero().view(-1)
    cells = torch.cartesian_prod(torch.arange(c), torch.arange(c), torch.arange(c))[rows]
    learned = torch.cat([final_values(learner.net, task.graphs_at(cell_coords(part, n)),
                                      task.n_agents) for part in cells.split(8192)])
    exact = optimal_discounted_q(n, gamma_se).view(25, -1)[:, rows].t().float()  # [S, 25]
    ok = torch.isfinite(exact)
    err = (learned - exact)[ok]
    mean = lambda x: torch.where(ok, x, 0).sum(1, keepdim=True) / ok.sum(1, keepdim=True)  # noqa: E731
    centred = ((learned - mean(learned)) - (exact - mean(exact)))[ok]
    top2 = exact.topk(2, dim=1).values
    margin = top2[:, 0] - top2[:, 1]
    out.update(se_discount=gamma_se, value_bias=float(err.mean()),
               value_rmse=float(err.pow(2).mean().sqrt()),
               value_centred_rmse=float(centred.pow(2).mean().sqrt()),
               optimum_margin_median=float(margin[margin > 1e-9].median())
               if bool((margin > 1e-9).any()) else float("nan"))
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="run directory (or checkpoint file) of an ACE run")
    p.add_argument("--json", help="write the result to this file")
    ns = p.parse_args(argv)
    path = checkpoint_path(ns.run)
    state = load_checkpoint(path)
    cfg = from_dict(state["config"])
    task = make_task(cfg)
    learner = make_learner(cfg, task)
    if not isinstance(learner, ACEDQN) or not isinstance(task, SpidersFlyTask):
        raise SystemExit(f"{path}: needs an ACE run on Spiders-and-Fly "
                         f"(got {cfg.algo.name} on {cfg.env.name})")
    learner.load_state_dict(state["learner"])
    seq = lambda g: learner.act(g, 0.0)  # noqa: E731
    joint = lambda g: joint_argmax(learner.net, g, task.n_agents)  # noqa: E731
    out = {"checkpoint": path, "samples": state["samples"]}
    for name, act in (("sequential", seq), ("joint", joint)):
        r = task.exact_evaluate(act)
        out[f"{name}_steps_gap"] = r.exact_steps_gap
        out[f"{name}_success_rate"] = r.exact_success_rate
    a, b = task.policy_table(seq), task.policy_table(joint)
    out["disagree"] = float((a != b)[live_states(task.grid_size)].float().mean())
    gamma_se = cfg.algo.gamma ** (task.n_agents if cfg.algo.intermediate_discount else 1)
    out.update(anatomy(task, learner, a, gamma_se))
    print(json.dumps(out))
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()

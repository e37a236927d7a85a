"""Can ACE's value network express what a move does relative to the enemies? A
supervised check on SMAX states: regress V(s, a_1 = move k), the value of the first
agent's SE-state after each of its four moves, on the change of that agent's distance to
its nearest live enemy after a step in direction k (a function of the units' offsets),
and report the held-out error over the target's variance, overall and between the four
moves of a state (the part a decision reads), for each value-encoder depth.

    python scripts/move_value_fit.py --scenario 5m_vs_6m --steps 1000 --value-layers 1 2

The states come from random play (uniform over the available actions), those where the
first agent and an enemy are alive. A small error says the network can represent such a
value; it says nothing of whether training finds it.
"""
from __future__ import annotations

import argparse
import json
from typing import List, Tuple

import torch
from torch import Tensor

from acegnn.envs.smac.units import DISTANCE_SCALE

#: The four move slots of SMAX (north, east, south, west) as steps, in units of 9 (the
#: graph's distance scale); any fixed directions serve, the network learns the map.
STEPS = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, -1.0], [-1.0, 0.0]]) * 0.1


def random_states(scenario: str, envs: int, steps: int, seed: int) -> Tuple[Tensor, Tensor, object]:
    """``(units [S, U, 7], avail [S, n_allies, slots], spec)`` of SMAX battles under
    uniform random play, the states where agent 0 and an enemy are alive."""
    from acegnn.envs.smac.smax import SMAXTask

    task = SMAXTask(scenario, envs, seed=seed)
    g = torch.Generator().manual_seed(seed)
    units, avail = [], []
    try:
        for _ in range(steps):
            obs = task.observe()
            flat = obs["avail"].reshape(-1, obs["avail"].size(-1)).float()
            units.append(obs["units"].clone())
            avail.append(obs["avail"].clone())
            task.step(torch.multinomial(flat, 1, generator=g).view(envs, -1))
        spec = task.spec
    finally:
        task.close()
    units, avail = torch.cat(units), torch.cat(avail)
    keep = (units[:, 0, 6] > 0) & (units[:, spec.n_allies:, 6] > 0).any(1)
    return units[keep], avail[keep], spec


def distance_change(units: Tensor, n_allies: int) -> Tensor:
    """``[S, 4]``: for each state, the change of agent 0's distance (units of 9) to its
    nearest live enemy after each step of :data:`STEPS`."""
    out = []
    for u in units:
        live = u[n_allies:, 6] > 0
        offsets = (u[n_allies:, 1:3][live] - u[0, 1:3]) / DISTANCE_SCALE
        before = offsets.norm(dim=1).min()
        out.append(torch.stack([(offsets - s).norm(dim=1).min() - before for s in STEPS]))
    return torch.stack(out)


def move_values(net, units: Tensor, avail: Tensor, spec) -> Tensor:
    """``[S, 4]``: V of agent 0's SE-state after each of its moves (slots 0-3)."""
    from acegnn.envs.smac.units import battle_graphs

    graphs = battle_graphs(units, avail, spec)
    ro = net.rollout(graphs, max_steps=1)
    idx = ro.encoded.index
    first = idx.action_agent == idx.agent_ptr[idx.action_batch]  # agent 0's rows
    rows = first & (idx.action_slot < 4)
    values = ro.candidate_values[rows].view(units.size(0), 4)
    if not bool(torch.isfinite(values).all()):
        raise ValueError("a state where agent 0 cannot make every move: its move values are NaN")
    return values


def fit(value_layers: int, data, steps: int, seed: int, hidden: int = 256) -> List[dict]:
    """Train a fresh network (the recommended config's pooling, one layer per encoder but
    the value encoder's ``value_layers``) by Adam on the regression; the held-out errors
    every 200 steps."""
    from acegnn.envs.smac.units import battle_schema
    from acegnn.nn import ACENetwork

    units, avail, spec, target, train, test = data
    torch.manual_seed(seed)
    net = ACENetwork(battle_schema(), hidden=hidden, pool="mean_max", layers=1,
                     value_layers=value_layers)
    opt = torch.optim.Adam(net.parameters(), lr=3e-4)
    g = torch.Generator().manual_seed(seed)
    y = target[test]
    yc = y - y.mean(1, keepdim=True)
    rows = []
    for step in range(1, steps + 1):
        i = train[torch.randint(len(train), (64,), generator=g)]
        loss = (move_values(net, units[i], avail[i], spec) - target[i]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 200 == 0 or step == steps:
            with torch.no_grad():
                p = move_values(net, units[test], avail[test], spec)
            pc = p - p.mean(1, keepdim=True)
            rows.append({"value_layers": value_layers, "step": step,
                         "error": float((p - y).pow(2).mean() / y.var()),
                         "error_between_moves": float((pc - yc).pow(2).mean() / yc.pow(2).mean())})
    return rows


def main(argv: List[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", default="5m_vs_6m")
    p.add_argument("--envs", type=int, default=32)
    p.add_argument("--play-steps", type=int, default=40, help="random-play steps per battle")
    p.add_argument("--steps", type=int, default=1000, help="Adam steps of batch 64")
    p.add_argument("--test", type=int, default=400, help="held-out states")
    p.add_argument("--value-layers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write the rows to this file")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    units, avail, spec = random_states(args.scenario, args.envs, args.play_steps, args.seed)
    if len(units) <= args.test:
        raise SystemExit(f"{len(units)} states, not more than --test {args.test}: play longer")
    target = distance_change(units, spec.n_allies)
    perm = torch.randperm(len(units), generator=torch.Generator().manual_seed(args.seed))
    data = (units, avail, spec, target, perm[args.test:], perm[:args.test])
    print(f"{args.scenario}: {len(units)} states ({args.test} held out)")
    rows = []
    for vl in args.value_layers:
        for r in fit(vl, data, args.steps, args.seed, args.hidden):
            print(f"value_layers={vl} step {r['step']}: error/variance {r['error']:.3f}, "
                  f"between moves {r['error_between_moves']:.3f}", flush=True)
            rows.append(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

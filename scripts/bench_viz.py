#!/usr/bin/env python
"""Time the figures of acegnn.viz.draw (Agg backend, each including fig.canvas.draw())
and the size and time of a 20-frame GIF.

Cases: one Spiders-and-Fly 5x5 state (3 units, 6 edges, 2 agents) and a random
SMAC-like 27-vs-30 state (57 units, all 3,192 ordered pairs as edges, 27 agents with 61
candidates each; `acegnn.envs.synthetic`). Networks are untrained (hidden 16): drawing
time does not depend on the weights. Prints JSON: the median seconds of `--repeats`
runs (after one warm-up) of draw_state with every edge, draw_decision and draw_frame
(at most 500 edges, the default), draw_candidates (top 5 per agent, the default); and
per case a 20-frame GIF (fps 2, dpi 80): seconds to write, bytes, pixel size.

    python scripts/bench_viz.py
    python scripts/bench_viz.py --repeats 3 --gif-frames 10 --cases smac --json out.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time

import matplotlib

matplotlib.use("Agg")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

from acegnn.viz.draw import animate, draw_candidates, draw_decision, draw_frame, draw_state  # noqa: E402
from acegnn.viz.frame import frames  # noqa: E402

CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs",
                      "spiders_fly_5x5.yaml")


def spiders_episode(steps: int):
    """``steps`` greedy steps of one Spiders-and-Fly environment (episodes restart)."""
    from acegnn.config import load_config
    from acegnn.run import make_learner, make_task

    cfg = load_config(CONFIG, ["model.hidden=16", "env.num_envs=1"])
    task = make_task(cfg)
    net = make_learner(cfg, task).net
    out = []
    for t in range(steps):
        g = task.graphs(task.observe())
        with torch.no_grad():
            ro = net.rollout(g)
        (f,) = frames(task.schema, g, ro, task.unit_positions(g), task.scene(), task.noop_action)
        tr = task.step(ro.actions.view(1, task.n_agents))
        out.append(dataclasses.replace(f, step=t, reward=float(tr.reward[0])))
    task.close()
    return out


def smac_states(steps: int, allies: int = 27, enemies: int = 30):
    """Frames of ``steps`` random 27-vs-30 states, epsilon-greedy (0.3) decisions."""
    from acegnn.envs.synthetic import random_state, smac_like_schema
    from acegnn.graph import collate
    from acegnn.nn import ACENetwork, EpsilonGreedy

    schema = smac_like_schema()
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    net = ACENetwork(schema, hidden=16)
    b = collate([random_state(schema, allies, enemies, generator=gen) for _ in range(steps)])
    with torch.no_grad():
        ro = net.rollout(b, selector=EpsilonGreedy(0.3), generator=gen)
    return [dataclasses.replace(f, step=t) for t, f in enumerate(frames(schema, b, ro))]


def timed(fn, repeats: int) -> float:
    fn().fig.canvas.draw()  # warm-up: fonts, caches
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fig = fn().fig
        fig.canvas.draw()
        times.append(time.perf_counter() - t)
    return round(statistics.median(times), 4)


def bench(name: str, fs, repeats: int, gif_frames: int, tmp: str) -> dict:
    from PIL import Image

    f = fs[0]
    out = {"units": f.num_units, "edges": int(f.edges.shape[1]), "agents": f.num_agents,
           "candidates": int(f.cand_value.size)}
    out["draw_state_all_edges_s"] = timed(lambda: draw_state(f, max_edges=None), repeats)
    out["draw_decision_s"] = timed(lambda: draw_decision(f), repeats)
    out["draw_candidates_s"] = timed(lambda: draw_candidates(f), repeats)
    out["decision_plus_candidates_s"] = round(out["draw_decision_s"] + out["draw_candidates_s"], 4)
    out["draw_frame_s"] = timed(lambda: draw_frame(f), repeats)
    path = os.path.join(tmp, f"{name}.gif")
    t = time.perf_counter()
    animate(fs[:gif_frames], path, fps=2, dpi=80)
    with Image.open(path) as im:
        n, size = im.n_frames, im.size
    out["gif"] = {"frames": n, "seconds": round(time.perf_counter() - t, 3),
                  "bytes": os.path.getsize(path), "pixels": list(size)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--gif-frames", type=int, default=20)
    p.add_argument("--cases", nargs="+", choices=("spiders", "smac"), default=["spiders", "smac"],
                   help="spiders: Spiders-and-Fly 5x5; smac: a 27-vs-30 SMAC-like state")
    p.add_argument("--json", help="also write the result to this file")
    args = p.parse_args()
    torch.set_num_threads(1)
    res = {"matplotlib": matplotlib.__version__, "backend": matplotlib.get_backend(),
           "repeats": args.repeats}
    with tempfile.TemporaryDirectory() as tmp:
        if "spiders" in args.cases:
            res["spiders_fly_5x5"] = bench("spiders", spiders_episode(args.gif_frames),
                                           args.repeats, args.gif_frames, tmp)
        if "smac" in args.cases:
            res["smac_27v30"] = bench("smac", smac_states(args.gif_frames), args.repeats,
                                      args.gif_frames, tmp)
    text = json.dumps(res, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()

"""Time the value encoder's pooling of whole SE-states, forward and backward.

``ValueHead.pooled_value`` on a table of unit rows ``[graphs x units, hidden]`` (a
ReLU's output, some units dead), then the backward pass of the values' sum: what an
update does once per agent for the online values of the given actions. Prints the
median time in milliseconds, by the process's CPU time on one thread. Compare two
commits by running it from each checkout (``PYTHONPATH=CHECKOUT``), alternating.

    python scripts/bench_pooling.py                            # SMAX 5m_vs_6m's table
    python scripts/bench_pooling.py --graphs 320 --units 10    # 2s3z's
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from acegnn.graph.index import UnitIndex
from acegnn.nn.value_head import ValueHead


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graphs", type=int, default=320, help="states in the batch")
    p.add_argument("--units", type=int, default=11, help="units per state")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--pool", default="mean_max")
    p.add_argument("--alive", type=float, default=0.85, help="share of the units alive")
    p.add_argument("--repeats", type=int, default=40)
    ns = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    B, n, H = ns.graphs, ns.units, ns.hidden
    head = ValueHead(H, ns.pool)
    none = torch.zeros(0, dtype=torch.long)
    index = UnitIndex(B, B * n, torch.arange(B).repeat_interleave(n), torch.full((B,), n),
                      torch.arange(0, B * n + 1, n), {}, *[none] * 10,
                      unit_alive=torch.rand(B * n) < ns.alive)
    rows = torch.randn(B * n, H).relu()
    times = []
    for _ in range(ns.repeats):
        h = rows.clone().requires_grad_(True)
        start = time.process_time()
        head.pooled_value(h, index).sum().backward()
        times.append(time.process_time() - start)
    out = {**vars(ns), "pooled_value_ms": 1e3 * statistics.median(times)}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()

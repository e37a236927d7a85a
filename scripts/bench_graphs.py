#!/usr/bin/env python
"""Time building a Spiders-and-Fly batch, indexing it and flattening it for the baselines,
with the shared :class:`~acegnn.graph.dense.DenseLayout` (``layout``) and from scratch
(``scratch``: the batch's index tensors tiled anew,
:func:`~acegnn.graph.index.compute_unit_index`, flat inputs without the cached plan). Both are timed alternately in one process; the
best of ``--repeats`` rounds is printed, in milliseconds per batch.

    python scripts/bench_graphs.py --sizes 8 256 --json graphs.json
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from acegnn.envs.spiders_fly import valid_starts
from acegnn.envs.spiders_fly.task import _layout, spiders_fly_graphs, spiders_fly_schema
from acegnn.graph.flat import flat_inputs
from acegnn.graph.index import compute_unit_index, unit_index
from acegnn.utils.runs import write_json


def best_ms(fn, calls: int, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e3)
    return best


def scratch_graphs(positions, grid: int):
    """The same batch with the layout's tiling dropped first, so its index tensors are
    built anew as for any one-off batch."""
    layout = _layout(None, "scalar")

    def build():
        layout._tiles.clear()
        return spiders_fly_graphs(positions, grid)
    return build


def main(argv=None) -> list:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grid", type=int, default=7)
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 256])
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", help="write the records to this file")
    ns = p.parse_args(argv)
    torch.set_num_threads(1)
    schema = spiders_fly_schema(ns.grid)
    starts = valid_starts(ns.grid)
    records = []
    for B in ns.sizes:
        pos = starts[torch.arange(B) % len(starts)]
        cached = spiders_fly_graphs(pos, ns.grid)
        plain = spiders_fly_graphs(pos, ns.grid)
        del plain.__dict__["_dense_layout"]  # a batch like any other: no shared indexing
        build_scratch = scratch_graphs(pos, ns.grid)
        t = lambda fn: best_ms(fn, ns.calls, ns.repeats)  # noqa: E731
        rec = {"grid": ns.grid, "batch": B,
               "index_layout_ms": t(lambda: unit_index(schema, cached, check=False)),
               "index_scratch_ms": t(lambda: compute_unit_index(schema, cached, check=False)),
               "flat_layout_ms": t(lambda: flat_inputs(schema, cached, check=False)),
               "flat_scratch_ms": t(lambda: flat_inputs(schema, plain, check=False)),
               "build_layout_ms": t(lambda: spiders_fly_graphs(pos, ns.grid)),
               "build_scratch_ms": t(build_scratch)}  # last: it drops the layout's tiling
        records.append(rec)
        print(json.dumps(rec))
    write_json(ns.json, records)
    return records


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Which weights of a trained network are zero: per checkpoint, the fraction of all
parameter entries with ``|w| <= tol`` (``zero_weights`` of ``train.csv``), and per weight
matrix the fraction of its entries that are zero and of its output units that are *off*
(the unit's row and bias all zero: it outputs 0 whatever its input, and a ReLU after it
passes no gradient back, so it stays off).

With RMSprop or Adam, L2 weight decay and a small ``eps``, a weight that the loss leaves
without gradient shrinks by about the learning rate per update (docs/optimizer.md).

    python scripts/zero_weights.py runs/smax/ace_3m_seed0 runs/grf/ace_academy_3_vs_1_with_keeper_seed0
    python scripts/zero_weights.py RUN --json zero.json
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Dict

import torch

from acegnn.algos.base import ZERO_TOL


def zero_report(state: Dict[str, torch.Tensor], tol: float = ZERO_TOL) -> Dict:
    """``{"zero_weights": fraction of all entries, "matrices": {name: {...}}}`` of a
    network's state dict; a matrix's ``units_off`` counts rows whose bias (when there is
    one, ``<name>.bias``) is zero too."""
    total = zeros = 0
    matrices = {}
    for name, w in state.items():
        if not w.is_floating_point():
            continue
        zero = w.abs() <= tol
        total += w.numel()
        zeros += int(zero.sum())
        if w.dim() == 2 and name.endswith("weight"):
            rows = zero.all(dim=1)
            bias = state.get(name[: -len("weight")] + "bias")
            if bias is not None and bias.shape == rows.shape:
                rows &= bias.abs() <= tol
            matrices[name[: -len(".weight")]] = {
                "shape": list(w.shape), "zero": zero.float().mean().item(),
                "units_off": rows.float().mean().item()}
    return {"zero_weights": zeros / max(total, 1), "parameters": total, "matrices": matrices}


def load_net(path: str) -> Dict[str, torch.Tensor]:
    if os.path.isdir(path):
        path = os.path.join(path, "checkpoint.pt")
    if not os.path.exists(path):
        raise SystemExit(f"{path}: no checkpoint there")
    return torch.load(path, map_location="cpu", weights_only=True)["learner"]["net"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="run directories or checkpoint files")
    p.add_argument("--tol", type=float, default=ZERO_TOL)
    p.add_argument("--json", help="write the reports here")
    args = p.parse_args()
    reports = {}
    for run in args.runs:
        rep = reports[run] = zero_report(load_net(run), args.tol)
        print(f"{run}: {rep['zero_weights']:.3f} of {rep['parameters']:,} parameters zero")
        for name, m in rep["matrices"].items():
            shape = "x".join(map(str, m["shape"]))
            print(f"  {name:<60} {shape:>11}  zero {m['zero']:.2f}  units off {m['units_off']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Training speed with and without ``train.overlap`` (collection overlapped with learning).

Trains ``CONFIG`` as new runs of ``--samples`` environment steps with no evaluation,
``train.overlap=false`` and ``true`` in turn (``--repeats`` times, so that both see the
same load), and reads each round of their ``train.csv``: the round's new environment
steps over its ``collect_s + learn_s`` (an overlapped round's collection is inside
``learn_s``), leaving out the first ``--skip`` rounds (compilation, the replay filling).
Prints each setting's rounds, the median rate and the ratio of the medians; ``--json``
writes them. Each run has the training's own threads (one for the learner; with
overlap a second collects) and the config's engine processes, so the gain depends on
the cores left beside it: run it on a quiet machine.

    python scripts/bench_overlap.py configs/grf_3_vs_1_with_keeper_recommended.yaml
    python scripts/bench_overlap.py configs/smax_5m_vs_6m_recommended.yaml --samples 6000 \\
        -- env.scenario=3m
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from typing import Dict, List

from acegnn.utils.io import write_text
from acegnn.utils.runs import acegnn, read_csv


def round_rates(rows: List[Dict[str, float]], skip: int) -> List[float]:
    """Environment steps per second of each round of a ``train.csv`` after the first
    ``skip``: the samples it added over its ``collect_s + learn_s``."""
    rates = []
    for i in range(max(skip, 1), len(rows)):
        spent = rows[i]["collect_s"] + rows[i]["learn_s"]
        added = rows[i]["samples"] - rows[i - 1]["samples"]
        if spent > 0 and added > 0:
            rates.append(added / spent)
    return rates


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config")
    p.add_argument("--samples", type=int, default=12000, help="environment steps a run")
    p.add_argument("--repeats", type=int, default=1, help="runs of each setting")
    p.add_argument("--skip", type=int, default=2, help="first rounds of a run left out")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("overrides", nargs="*", help="config overrides of every run, after --")
    args = p.parse_intermixed_args(argv)
    if not os.path.exists(args.config):
        p.error(f"no config file {args.config}")
    rates: Dict[str, List[float]] = {"false": [], "true": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for on in ("false", "true"):
                name = f"overlap_{on}_{r}"
                acegnn(["train", args.config, f"train.total_samples={args.samples}",
                        f"train.eval_every={10 * args.samples}", "train.progress=false",
                        f"train.checkpoint_every={10 * args.samples}", f"train.overlap={on}",
                        f"run.dir={tmp}", f"run.name={name}", *args.overrides])
                got = round_rates(read_csv(os.path.join(tmp, name, "train.csv")), args.skip)
                print(f"overlap={on} run {r}: " + " ".join(f"{x:.1f}" for x in got)
                      + " env steps/s a round", flush=True)
                rates[on].extend(got)
    if not rates["false"] or not rates["true"]:
        print("no round to measure: raise --samples or lower --skip", file=sys.stderr)
        return 1
    off, on = statistics.median(rates["false"]), statistics.median(rates["true"])
    print(f"median env steps/s of training: overlap off {off:.1f} ({len(rates['false'])} "
          f"rounds), on {on:.1f} ({len(rates['true'])} rounds); on/off {on / off:.2f}")
    if args.json:
        write_text(args.json, json.dumps({"config": args.config, "overrides": args.overrides,
                                          "rates": rates, "median_off": off,
                                          "median_on": on}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Run logs: TensorBoard events and one CSV per namespace (``train.csv``, ``eval.csv``)."""
from __future__ import annotations

import csv
import os
from typing import Dict, Optional

from torch.utils.tensorboard import SummaryWriter


class Logger:
    """Writes ``namespace/key`` scalars to TensorBoard and ``<namespace>.csv``.

    Args:
        run_dir (str): The run directory.
        resume_step (int, optional): When resuming, rows and events after this step are
            dropped so that the logs equal those of an uninterrupted run.
    """

    def __init__(self, run_dir: str, resume_step: Optional[int] = None) -> None:
        self.run_dir = run_dir
        # the checkpoint at resume_step was saved after that step's logs: keep them
        purge = None if resume_step is None else resume_step + 1
        self.tb = SummaryWriter(os.path.join(run_dir, "tb"), purge_step=purge)
        self._fields: Dict[str, list] = {}
        if resume_step is not None:
            for name in os.listdir(run_dir):
                if name.endswith(".csv"):
                    self._truncate(os.path.join(run_dir, name), resume_step)

    @staticmethod
    def _truncate(path: str, step: int) -> None:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
            fields = list(rows[0]) if rows else None
        if fields is None:
            return
        keep = [r for r in rows if int(r["samples"]) <= step]
        with open(path + ".tmp", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(keep)
        os.replace(path + ".tmp", path)

    def log(self, namespace: str, step: int, metrics: Dict[str, float]) -> None:
        for k, v in metrics.items():
            self.tb.add_scalar(f"{namespace}/{k}", v, step)
        path = os.path.join(self.run_dir, f"{namespace}.csv")
        row = {"samples": step, **metrics}
        if namespace not in self._fields:
            self._fields[namespace] = []
            if os.path.exists(path) and os.path.getsize(path) > 0:
                with open(path, newline="") as f:
                    self._fields[namespace] = next(csv.reader(f))
        fields = self._fields[namespace]
        new = [k for k in row if k not in fields]
        if new or not os.path.exists(path):
            # a key seen for the first time (e.g. td_loss once learning starts): widen the
            # header and rewrite the earlier rows with empty cells
            rows = []
            if os.path.exists(path):
                with open(path, newline="") as f:
                    rows = list(csv.DictReader(f))
            fields += new
            with open(path + ".tmp", "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=fields)
                w.writeheader()
                w.writerows(rows)
            os.replace(path + ".tmp", path)
        with open(path, "a", newline="") as f:
            csv.DictWriter(f, fieldnames=fields).writerow({k: row.get(k, "") for k in fields})

    def close(self) -> None:
        self.tb.flush()
        self.tb.close()

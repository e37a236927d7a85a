"""Checkpoints of a run: file names, safe loading and atomic saving.

A checkpoint is a plain dict saved with :func:`torch.save` and read back with
``weights_only=True``; what it holds is the trainer's business
(:meth:`acegnn.algos.trainer.Trainer.state_dict`). Whether a checkpoint may be resumed
with a given config is decided where configs are known (:mod:`acegnn.config`).
"""
from __future__ import annotations

import os

import torch

from acegnn.utils.io import atomic_write
from acegnn.utils.runs import CHECKPOINT, SUCCESS_CHECKPOINT  # noqa: F401  (the run directory's files)

CHECKPOINT_VERSION = 1


def checkpoint_path(run: str) -> str:
    """The checkpoint of a run directory, or ``run`` itself if it names a ``.pt`` file."""
    return run if run.endswith(".pt") else os.path.join(run, CHECKPOINT)


def save_checkpoint(path: str, state: dict) -> None:
    """Write ``state`` to ``path`` atomically: a kill leaves the old file or the new one."""
    atomic_write(path, lambda tmp: torch.save(state, tmp))


def load_checkpoint(path: str) -> dict:
    """Load a checkpoint safely (``weights_only=True``) with a clear error."""
    if not os.path.exists(path):
        raise ValueError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # corrupt file or not a checkpoint
        raise ValueError(f"cannot read the checkpoint {path}: {e}") from None
    if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"{path} is not an acegnn checkpoint of version {CHECKPOINT_VERSION}")
    return state

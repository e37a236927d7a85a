"""Counts the operators a piece of code dispatches, and how many of them make the host wait
for the device.

On a GPU a small update is bound by its launches and its waits, not its arithmetic: every
operator that is not a view launches a kernel, and every operator whose result the host
must read (``.item()``, ``bool(t)``, ``nonzero``, boolean indexing, ``unique``) stops the
host until the device has caught up. Both can be counted on a CPU, where no GPU is at hand
(``scripts/bench_update.py --count-ops``). Where PyTorch picks a path by device (the
optimiser's ``foreach`` loop is the GPU's default), the counts are the CPU path's.

    with OpCounter() as ops:
        learner.update(*batch)
    ops.summary()  # {"dispatched": ..., "kernels": ..., "syncs": ..., "sync_ops": {...}}
"""
from __future__ import annotations

from collections import Counter
from typing import Dict

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: operators whose output size or value the host reads from the device's data
SYNC_OPS = frozenset({
    "aten._local_scalar_dense",  # .item(), bool(t), int(t)
    "aten.nonzero", "aten.masked_select", "aten.repeat_interleave",
    "aten._unique", "aten._unique2", "aten.unique_dim", "aten.unique_consecutive",
    "aten.bincount",  # its length is the largest index: read before the launch
    "aten.equal", "aten.is_nonzero",
})
#: operators that sync when an index is a boolean mask (turned into positions first)
MASK_INDEX_OPS = frozenset({"aten.index", "aten.index_put", "aten.index_put_"})


def _has_mask(indices) -> bool:
    return any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)
               for t in (indices or ()))


class OpCounter(TorchDispatchMode):
    """Counts the operators dispatched while it is entered, after autograd: the forward
    pass, the backward pass and the optimiser alike.

    Attributes:
        ops: calls per operator (``aten.add`` and so on).
        views: calls of operators that only make a view (no kernel).
        syncs: calls per operator that makes the host wait for the device.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()
        self.syncs: Counter = Counter()
        self.views = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        self.ops[name] += 1
        if func.is_view:
            self.views += 1
        elif name in SYNC_OPS or (name in MASK_INDEX_OPS and _has_mask(args[1])):
            self.syncs[name] += 1
        return func(*args, **(kwargs or {}))

    def summary(self) -> Dict[str, object]:
        """``dispatched`` (every call), ``kernels`` (those that are not views), ``syncs``
        and the syncing calls per operator (``sync_ops``)."""
        dispatched = sum(self.ops.values())
        return {"dispatched": dispatched, "kernels": dispatched - self.views,
                "syncs": sum(self.syncs.values()), "sync_ops": dict(self.syncs.most_common())}

"""The phases of a training step (``sample``, ``graphs``, ``online_values``, ``targets``,
``aux_loss``, ``backward``, ``optimizer``), marked once for two readers: ``torch.profiler``
sees each as a ``phase/NAME`` range, and a :class:`PhaseClock` adds up their times by a
plain clock. The profiler slows the small operators it records (on football's step,
tens of times), so its phase shares are not the untraced step's; the clock's are
(``scripts/bench_update.py --phases``)."""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, Optional

from torch.profiler import record_function

_active: Optional["PhaseClock"] = None


class PhaseClock:
    """Adds up the time spent in each :func:`phase` while it is entered.

    Args:
        clock: the clock read at each phase's start and end (default:
            :func:`time.perf_counter`; :func:`time.process_time` for CPU time).
        wait: called before each reading, e.g. ``torch.cuda.synchronize`` so that a GPU's
            queued work is counted in its phase (default: nothing).

    A phase inside another counts in both (``totals`` are inclusive, as the profiler's
    ``cpu_time_total``).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 wait: Callable[[], None] = lambda: None) -> None:
        self.clock, self.wait = clock, wait
        self.totals: Dict[str, float] = defaultdict(float)

    def __enter__(self) -> "PhaseClock":
        global _active
        if _active is not None:
            raise RuntimeError("a PhaseClock is already counting; they do not nest")
        _active = self
        return self

    def __exit__(self, *exc) -> None:
        global _active
        _active = None

    def __repr__(self) -> str:
        return f"PhaseClock({dict(self.totals)})"


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Marks a phase of the step: a ``phase/NAME`` profiler range, and its time added to
    the :class:`PhaseClock` in use, if any."""
    with record_function(f"phase/{name}"):
        clock = _active
        if clock is None:
            yield
            return
        clock.wait()
        start = clock.clock()
        try:
            yield
        finally:
            clock.wait()
            clock.totals[name] += clock.clock() - start

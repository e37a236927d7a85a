"""The phases of a training step: a PhaseClock adds up each phase's time by its clock,
inclusive of the phases inside it; without one, a phase costs only its profiler range."""
import pytest
from torch.profiler import ProfilerActivity, profile

from acegnn.utils.phases import PhaseClock, phase


class FakeClock:
    """A clock that moves only when told: each phase's time is known exactly."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_clock_adds_up_each_phase_inclusive_of_the_phases_inside_it():
    t = FakeClock()
    waits = []
    with PhaseClock(t, wait=lambda: waits.append(t.now)) as clock:
        with phase("targets"):
            t.now += 2.0
            with phase("aux_loss"):
                t.now += 0.5
            t.now += 1.0
        t.now += 7.0  # outside every phase
        with phase("aux_loss"):
            t.now += 0.25
    assert dict(clock.totals) == {"targets": 3.5, "aux_loss": 0.75}
    assert waits == [0.0, 2.0, 2.5, 3.5, 10.5, 10.75]  # before each reading
    with phase("targets"):  # after the clock: nothing is added
        t.now += 100.0
    assert clock.totals["targets"] == 3.5


def test_a_phase_that_raises_is_counted_and_clocks_do_not_nest():
    t = FakeClock()
    with PhaseClock(t) as clock:
        with pytest.raises(ValueError, match="bad batch"):
            with phase("graphs"):
                t.now += 1.5
                raise ValueError("bad batch")
        with pytest.raises(RuntimeError, match="already counting"):
            with PhaseClock(t):
                pass
    assert clock.totals == {"graphs": 1.5}
    with PhaseClock(t) as again:  # the first one has left: a new one may count
        with phase("graphs"):
            t.now += 1.0
    assert again.totals == {"graphs": 1.0}


def test_the_profiler_sees_each_phase_as_a_range():
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with phase("sample"):
            pass
        with phase("sample"):
            pass
    counts = {e.key: e.count for e in prof.key_averages() if e.key.startswith("phase/")}
    assert counts == {"phase/sample": 2}

"""The idle decision of ``[sandbox] idle_stop``: a fake clock and samples, no engine."""

from __future__ import annotations

from sbx.domain.sandbox.idle import CPU_IDLE_FRACTION, IdleWatch, Sample

CORE_NS = 1_000_000_000  # one core for one second


def _quiet(at: float, cpu_ns: int, *, clients: int = 0,
           last_request: float | None = None) -> Sample:
    return Sample(at=at, clients=clients, last_request=last_request, cpu_ns=cpu_ns)


def _feed(watch: IdleWatch, samples: list[Sample]) -> list[bool]:
    return [watch.observe(s) for s in samples]


def test_a_quiet_sandbox_is_idle_exactly_when_the_period_has_passed() -> None:
    watch = IdleWatch(10)
    said = _feed(watch, [_quiet(1000 + t, 5_000 + t * 1000) for t in range(12)])
    assert said == [False] * 10 + [True, True]  # t=10 is 10 s after the first sample
    assert watch.idle_for(1011) == 11


def test_a_client_holds_it_awake_and_restarts_the_period_when_it_leaves() -> None:
    watch = IdleWatch(5)
    samples = [_quiet(t, 0, clients=1 if t < 20 else 0) for t in range(30)]
    said = _feed(watch, samples)
    assert not any(said[:25])  # attached until t=19
    assert said[25:] == [True] * 5  # from the first sample without it (it left after t=19)
    assert watch.active_at == 20


def test_an_egress_request_counts_from_its_own_time() -> None:
    watch = IdleWatch(10)
    # A request logged at 1005 (written while the sandbox was otherwise quiet).
    said = _feed(watch, [_quiet(1000 + t, 0, last_request=1005.0 if t >= 6 else None)
                         for t in range(20)])
    assert said.index(True) == 15  # 1005 + 10
    assert watch.active_at == 1005


def test_a_request_time_in_the_future_is_taken_as_now() -> None:
    watch = IdleWatch(3)
    said = _feed(watch, [_quiet(t, 0, last_request=10_000.0) for t in range(6)])
    assert not any(said)  # every sample sees "a request now": never idle


def test_cpu_above_the_threshold_is_activity_and_below_it_is_not() -> None:
    busy = int(CPU_IDLE_FRACTION * CORE_NS) + 1  # just over, per second
    calm = int(CPU_IDLE_FRACTION * CORE_NS) - 1
    watch = IdleWatch(4)
    cpu = 0
    said = []
    for t in range(12):
        cpu += busy if t == 6 else calm
        said.append(watch.observe(_quiet(t, cpu)))
    # idle at t=4 and 5; the busy second (t=6) restarts the period: idle again at t=10
    assert said == [False] * 4 + [True] * 2 + [False] * 4 + [True] * 2
    assert watch.active_at == 6


def test_what_cannot_be_seen_is_activity() -> None:
    watch = IdleWatch(2)
    samples = [_quiet(0, 100), _quiet(1, 100), Sample(2, 0, None, None),  # stats missing
               _quiet(3, 100), _quiet(4, 50),  # counter went back (a restart)
               _quiet(5, 50), _quiet(6, 50)]
    assert _feed(watch, samples) == [False, False, False, False, False, False, True]


def test_a_clock_going_back_restarts_the_period() -> None:
    watch = IdleWatch(3)
    said = _feed(watch, [_quiet(100, 0), _quiet(102, 0), _quiet(50, 0), _quiet(52, 0),
                         _quiet(53, 0)])
    assert said == [False, False, False, False, True]

"""Drill statistics: percentiles, phase bucketing, summaries and the longest write stall."""

from __future__ import annotations

from services.drill.stats import Sample, by_phase, longest_stall, percentile, phase_of, summarise


def test_percentile_nearest_rank() -> None:
    xs = [float(i) for i in range(1, 101)]
    assert percentile(xs, 50) == 50.0
    assert percentile(xs, 99) == 99.0
    assert percentile(xs, 100) == 100.0
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) == 0.0
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0  # unsorted input


def test_phase_of() -> None:
    assert phase_of(1.0, 2.0, 4.0) == "before"
    assert phase_of(2.0, 2.0, 4.0) == "during"
    assert phase_of(4.0, 2.0, 4.0) == "after"
    assert phase_of(9.0, None, None) == "before"
    assert phase_of(9.0, 2.0, None) == "during"


def test_summarise_and_phases() -> None:
    samples = [
        Sample(0.0, 0.010, "kv_write", 200),
        Sample(1.0, 1.020, "kv_read", 200),
        Sample(2.5, 7.5, "kv_write", 504),
        Sample(3.0, 3.001, "kv_write", 503),
        Sample(5.0, 5.002, "ws_create", 201),
    ]
    total = summarise(samples, seconds=5.0)
    assert total["requests"] == 5 and total["ok"] == 3 and total["rps"] == 1.0
    assert total["errors"] == {"503": 1, "504": 1}
    phases = by_phase(samples, 2.0, 4.0)
    assert [phases[p]["requests"] for p in ("before", "during", "after")] == [2, 2, 1]
    assert phases["during"]["p99_ms"] == 5000.0
    assert phases["after"]["errors"] == {}


def test_longest_stall() -> None:
    acks = [0.0, 0.1, 0.2, 3.2, 3.3, 10.0]
    assert longest_stall(acks, 0.0, 5.0) == (3.0, 0.2)
    # A load that never recovers stalls until the end of the window.
    assert longest_stall([0.0, 1.0], 0.0, 9.0) == (8.0, 1.0)
    assert longest_stall([], 2.0, 3.0) == (1.0, 2.0)

"""The supervisor's restart policy: exponential backoff per child, forgiveness after a quiet
window, and giving up after repeated crashes in a short window."""

from __future__ import annotations

from services.restarts import RestartPolicy


def test_backoff_doubles_up_to_the_cap() -> None:
    p = RestartPolicy(base=0.5, cap=3.0, window=60.0, limit=10)
    delays = [p.crashed(float(t)) for t in range(6)]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


def test_gives_up_after_the_limit_within_the_window() -> None:
    p = RestartPolicy(base=0.1, window=60.0, limit=3)
    assert p.crashed(0.0) is not None
    assert p.crashed(1.0) is not None
    assert p.crashed(2.0) is None
    assert p.recent == 3


def test_crashes_older_than_the_window_are_forgiven() -> None:
    p = RestartPolicy(base=0.5, window=10.0, limit=3)
    assert p.crashed(0.0) == 0.5
    assert p.crashed(5.0) == 1.0
    # Long after: the count starts again, and so does the backoff.
    assert p.crashed(100.0) == 0.5
    assert p.crashed(101.0) == 1.0
    assert p.crashed(102.0) is None

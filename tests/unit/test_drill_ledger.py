"""The write ledger and the fault rule that decides which client errors a fault explains."""

from __future__ import annotations

import pytest

from services.drill.faults import FaultEvent, explained, unexplained_errors
from services.drill.ledger import Ledger, Verification
from services.drill.stats import Sample


def test_ledger_records_each_ack_once() -> None:
    ledger = Ledger()
    ledger.ack("kv", "a", 1, 0.5)
    ledger.ack("job", "a", "a", 0.2)
    assert len(ledger) == 2
    assert ledger.ack_times() == [0.2, 0.5]
    with pytest.raises(ValueError):
        ledger.ack("kv", "a", 2, 0.9)


def test_verification_counts_lost_writes_by_kind() -> None:
    ledger = Ledger()
    for i in range(3):
        ledger.ack("kv", f"k{i}", i, float(i))
    ledger.ack("workspace", "w", "w", 1.0)
    v = Verification()
    for w in ledger:
        v.record(w, found=w.key != "k1")
    out = v.as_dict()
    assert out["acked_writes"] == 4 and out["lost_writes"] == 1
    assert out["by_kind"] == {"kv": {"acked": 3, "lost": 1}, "workspace": {"acked": 1, "lost": 0}}
    assert out["lost_examples"] == ["kv:k1"]


def test_transient_errors_are_explained_only_by_an_overlapping_fault() -> None:
    kill = FaultEvent(5.0, "kill", "secrets#1")
    assert explained(Sample(4.0, 9.0, "kv_write", 504), [kill])
    assert not explained(Sample(7.0, 7.1, "kv_write", 504), [kill])
    # A 500 or a 400 is never a fault's doing.
    assert not explained(Sample(4.0, 9.0, "kv_write", 500), [kill])
    stop = FaultEvent(10.0, "stop", "workspace#0", until=12.0)
    assert explained(Sample(11.0, 11.2, "ws_create", 503), [stop])
    # SIGCONT alone disrupts nothing.
    assert not explained(Sample(11.0, 11.2, "ws_create", 503), [FaultEvent(11.1, "cont", "x#0")])


def test_dropped_connections_are_explained_only_by_a_gateway_fault() -> None:
    s = Sample(4.0, 5.5, "ws_create", 0)
    assert not explained(s, [FaultEvent(5.0, "kill", "secrets#0")])
    assert explained(s, [FaultEvent(5.0, "kill", "gateway#1")])
    bad = unexplained_errors(
        [s, Sample(0.0, 0.1, "kv_read", 200), Sample(1.0, 1.1, "kv_read", 500)],
        [FaultEvent(5.0, "kill", "gateway#1")],
    )
    assert [x.status for x in bad] == [500]

"""ACL bootstrap happens once: the rule (Nomad's ACL.Bootstrap and state store checks), the reset
file, and the same rule applied through the scheduler's log (two replicas agree)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from services.scheduler.acl_bootstrap import (
    RESET_FILE,
    BootstrapRefused,
    apply_refusal,
    parse_reset,
    read_reset_file,
    reset_index_for,
)
from services.scheduler.state.fsm import SchedulerFSM
from shared.replog import ApplyError, LogEntry


def test_first_bootstrap_needs_no_reset() -> None:
    assert reset_index_for(0, 0) == 0
    assert reset_index_for(0, 99) == 0  # a stale file does not matter before any bootstrap


def test_refused_after_bootstrap_without_reset_file() -> None:
    with pytest.raises(BootstrapRefused, match=r"^ACL bootstrap already done \(reset index: 7\)$"):
        reset_index_for(7, 0)


def test_reset_file_must_name_the_current_index() -> None:
    with pytest.raises(
        BootstrapRefused, match=r"^Invalid bootstrap reset index \(specified 6, reset index: 7\)$"
    ):
        reset_index_for(7, 6)
    assert reset_index_for(7, 7) == 7


def test_apply_rule() -> None:
    assert apply_refusal(0, 0) == ""
    assert apply_refusal(5, 0).startswith("ACL bootstrap already done")
    assert apply_refusal(5, 4) == "Invalid reset index for ACL bootstrap"
    assert apply_refusal(5, 5) == ""


def test_reset_file_parsing(tmp_path: Path) -> None:
    assert parse_reset("  12\n") == 12
    assert parse_reset("12abc") == 12  # as Go's Sscanf("%d")
    assert parse_reset("abc") == 0
    assert read_reset_file(str(tmp_path)) == 0
    assert read_reset_file("") == 0
    (tmp_path / RESET_FILE).write_text("41\n")
    assert read_reset_file(str(tmp_path)) == 41


class Log:
    """Entries applied in order, as every replica applies the stream."""

    def __init__(self) -> None:
        self.fsm = SchedulerFSM()
        self.index = 0

    def append(self, kind: str, payload: dict[str, object]) -> object:
        self.index += 1
        entry = LogEntry(
            id=f"e{self.index}",
            type=kind,
            time=1_700_000_000.0 + self.index,
            payload=msgspec.msgpack.encode(payload),
        )
        return self.fsm.apply(self.index, entry)


def token(n: int) -> dict[str, object]:
    return {
        "AccessorID": f"acc-{n}",
        "SecretID": f"sec-{n}",
        "Name": "Bootstrap Token",
        "Type": "management",
        "Policies": None,
        "Global": True,
    }


def test_two_racing_bootstraps_one_wins_through_the_log() -> None:
    log = Log()
    first = log.append("acl.bootstrap", {"token": token(1), "reset_index": 0})
    assert isinstance(first, dict) and first["SecretID"] == "sec-1"
    with pytest.raises(ApplyError) as err:
        log.append("acl.bootstrap", {"token": token(2), "reset_index": 0})
    assert err.value.code == 400 and "reset index: 1" in err.value.message
    assert "sec-2" not in log.fsm.t.token_by_secret


def test_configured_token_counts_as_bootstrap_and_reset_allows_one_more() -> None:
    log = Log()
    log.append("acl.policy.upsert", {"policies": []})  # something before, so indexes differ
    marker = log.append("acl.bootstrap", {"configured": True})
    assert marker == {"reset_index": 2}
    # Recording it again (another replica at start) changes nothing.
    assert log.append("acl.bootstrap", {"configured": True}) == {"reset_index": 2}
    with pytest.raises(ApplyError):
        log.append("acl.bootstrap", {"token": token(1), "reset_index": 0})
    done = log.fsm.t.acl_bootstrap_index
    assert reset_index_for(done, 2) == 2
    log.append("acl.bootstrap", {"token": token(2), "reset_index": 2})
    assert log.fsm.t.acl_bootstrap_index == log.index
    with pytest.raises(ApplyError):  # the same reset index does not work twice
        log.append("acl.bootstrap", {"token": token(3), "reset_index": 2})
    with pytest.raises(BootstrapRefused):
        reset_index_for(log.fsm.t.acl_bootstrap_index, 2)

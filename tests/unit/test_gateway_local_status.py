"""The gateway's answers from published secrets state (services/gateway/local_status.py): when it
answers, what, and when it forwards instead. No bus: records are fed in directly."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from services.gateway import local_status
from services.gateway.local_status import LocalStatus
from shared import sys_status
from shared.secrets_state import SecretsState, StateRecord, sign

UNSEALED = SecretsState(
    initialized=True, sealed=False, threshold=1, shares=1, cluster_name="c1", cluster_id="id-1"
)
SEALED = SecretsState(initialized=True, sealed=True, threshold=2, shares=3, progress=1, nonce="n")


class Replica:
    """Signs records as one secrets replica would."""

    def __init__(self, key: Ed25519PrivateKey, cluster: str) -> None:
        self.key, self.cluster, self.node, self.seq = key, cluster, uuid.uuid4().hex, 0

    def record(self, state: SecretsState | None, *, at: float | None = None) -> bytes:
        self.seq += 1
        rec = StateRecord(
            node=self.node, seq=self.seq, at=time.time() if at is None else at, state=state
        )
        return sign(self.key, self.cluster, rec)


@pytest.fixture
def setup() -> tuple[LocalStatus, Replica]:
    key = Ed25519PrivateKey.generate()
    cluster = "c" + uuid.uuid4().hex[:8]
    return LocalStatus(key.public_key(), cluster), Replica(key, cluster)


def _get(view: LocalStatus, path: str, query: str = "", **headers: str) -> tuple[int, dict] | None:
    got = view.answer("GET", path, query, headers)
    return None if got is None else (got[0], json.loads(got[1]))


def test_answers_match_the_shared_answers(setup: tuple[LocalStatus, Replica]) -> None:
    view, replica = setup
    assert _get(view, "/v1/sys/health") is None  # nothing heard yet: forward
    view.receive(replica.record(UNSEALED))
    status, body = _get(view, "/v1/sys/health")  # type: ignore[misc]
    assert status == 200 and body["sealed"] is False and body["cluster_id"] == "id-1"
    assert abs(body["server_time_utc"] - time.time()) < 5
    assert _get(view, "/v1/sys/seal-status") == (200, sys_status.seal_status(UNSEALED))
    assert _get(view, "/v1/sys/leader") == (200, {"ha_enabled": False})
    view.receive(replica.record(SEALED))
    status, body = _get(view, "/v1/sys/health")  # type: ignore[misc]
    assert (status, body["sealed"], body["cluster_name"]) == (503, True, "")
    assert _get(view, "/v1/sys/health", "sealedcode=299&standbyok=true")[0] == 299  # type: ignore[index]
    status, body = _get(view, "/v1/sys/seal-status")  # type: ignore[misc]
    assert (body["t"], body["n"], body["progress"], "cluster_id" in body) == (2, 3, 1, False)
    uninit = SecretsState(initialized=False, sealed=True)
    view.receive(replica.record(uninit))
    assert _get(view, "/v1/sys/health")[0] == 501  # type: ignore[index]
    assert _get(view, "/v1/sys/health", "uninitcode=200")[0] == 200  # type: ignore[index]


@pytest.mark.parametrize(
    ("method", "path", "query", "headers"),
    [
        ("HEAD", "/v1/sys/health", "", {}),
        ("POST", "/v1/sys/seal-status", "", {}),
        ("GET", "/v1/sys/health/", "", {}),
        ("GET", "/v1/ns1/sys/health", "", {}),
        ("GET", "/v1/sys/health", "", {"x-vault-namespace": "ns1"}),
        ("GET", "/v1/sys/health", "standbyok=maybe", {}),
        ("GET", "/v1/sys/health", "sealedcode=abc", {}),
        ("GET", "/v1/sys/health", "sealedcode=99", {}),
        ("GET", "/v1/sys/health", "standbyok=1&standbyok=0", {}),
        ("GET", "/v1/sys/health", "help=1", {}),
        ("GET", "/v1/sys/seal-status", "help=1", {}),
        ("GET", "/v1/sys/leader", "list=true", {}),
        ("GET", "/v1/sys/seal-status", "", {"cache-control": "no-cache"}),
    ],
)
def test_anything_unusual_is_forwarded(
    setup: tuple[LocalStatus, Replica], method: str, path: str, query: str, headers: dict[str, str]
) -> None:
    view, replica = setup
    view.receive(replica.record(UNSEALED))
    assert view.answer("GET", "/v1/sys/health", "", {}) is not None
    assert view.answer(method, path, query, headers) is None


def test_health_query_parameters() -> None:
    codes = sys_status.health_codes(
        "standbyok=TRUE&perfstandbyok=0&activecode=204&drsecondarycode=200"
    )
    assert codes == sys_status.HealthCodes(
        standbyok=True, perfstandbyok=False, activecode=204, drsecondarycode=200
    )
    assert sys_status.health_codes("") == sys_status.HealthCodes()
    assert sys_status.health_codes("standbyok") == sys_status.HealthCodes(standbyok=False)
    assert sys_status.health_codes("sealedcode=%32%30%30") == sys_status.HealthCodes(sealedcode=200)
    for unsure in (
        "sealedcode=",
        "sealedcode=600",
        "sealedcode=-1",
        "sealedcode=\uff12\uff10\uff10",
        "x=1",
    ):
        assert sys_status.health_codes(unsure) is None, unsure


def test_dr_secondary_answers_leader(setup: tuple[LocalStatus, Replica]) -> None:
    view, replica = setup
    secondary = SecretsState(initialized=True, sealed=True, dr_mode="secondary")
    view.receive(replica.record(secondary))
    assert _get(view, "/v1/sys/health")[0] == 472  # type: ignore[index]
    # As the service answers it there (`bao status` asks it of a DR secondary).
    assert _get(view, "/v1/sys/leader") == (200, sys_status.LEADER)


def test_stale_state_is_forwarded(
    setup: tuple[LocalStatus, Replica], monkeypatch: pytest.MonkeyPatch
) -> None:
    view, replica = setup
    now = [1000.0]
    monkeypatch.setattr(local_status.time, "monotonic", lambda: now[0])
    view.receive(replica.record(UNSEALED))
    now[0] += local_status.STALE - 0.1
    assert view.current() == UNSEALED
    now[0] += 0.2
    assert view.current() is None and _get(view, "/v1/sys/health") is None
    view.receive(replica.record(UNSEALED))  # the next heartbeat
    assert view.current() == UNSEALED


def test_replicas_that_disagree_are_forwarded(
    setup: tuple[LocalStatus, Replica], monkeypatch: pytest.MonkeyPatch
) -> None:
    view, a = setup
    b = Replica(a.key, a.cluster)
    now = [1000.0]
    monkeypatch.setattr(local_status.time, "monotonic", lambda: now[0])
    view.receive(a.record(UNSEALED))
    view.receive(b.record(SEALED))
    assert view.current() is None
    view.receive(b.record(UNSEALED))
    assert view.current() == UNSEALED
    # b goes quiet (killed): once its record is stale, a alone decides.
    view.receive(a.record(SEALED))
    assert view.current() is None
    now[0] += local_status.STALE - 0.5
    view.receive(a.record(SEALED))
    now[0] += 0.6
    assert view.current() == SEALED
    # a stops and says so: nothing left to answer from.
    view.receive(a.record(None))
    assert view.current() is None


def test_forged_replayed_and_old_records_are_refused(setup: tuple[LocalStatus, Replica]) -> None:
    view, replica = setup
    view.receive(replica.record(SEALED))
    impostor = Replica(Ed25519PrivateKey.generate(), replica.cluster)
    impostor.node = replica.node
    view.receive(impostor.record(UNSEALED))
    other_cluster = Replica(replica.key, replica.cluster + "x")
    view.receive(other_cluster.record(UNSEALED))
    view.receive(replica.record(UNSEALED, at=time.time() - 3600))
    view.receive(b"not msgpack at all")
    assert view.current() == SEALED
    old = replica.record(UNSEALED)
    view.receive(replica.record(SEALED))
    view.receive(old)  # an earlier sequence, replayed
    assert view.current() == SEALED


def test_forget_and_state_changing_requests(setup: tuple[LocalStatus, Replica]) -> None:
    view, a = setup
    b = Replica(a.key, a.cluster)
    view.receive(a.record(UNSEALED))
    view.receive(b.record(UNSEALED))
    view.forget()
    assert view.current() is None
    # Until every replica has spoken again, one replica's word is not enough.
    view.receive(a.record(SEALED))
    assert view.current() is None
    view.receive(b.record(SEALED))
    assert view.current() == SEALED
    view.forget(gone=True)
    view.receive(a.record(UNSEALED))
    assert view.current() == UNSEALED
    for method, path in [
        ("PUT", "/v1/sys/seal"),
        ("POST", "/v1/sys/unseal"),
        ("POST", "/v1/sys/init"),
        ("PUT", "/v1/sys/rekey/update"),
        ("POST", "/v1/sys/replication/dr/secondary/promote"),
    ]:
        assert LocalStatus.changes_state(method, path), path
    assert not LocalStatus.changes_state("GET", "/v1/sys/seal-status")
    assert not LocalStatus.changes_state("POST", "/v1/secret/data/x")

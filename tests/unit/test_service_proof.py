"""Requests signed by a certified service (shared/service_proof.py): what a client node checks
before it reads files for, restarts or signals on behalf of the scheduler."""

from __future__ import annotations

import os

import pytest

from shared.cluster_identity import ClusterIdentity
from shared.service_identity import derive_service_key
from shared.service_proof import NotProven, Verifier, prove

IDENTITY = ClusterIdentity.from_seed(os.urandom(32))
PURPOSE = b"node fs request"


def verifier() -> Verifier:
    return Verifier(IDENTITY.public_key, "c", "scheduler", PURPOSE)


def test_a_genuine_scheduler_request_passes_once() -> None:
    check = verifier()
    proof = prove(derive_service_key(IDENTITY, "scheduler"), "c", PURPOSE, b"ls /alloc")
    check.check(proof, b"ls /alloc")
    with pytest.raises(NotProven, match="replayed"):
        check.check(proof, b"ls /alloc")


def test_other_services_other_clusters_other_bodies_and_old_proofs_fail() -> None:
    check = verifier()
    scheduler = derive_service_key(IDENTITY, "scheduler")
    with pytest.raises(NotProven, match="no proof"):
        check.check(None, b"x")
    with pytest.raises(NotProven, match="not 'scheduler'"):
        check.check(prove(derive_service_key(IDENTITY, "workspace"), "c", PURPOSE, b"x"), b"x")
    foreign = derive_service_key(ClusterIdentity.from_seed(os.urandom(32)), "scheduler")
    with pytest.raises(NotProven, match="genuine"):
        check.check(prove(foreign, "c", PURPOSE, b"x"), b"x")
    with pytest.raises(NotProven, match="genuine"):
        check.check(prove(scheduler, "c", PURPOSE, b"restart"), b"signal")
    with pytest.raises(NotProven, match="genuine"):
        check.check(prove(scheduler, "other", PURPOSE, b"x"), b"x")
    with pytest.raises(NotProven, match="genuine"):
        check.check(prove(scheduler, "c", b"another purpose", b"x"), b"x")
    old = prove(scheduler, "c", PURPOSE, b"x")
    with pytest.raises(NotProven, match="stale"):
        check.check(old, b"x", now=old.sent + 120)

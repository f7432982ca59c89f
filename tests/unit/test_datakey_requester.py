"""Who may have a data key (shared/datakeys.py): only a genuine replica of the service the key
belongs to, freshly, once per one-time key."""

from __future__ import annotations

import os

import pytest

from shared.cluster_identity import ClusterIdentity
from shared.datakeys import RequestChecker, RequestRefused, new_request

IDENTITY = ClusterIdentity.from_seed(os.urandom(32))


def checker() -> RequestChecker:
    return RequestChecker(IDENTITY.public_key, "c")


def key(service: str, identity: ClusterIdentity = IDENTITY):  # type: ignore[no-untyped-def]
    from shared.service_identity import derive_service_key

    return derive_service_key(identity, service)


def test_a_genuine_replica_gets_its_own_keys_only() -> None:
    check = checker()
    check.check(new_request("workspace/state", key("workspace"), "c")[1])
    check.check(new_request("scheduler/variables", key("scheduler"), "c")[1])
    with pytest.raises(RequestRefused, match="not for service"):
        check.check(new_request("workspace/state", key("scheduler"), "c")[1])
    with pytest.raises(RequestRefused, match="not for service"):
        # The secrets service's own key is no data-key holder either.
        check.check(new_request("workspace/state", key("secrets"), "c")[1])


def test_forged_altered_and_foreign_requests_are_refused() -> None:
    check = checker()
    foreign = ClusterIdentity.from_seed(os.urandom(32))
    with pytest.raises(RequestRefused, match="genuine"):
        check.check(new_request("workspace/state", key("workspace", foreign), "c")[1])
    _, req = new_request("workspace/state", key("workspace"), "other-cluster")
    with pytest.raises(RequestRefused, match="genuine"):
        check.check(req)
    # Whoever can publish on the subject swaps in its own one-time key: the signature breaks.
    _, req = new_request("workspace/state", key("workspace"), "c")
    req.public_key = os.urandom(32)
    with pytest.raises(RequestRefused, match="genuine"):
        check.check(req)
    # An unsigned request as the old protocol sent it.
    _, req = new_request("workspace/state", key("workspace"), "c")
    req.signature = b""
    with pytest.raises(RequestRefused):
        check.check(req)


def test_replayed_and_stale_requests_are_refused() -> None:
    check = checker()
    _, req = new_request("workspace/variables", key("workspace"), "c")
    check.check(req)
    with pytest.raises(RequestRefused, match="replayed"):
        check.check(req)
    _, req = new_request("workspace/variables", key("workspace"), "c")
    with pytest.raises(RequestRefused, match="stale"):
        check.check(req, now=req.sent + 120)

"""PKI `config/crl` `allow_expired_cert_revocation` (OpenBao's switch): an expired certificate
is refused with a warning by default, and revoked once the switch is on."""

from __future__ import annotations

import time

import pytest

from tests.integration.test_pki_api import ok, pki_cluster

pytestmark = pytest.mark.nats


async def test_expired_certificates_are_revoked_only_when_allowed(nats_url: str) -> None:
    async with pki_cluster(nats_url) as c:
        await ok(c, "POST", "pki/root/generate/internal", {"common_name": "R", "key_type": "ec"})
        await ok(
            c,
            "POST",
            "pki/roles/short",
            {"allow_any_name": True, "key_type": "ec", "not_before_duration": "0s"},
        )
        serials = []
        for name in ("a", "b"):
            leaf = await ok(c, "POST", "pki/issue/short", {"common_name": name, "ttl": "1s"})
            serials.append(leaf["data"]["serial_number"])
            expires = leaf["data"]["expiration"]
        deadline = time.monotonic() + 10
        while time.time() <= expires + 1:  # the certificates' own clock, not a guess
            assert time.monotonic() < deadline
            await ok(c, "GET", "pki/cert/ca")
        refused = await ok(c, "POST", "pki/revoke", {"serial_number": serials[0]})
        assert "already expired" in refused["warnings"][0] and refused.get("data") is None
        cfg = await ok(c, "GET", "pki/config/crl")
        assert cfg["data"]["allow_expired_cert_revocation"] is False
        await ok(c, "POST", "pki/config/crl", {"allow_expired_cert_revocation": True})
        revoked = await ok(c, "POST", "pki/revoke", {"serial_number": serials[1]})
        assert revoked["data"]["state"] == "revoked"
        read = await ok(c, "GET", f"pki/cert/{serials[1]}")
        assert read["data"]["revocation_time"] > 0 and read["data"]["issuer_id"]

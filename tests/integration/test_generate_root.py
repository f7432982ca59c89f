"""Vault's unauthenticated sys/generate-root/* (what hvac calls) through the gateway on a real
nats-server: a threshold of unseal key shares makes a new root token, returned only XOR-encoded
with the caller's pad; bad pads, nonces and shares are 400s that make nothing. The bao CLI's
OpenBao-named paths are driven in tests/e2e/test_bao_cli.py."""

from __future__ import annotations

import pytest

from services.replication import otp as otp_codec
from services.secrets.core.generate_root import OTP_LENGTH
from tests.harness import start_cluster

pytestmark = [pytest.mark.nats]

ATTEMPT, UPDATE = "/v1/sys/generate-root/attempt", "/v1/sys/generate-root/update"


async def test_root_token_from_the_key_shares(nats_url: str) -> None:
    c = await start_cluster(nats_url, shares=3, threshold=2)
    try:
        keys = c.unseal_keys
        status, body = await c.request("GET", ATTEMPT, token="")
        assert status == 200 and body["started"] is False and body["required"] == 2, body
        assert body["otp_length"] == OTP_LENGTH
        for bad in ("short", "!" * OTP_LENGTH, "é" * OTP_LENGTH):
            status, body = await c.request("PUT", ATTEMPT, token="", json={"otp": bad})
            assert status == 400, (bad, body)
        # No pad given: one is made and shown this once.
        status, started = await c.request("PUT", ATTEMPT, token="", json={})
        assert status == 200 and len(started["otp"]) == OTP_LENGTH, started
        pad, nonce = started["otp"], started["nonce"]
        status, body = await c.request("PUT", ATTEMPT, token="", json={})
        assert status == 400 and "in progress" in body["errors"][0], body
        status, body = await c.request("GET", ATTEMPT, token="")
        assert body["started"] is True and body["otp"] == "" and body["nonce"] == nonce

        for wrong in ("other", "\ud800", ""):
            status, body = await c.request(
                "PUT", UPDATE, token="", json={"key": keys[0], "nonce": wrong}
            )
            assert status == 400, (wrong, body)
        status, body = await c.request(
            "PUT", UPDATE, token="", json={"key": keys[1], "nonce": nonce}
        )
        assert status == 200 and body["progress"] == 1 and body["complete"] is False, body
        status, body = await c.request(
            "PUT", UPDATE, token="", json={"key": keys[1], "nonce": nonce}
        )
        assert status == 400, body  # the same share twice
        # A share that is not one of them: refused, progress reset, no token made.
        forged = ("ff" if keys[2][:2] != "ff" else "fe") + keys[2][2:]  # same x, other y
        status, body = await c.request(
            "PUT", UPDATE, token="", json={"key": forged, "nonce": nonce}
        )
        assert status == 400 and "reset" in body["errors"][0], body
        assert forged not in str(body)
        status, body = await c.request("GET", ATTEMPT, token="")
        assert body["started"] is True and body["progress"] == 0, body

        for key in (keys[2], keys[0]):
            status, body = await c.request(
                "PUT", UPDATE, token="", json={"key": key, "nonce": nonce}
            )
            assert status == 200, body
        assert body["complete"] is True and body["encoded_token"] == body["encoded_root_token"]
        token = otp_codec.decode(body["encoded_token"], pad)
        assert token != c.root_token and token not in str(body)
        status, looked = await c.request("GET", "/v1/auth/token/lookup-self", token=token)
        assert status == 200 and looked["data"]["policies"] == ["root"], looked
        status, body = await c.request("GET", ATTEMPT, token="")
        assert body["started"] is False, body  # the attempt ended with its token

        # Cancelled: gone, and nothing to update.
        status, body = await c.request("PUT", ATTEMPT, token="", json={"otp": pad})
        assert status == 200 and body["otp"] == "", body  # the caller's pad is not echoed
        status, _ = await c.request("DELETE", ATTEMPT, token="")
        assert status == 204
        status, body = await c.request(
            "PUT", UPDATE, token="", json={"key": keys[0], "nonce": nonce}
        )
        assert status == 400 and "no root generation" in body["errors"][0], body
    finally:
        await c.close()

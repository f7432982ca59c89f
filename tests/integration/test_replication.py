"""DR replication between two clusters, each on its own nats-server: pairing, WAL streaming,
Merkle agreement, the secondary's gate, operation tokens, revoke, and bad input."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from services.replication.activation import sign_jwt
from services.replication.channel import new_identity
from tests.integration.test_replication_setup import (
    DR,
    Site,
    caught_up,
    close_site,
    enable_primary,
    enable_secondary,
    operation_token,
    pair,
    secondary_token,
    start_site,
    unseal,
    wait_until,
)

pytestmark = pytest.mark.nats

POLICY = 'path "secret/*" { capabilities = ["read"] }'


@pytest.fixture
async def sites() -> AsyncIterator[tuple[Site, Site]]:
    a, b = await asyncio.gather(start_site(), start_site())
    try:
        yield a, b
    finally:
        await asyncio.gather(close_site(a), close_site(b))


async def write_policy(site: Site, name: str) -> None:
    code, body = await site.req("POST", f"/v1/sys/policies/acl/{name}", json={"policy": POLICY})
    assert code in (200, 204), body


async def test_three_calls_then_streaming(sites: tuple[Site, Site]) -> None:
    a, b = sites
    await write_policy(b, "only-on-b")  # the secondary's own data goes at enable
    await pair(a, b)
    p, s = await a.status(), await b.status()
    assert p["mode"] == "primary" and s["mode"] == "secondary"
    assert p["cluster_id"] == s["cluster_id"] and p["known_secondaries"] == ["dr1"]
    assert p["secondaries"][0]["connection_status"] == "connected"
    assert p["secondaries"][0]["node_id"] == "dr1" and p["secondaries"][0]["last_heartbeat"]
    assert s["state"] == "stream-wals" and s["secondary_id"] == "dr1"
    assert s["primaries"][0]["connection_status"] == "connected"
    assert s["primary_cluster_addr"] == p["primary_cluster_addr"]
    assert s["known_primary_cluster_addrs"] == [p["primary_cluster_addr"]]

    # Writes on the primary reach the secondary's last_remote_wal and merkle_root quickly.
    before = p["last_wal"]
    for i in range(10):
        await write_policy(a, f"p{i}")
    started = time.monotonic()
    s = await caught_up(a, b, within=5)
    lag = time.monotonic() - started
    assert s["last_remote_wal"] > before
    assert lag < 1.0, f"the secondary took {lag:.2f}s to catch up"

    # The secondary serves no client requests but the replication paths, health, seal status.
    code, body = await b.req("GET", "/v1/sys/policies/acl/p1")
    assert code == 400 and "DR secondary" in body["errors"][0]
    code, body = await b.req("GET", "/v1/sys/seal-status", token="")
    assert code == 200 and body["sealed"] is True
    code, body = await b.req("GET", "/v1/sys/health", token="")
    assert body["replication_dr_mode"] == "secondary"

    # Enabling twice, or the other mode on an enabled cluster: 4xx, nothing changes.
    code, body = await a.req("POST", DR + "primary/enable", json={})
    assert code == 400 and "already" in body["errors"][0]
    code, body = await enable_secondary(a, "whatever")
    assert code == 400 and "primary" in body["errors"][0]
    code, body = await enable_secondary(b, "whatever")
    assert code == 400
    code, body = await b.req("POST", DR + "primary/enable", json={})
    assert code == 400
    assert (await a.status())["mode"] == "primary" and (await b.status())["mode"] == "secondary"
    await caught_up(a, b)


async def test_activation_token_bad_input(sites: tuple[Site, Site]) -> None:
    a, c = sites
    await enable_primary(a)
    await write_policy(c, "kept")

    async def refused(token: str, status: int = 400, **extra: object) -> str:
        code, body = await enable_secondary(c, token, **extra)
        assert code == status, body
        # The cluster's data and mode are unchanged.
        assert (await c.status())["mode"] == "disabled"
        code2, _ = await c.req("GET", "/v1/sys/policies/acl/kept")
        assert code2 == 200
        return body["errors"][0]

    assert "primary API address" in await refused("hvs.notawrappingtoken")
    assert "invalid activation token" in await refused(
        "hvs.notawrappingtoken", primary_api_addr=a.cluster.secrets_url
    )
    forged = sign_jwt(
        {"jti": "hvs.forged", "addr": a.cluster.secrets_url, "type": "wrapping"},
        new_identity("forger")[1],
    )
    assert "invalid activation token" in await refused(forged)
    assert "not a wrapping token" in await refused(sign_jwt({"jti": "x"}, new_identity("f")[1]))

    # Expired: a one-second token, used once it has lapsed.
    expired = await secondary_token(a, "late", ttl="1s")

    async def lapsed() -> bool:
        code, _ = await a.req(
            "POST", "/v1/sys/wrapping/lookup", json={"token": _jti(expired)}, token=""
        )
        return code == 400

    await wait_until(lapsed, within=5, what="the token to expire")
    assert "invalid activation token" in await refused(expired)

    # Revoked before use.
    revoked = await secondary_token(a, "revoked")
    code, body = await a.req("POST", DR + "primary/revoke-secondary", json={"id": "revoked"})
    assert code in (200, 204), body
    assert "invalid activation token" in await refused(revoked)

    # Foreign: a wrapping token that wraps something else; a token sent to another cluster.
    code, body = await a.req(
        "POST", "/v1/sys/wrapping/wrap", json={"a": "b"}, headers={"X-Svc-Wrap-TTL": "60"}
    )
    assert code == 200, body
    assert "does not wrap" in await refused(
        body["wrap_info"]["token"], primary_api_addr=a.cluster.secrets_url
    )
    other = await secondary_token(a, "other")
    assert "invalid activation token" in await refused(
        other, primary_api_addr=c.cluster.secrets_url
    )

    # Duplicate id, missing id, and a token request on a cluster that is not a primary.
    code, body = await a.req("POST", DR + "primary/secondary-token", json={"id": "other"})
    assert code == 400 and "already exists" in body["errors"][0]
    code, body = await a.req("POST", DR + "primary/secondary-token", json={})
    assert code == 400
    code, body = await c.req("POST", DR + "primary/secondary-token", json={"id": "x"})
    assert code == 400


def _jti(jwt: str) -> str:
    from services.replication.activation import jwt_claims

    claims = jwt_claims(jwt)
    assert claims is not None
    return str(claims["jti"])


async def test_reused_token_and_sudo(sites: tuple[Site, Site]) -> None:
    a, b = sites
    await enable_primary(a)
    code, body = await enable_secondary(a, "x")  # a primary cannot become a secondary
    assert code == 400
    # secondary-token needs sudo: a token with update but no sudo is refused.
    code, body = await a.req(
        "POST",
        "/v1/sys/policies/acl/dr-admin",
        json={"policy": 'path "sys/replication/dr/*" { capabilities = ["create", "update"] }'},
    )
    assert code in (200, 204), body
    code, body = await a.req("POST", "/v1/auth/token/create", json={"policies": ["dr-admin"]})
    assert code == 200, body
    weak = body["auth"]["client_token"]
    code, body = await a.req("POST", DR + "primary/secondary-token", json={"id": "x"}, token=weak)
    assert code == 403
    code, body = await a.req("POST", DR + "primary/enable", json={}, token="")
    assert code == 403

    token = await secondary_token(a, "dr1")
    code, body = await enable_secondary(b, token)
    assert code == 200, body
    await caught_up(a, b)
    third = await start_site()
    try:
        code, body = await enable_secondary(third, token)
        assert code == 400 and "invalid activation token" in body["errors"][0]
        assert (await third.status())["mode"] == "disabled"
    finally:
        await close_site(third)


async def test_operation_token_bad_input_and_promote_checks(sites: tuple[Site, Site]) -> None:
    a, b = sites
    await pair(a, b)
    att = DR + "secondary/generate-operation-token/attempt"
    upd = DR + "secondary/generate-operation-token/update"
    code, body = await b.req("GET", att, token="")
    assert code == 200 and body["started"] is False
    code, body = await b.req("POST", upd, json={"key": a.keys[0], "nonce": "x"}, token="")
    assert code == 400
    code, start = await b.req("POST", att, json={}, token="")
    assert code == 200 and start["otp_length"] == 28 and len(start["otp"]) == 28
    code, body = await b.req("POST", att, json={}, token="")
    assert code == 400 and "in progress" in body["errors"][0]
    code, body = await b.req("GET", att, token="")
    assert body["started"] is True and "otp" not in body and body["nonce"] == start["nonce"]
    for bad, why in (
        ({"key": a.keys[0], "nonce": "other"}, "nonce"),
        ({"key": a.keys[0][:20], "nonce": start["nonce"]}, "wrong length"),
        ({"key": "ab" * 32, "nonce": start["nonce"]}, "do not open"),
    ):
        code, body = await b.req("POST", upd, json=bad, token="")
        assert code == 400 and why in body["errors"][0], body
    code, _ = await b.req("DELETE", att, token="")
    assert code in (200, 204)
    code, body = await b.req("GET", att, token="")
    assert body["started"] is False
    # Operation tokens are a secondary's business.
    code, body = await a.req("POST", att, json={}, token="")
    assert code == 400

    tok = await operation_token(b, a.keys)
    promote = DR + "secondary/promote"
    code, body = await b.req("POST", promote, json={}, token="")
    assert code == 400
    code, body = await b.req("POST", promote, json={"dr_operation_token": "hvb.wrong"}, token="")
    assert code == 403
    # Safety check: the primary is alive and streaming.
    code, body = await b.req("POST", promote, json={"dr_operation_token": tok}, token="")
    assert code == 400 and "still connected" in body["errors"][0]
    assert (await b.status())["mode"] == "secondary"

    code, body = await b.req(
        "POST",
        DR + "secondary/reindex",
        json={"dr_operation_token": tok, "diff": True, "skip_flush": True},
        token="",
    )
    assert code == 200 and any("reindexed" in w for w in body["warnings"]), body
    assert any("skip_flush" in w for w in body["warnings"])
    await caught_up(a, b)

    code, body = await b.req(
        "POST", DR + "secondary/operation-token/delete", json={"dr_operation_token": tok}, token=""
    )
    assert code in (200, 204), body
    code, body = await b.req(
        "POST", DR + "secondary/reindex", json={"dr_operation_token": tok}, token=""
    )
    assert code == 403


async def test_revoke_secondary_disconnects_at_once(sites: tuple[Site, Site]) -> None:
    a, b = sites
    await pair(a, b)
    code, body = await a.req("POST", DR + "primary/revoke-secondary", json={"id": "dr1"})
    assert code in (200, 204), body
    assert (await a.status())["known_secondaries"] == []

    async def cut() -> bool:
        s = await b.status()
        return s["primaries"][0]["connection_status"] == "disconnected"

    await wait_until(cut, within=3, what="the secondary to be disconnected")
    behind = (await b.status())["last_remote_wal"]
    await write_policy(a, "after-revoke")
    code, body = await a.req("POST", DR + "primary/revoke-secondary", json={"id": "dr1"})
    assert code == 400
    assert (await b.status())["last_remote_wal"] == behind

    # A blank token on update-primary forgets the (now useless) primary; data stays.
    tok = await operation_token(b, a.keys)
    code, body = await b.req(
        "POST",
        DR + "secondary/update-primary",
        json={"dr_operation_token": tok, "token": ""},
        token="",
    )
    assert code in (200, 204), body
    s = await b.status()
    assert s["primaries"] == [] and s["known_primary_cluster_addrs"] == []
    assert s["state"] == "idle" and s["last_remote_wal"] == behind


async def test_encrypted_activation_then_disable_changes_cluster_id(
    sites: tuple[Site, Site],
) -> None:
    a, b = sites
    await enable_primary(a)
    code, body = await b.req("POST", DR + "secondary/generate-public-key", json={})
    assert code == 200, body
    public = body["data"]["secondary_public_key"]
    token = await secondary_token(a, "enc", secondary_public_key=public)
    assert token.startswith("tdr1.")
    code, body = await enable_secondary(b, token)
    assert code == 200, body
    await caught_up(a, b)
    first_id = (await a.status())["cluster_id"]

    # Disabling the secondary keeps the primary's data: it unseals with the primary's keys.
    await write_policy(a, "replicated")
    await caught_up(a, b)
    tok = await operation_token(b, a.keys)
    code, body = await b.req(
        "POST", DR + "secondary/disable", json={}, token=tok
    )  # the operation token may come as the client token
    assert code in (200, 204), body
    assert (await b.status()) == {"mode": "disabled"}
    await unseal(b, a.keys)
    code, body = await b.req("GET", "/v1/sys/policies/acl/replicated", token=a.cluster.root_token)
    assert code == 200, body

    code, _ = await a.req("POST", DR + "primary/disable", json={})
    assert code in (200, 204)
    assert (await a.status()) == {"mode": "disabled"}
    await enable_primary(a)
    assert (await a.status())["cluster_id"] != first_id
    assert (await a.status())["known_secondaries"] == []

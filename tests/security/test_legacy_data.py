"""Data an older Trellis left behind: tokens issued before tokens had leases get one, once,
from the expiration leader, so that disabling their auth mount revokes them as well; userpass
hashes of the raw password refuse NUL suffixes and are rewritten at the next login."""

from __future__ import annotations

import os

import msgspec
import pytest

from services.secrets.auth import userpass
from services.secrets.auth.userpass import PasswordHash, UserEntry
from services.secrets.core.expiration import LEGACY_DONE
from services.secrets.core.namespaces import ROOT
from tests.harness import start_cluster

pytestmark = pytest.mark.nats


async def test_a_token_without_a_lease_gets_one_and_dies_with_its_mount(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        core = c.secrets[0].core
        assert core is not None
        status, body = await c.request("POST", "/v1/sys/auth/old", json={"type": "userpass"})
        assert status == 204, body
        status, body = await c.request(
            "POST", "/v1/auth/old/users/alice", json={"password": "s3cret"}
        )
        assert status == 204, body
        status, body = await c.request(
            "POST", "/v1/auth/old/login/alice", json={"password": "s3cret"}
        )
        assert status == 200, body
        token = body["auth"]["client_token"]

        # What an older release left behind: the token, but no lease, and no migration mark.
        entry = await core.tokens.lookup(token)
        assert entry is not None
        await core.expiration.forget_auth(entry)
        await core.expiration.view.delete(LEGACY_DONE)
        status, _ = await c.request("LIST", "/v1/sys/leases/lookup/auth/old/login/")
        assert status == 404

        assert await core.expiration.lease_legacy_tokens() >= 1
        assert await core.expiration.lease_legacy_tokens() == 0  # once per cluster
        status, body = await c.request("LIST", "/v1/sys/leases/lookup/auth/old/login/alice/")
        assert status == 200 and len(body["data"]["keys"]) == 1, body

        status, body = await c.request("DELETE", "/v1/sys/auth/old")
        assert status == 204, body
        status, _ = await c.request("GET", "/v1/auth/token/lookup-self", token=token)
        assert status == 403
    finally:
        await c.close()


async def test_a_legacy_password_hash_refuses_nul_and_is_upgraded_at_login(nats_url: str) -> None:
    """A user stored by an older release (scrypt over the raw password, blind to NUL
    suffixes) still logs in with the right password, never with a NUL suffix, and the
    first login rewrites the hash in the exact-bytes form."""
    c = await start_cluster(nats_url)
    try:
        core = c.secrets[0].core
        assert core is not None
        status, body = await c.request("POST", "/v1/sys/auth/legacy", json={"type": "userpass"})
        assert status == 204, body
        status, body = await c.request(
            "POST", "/v1/auth/legacy/users/bob", json={"password": "placeholder"}
        )
        assert status == 204, body
        storage = core.table(ROOT).backends["auth/legacy/"].storage
        user = await storage.get_obj("user/bob", UserEntry)
        assert user is not None and user.password.v == 2
        salt = os.urandom(16)
        n, r, p = 2**14, 8, 1
        old = PasswordHash(n=n, r=r, p=p, salt=salt, key=userpass._derive("pw", salt, n, r, p, 1))
        await storage.put_obj("user/bob", msgspec.structs.replace(user, password=old))

        for wrong in ("pw\u0000", "pw\u0000\u0000"):
            status, body = await c.request(
                "POST", "/v1/auth/legacy/login/bob", json={"password": wrong}
            )
            assert status == 400 and body["errors"] == ["invalid username or password"]
        status, body = await c.request("POST", "/v1/auth/legacy/login/bob", json={"password": "pw"})
        assert status == 200, body
        upgraded = await storage.get_obj("user/bob", UserEntry)
        assert upgraded is not None and upgraded.password.v == 2
        status, _ = await c.request("POST", "/v1/auth/legacy/login/bob", json={"password": "pw"})
        assert status == 200
        status, _ = await c.request(
            "POST", "/v1/auth/legacy/login/bob", json={"password": "pw\u0000"}
        )
        assert status == 400
    finally:
        await c.close()

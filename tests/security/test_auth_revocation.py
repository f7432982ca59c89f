"""Tokens die with what issued them (issue 19, item 3): a login creates a lease under
`auth/<mount>/login/`, and disabling or moving the auth mount, revoking the lease, or revoking
its prefix (with or without the slash, forced or not) revokes the token and its children.
Disabling a secrets mount revokes its leases at the backend. Every case runs against a real
`trellis dev` and the real OpenBao dev server with the same requests."""

from __future__ import annotations

import pytest

from tests.security.secrets_targets import (
    Target,
    child_of,
    creator_policy,
    eventually,
    login,
    ssh_otp_mount,
    unique,
    userpass,
)


def _login_with_child(t: Target) -> tuple[str, str, str]:
    """(mount, login token, child token of the login token)."""
    mount, user, password = userpass(t, policies=creator_policy(t))
    token = login(t, mount, user, password)
    child = child_of(t, token)
    assert t.alive(token) and t.alive(child)
    return mount, token, child


def _login_lease(t: Target, mount: str, user: str = "alice") -> str:
    body = t.ok("LIST", f"sys/leases/lookup/auth/{mount}/login/{user}/")
    (key,) = body["data"]["keys"]
    return f"auth/{mount}/login/{user}/{key}"


def test_disabling_the_auth_mount_revokes_its_tokens_and_their_children(target: Target) -> None:
    mount, token, child = _login_with_child(target)
    r = target.req("DELETE", f"sys/auth/{mount}")
    assert r.status_code == 204, r.text
    assert not target.alive(token)
    assert not target.alive(child)


def test_moving_the_auth_mount_revokes_its_tokens(target: Target) -> None:
    mount, token, child = _login_with_child(target)
    moved = unique("moved")
    r = target.req("POST", "sys/remount", json={"from": f"auth/{mount}", "to": f"auth/{moved}"})
    assert r.status_code == 200, r.text
    # OpenBao moves mounts in the background: wait for the move, then for the revocation.
    eventually(lambda: not target.alive(token), "the login token revoked by the move")
    assert not target.alive(child)
    eventually(lambda: target.req("GET", f"sys/auth/{moved}").status_code == 200, "the mount moved")
    assert target.req("LIST", f"sys/leases/lookup/auth/{mount}/login/").status_code == 404


def test_revoke_prefix_without_the_slash_revokes_the_mounts_tokens(target: Target) -> None:
    mount, token, child = _login_with_child(target)
    r = target.req("PUT", f"sys/leases/revoke-prefix/auth/{mount}")
    assert r.status_code == 204, r.text
    assert not target.alive(token)
    assert not target.alive(child)


def test_revoke_prefix_with_the_slash_over_http_is_refused_not_ignored(target: Target) -> None:
    mount, token, _ = _login_with_child(target)
    for kind in ("revoke-prefix", "revoke-force"):
        r = target.req("PUT", f"sys/leases/{kind}/auth/{mount}/")
        assert r.status_code == 400, (kind, r.text)
        assert r.json()["errors"] == ["cannot write to a path ending in '/'"]
    # A refusal, not a silent 204: the operator knows nothing was revoked.
    assert target.alive(token)


@pytest.mark.parametrize("force", [False, True], ids=["revoke-prefix", "revoke-force"])
def test_cli_revoke_prefix_with_the_slash_revokes_the_mounts_tokens(
    target: Target, force: bool
) -> None:
    """`bao lease revoke [-force] -prefix auth/<mount>/`: what an operator types."""
    mount, token, child = _login_with_child(target)
    args = ["lease", "revoke", *(["-force"] if force else []), "-prefix", f"auth/{mount}/"]
    done = target.bao(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    # Without -force the CLI asks for an asynchronous revocation (sync=false, 202).
    eventually(lambda: not target.alive(token), "the login token revoked")
    eventually(lambda: not target.alive(child), "the child token revoked")


def test_revoke_force_revokes_the_mounts_tokens(target: Target) -> None:
    mount, token, child = _login_with_child(target)
    r = target.req("PUT", f"sys/leases/revoke-force/auth/{mount}")
    assert r.status_code == 204, r.text
    assert not target.alive(token)
    assert not target.alive(child)


def test_revoke_prefix_takes_an_exact_lease_id_first(target: Target) -> None:
    mount, user, password = userpass(target)
    first = login(target, mount, user, password)
    lease = _login_lease(target, mount, user)
    second = login(target, mount, user, password)
    r = target.req("PUT", f"sys/leases/revoke-prefix/{lease}")
    assert r.status_code == 204, r.text
    assert not target.alive(first)
    assert target.alive(second)  # the exact id, not everything that starts with it


def test_revoke_prefix_needs_sudo(target: Target) -> None:
    mount, user, password = userpass(target)
    token = login(target, mount, user, password)
    for kind in ("revoke-prefix", "revoke-force"):
        r = target.req("PUT", f"sys/leases/{kind}/auth/{mount}", token=token)
        assert r.status_code == 403, (kind, r.text)
    assert target.alive(token)


def test_login_lease_is_listed_looked_up_and_revoked(target: Target) -> None:
    mount, user, password = userpass(target, policies=creator_policy(target))
    token = login(target, mount, user, password)
    child = child_of(target, token)
    me = target.ok("GET", "auth/token/lookup-self", token=token)["data"]
    assert me["path"] == f"auth/{mount}/login/{user}"
    assert me["display_name"] == f"{mount}-{user}"  # named after the mount it came from

    for root in ("sys/leases/lookup/", "sys/leases/lookup"):
        assert "auth/" in target.ok("LIST", root)["data"]["keys"]
    assert f"{mount}/" in target.ok("LIST", "sys/leases/lookup/auth/")["data"]["keys"]
    assert target.ok("LIST", f"sys/leases/lookup/auth/{mount}/login/")["data"]["keys"] == [
        f"{user}/"
    ]
    lease = _login_lease(target, mount, user)
    assert lease.split("/")[-1].startswith("h")  # the salted token id, as Vault names it

    data = target.ok("PUT", "sys/leases/lookup", json={"lease_id": lease})["data"]
    assert set(data) >= {"id", "path", "issue_time", "expire_time", "last_renewal", "ttl"}
    assert data["id"] == lease
    assert data["path"] == f"auth/{mount}/login/{user}"
    assert data["renewable"] is True
    assert data["last_renewal"] is None
    assert 0 < data["ttl"] <= 32 * 24 * 3600

    # A token's lease is renewed through auth/token/renew*, never sys/leases/renew.
    r = target.req("PUT", "sys/leases/renew", json={"lease_id": lease})
    assert r.status_code == 400
    assert r.json()["errors"] == ["tokens cannot be renewed through this endpoint"]
    target.ok("POST", "auth/token/renew", json={"token": token, "increment": "1h"})
    renewed = target.ok("PUT", "sys/leases/lookup", json={"lease_id": lease})["data"]
    assert renewed["last_renewal"] is not None
    assert renewed["ttl"] <= 3600

    r = target.req("PUT", "sys/leases/revoke", json={"lease_id": lease})
    assert r.status_code == 204, r.text
    assert not target.alive(token)
    assert not target.alive(child)
    r = target.req("PUT", "sys/leases/lookup", json={"lease_id": lease})
    assert r.status_code == 400
    assert r.json()["errors"] == ["invalid lease"]
    assert target.req("LIST", f"sys/leases/lookup/auth/{mount}/login/").status_code == 404


def test_token_create_leases_live_under_auth_token_create(target: Target) -> None:
    def keys() -> set[str]:
        r = target.req("LIST", "sys/leases/lookup/auth/token/create/")
        return set(r.json()["data"]["keys"]) if r.status_code == 200 else set()

    before = keys()
    token = target.ok("POST", "auth/token/create", json={"ttl": "1h"})["auth"]["client_token"]
    (new,) = keys() - before
    r = target.req("PUT", "sys/leases/revoke", json={"lease_id": f"auth/token/create/{new}"})
    assert r.status_code == 204, r.text
    assert not target.alive(token)


def test_disabling_a_secrets_mount_revokes_its_leases(target: Target) -> None:
    mount = unique("ssh")
    ssh_otp_mount(target, mount)
    first = target.ok("POST", f"{mount}/creds/otp", json={"ip": "127.0.0.1"})
    second = target.ok("POST", f"{mount}/creds/otp", json={"ip": "127.0.0.1"})
    assert first["lease_id"].startswith(f"{mount}/creds/otp/")

    # Revoking the lease revokes the OTP at the backend.
    target.ok("PUT", "sys/leases/revoke", json={"lease_id": first["lease_id"]})
    r = target.req("POST", f"{mount}/verify", json={"otp": first["data"]["key"]})
    assert r.status_code == 400 and r.json()["errors"] == ["OTP not found"]
    assert target.ok("POST", f"{mount}/verify", json={"otp": second["data"]["key"]})["data"]

    r = target.req("DELETE", f"sys/mounts/{mount}")
    assert r.status_code == 204, r.text
    assert target.req("LIST", f"sys/leases/lookup/{mount}/creds/otp/").status_code == 404
    r = target.req("PUT", "sys/leases/lookup", json={"lease_id": second["lease_id"]})
    assert r.status_code == 400 and r.json()["errors"] == ["invalid lease"]


def test_moving_a_secrets_mount_revokes_its_leases_at_the_backend(target: Target) -> None:
    mount, moved = unique("ssh"), unique("sshmoved")
    ssh_otp_mount(target, mount)
    creds = target.ok("POST", f"{mount}/creds/otp", json={"ip": "127.0.0.1"})
    r = target.req("POST", "sys/remount", json={"from": mount, "to": moved})
    assert r.status_code == 200, r.text
    eventually(
        lambda: target.req("GET", f"{moved}/roles/otp").status_code == 200, "the mount moved"
    )
    # The role moved with the mount; the OTP issued under the old path did not survive.
    r = target.req("POST", f"{moved}/verify", json={"otp": creds["data"]["key"]})
    assert r.status_code == 400 and r.json()["errors"] == ["OTP not found"], r.text
    r = target.req("PUT", "sys/leases/lookup", json={"lease_id": creds["lease_id"]})
    assert r.status_code == 400 and r.json()["errors"] == ["invalid lease"]


def test_revocation_stays_inside_its_namespace(target: Target) -> None:
    """A mount of the same path in a child namespace: disabling it, or revoking its prefix
    there, leaves the root namespace's tokens alone."""
    ns = unique("ns")
    target.ok("POST", f"sys/namespaces/{ns}")
    in_ns = {"X-Vault-Namespace": ns}
    mount, user, password = userpass(target)
    root_token = login(target, mount, user, password)
    target.ok("POST", f"sys/auth/{mount}", json={"type": "userpass"}, headers=in_ns)
    target.ok("POST", f"auth/{mount}/users/{user}", json={"password": password}, headers=in_ns)

    def ns_login() -> str:
        body = target.ok(
            "POST", f"auth/{mount}/login/{user}", json={"password": password}, headers=in_ns
        )
        return body["auth"]["client_token"]

    first = ns_login()
    assert target.alive(first, ns)
    # Each namespace lists its own leases only.
    listing = f"sys/leases/lookup/auth/{mount}/login/{user}/"
    (root_key,) = target.ok("LIST", listing)["data"]["keys"]
    (ns_key,) = target.ok("LIST", listing, headers=in_ns)["data"]["keys"]
    root_lease = f"auth/{mount}/login/{user}/{root_key}"
    ns_lease = f"auth/{mount}/login/{user}/{ns_key}"
    # A namespace sees its own leases and its children's, never its parent's.
    for lease, headers in ((ns_lease, in_ns), (ns_lease, None), (root_lease, None)):
        r = target.req("PUT", "sys/leases/lookup", json={"lease_id": lease}, headers=headers)
        assert r.status_code == 200, (lease, headers, r.text)
    r = target.req("PUT", "sys/leases/lookup", json={"lease_id": root_lease}, headers=in_ns)
    assert r.status_code == 400 and r.json()["errors"] == ["invalid lease"], r.text
    r = target.req("PUT", f"sys/leases/revoke-prefix/auth/{mount}", headers=in_ns)
    assert r.status_code == 204, r.text
    assert not target.alive(first, ns)
    assert target.alive(root_token)
    second = ns_login()
    assert target.alive(second, ns)
    r = target.req("DELETE", f"sys/auth/{mount}", headers=in_ns)
    assert r.status_code == 204, r.text
    assert not target.alive(second, ns)
    assert target.alive(root_token)

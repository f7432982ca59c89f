"""Secrets compare on their exact bytes (issue 19, item 4): a credential followed by NUL (or a
NUL-free prefix of a credential that ends in NUL) is a different credential. Passwords, approle
role and secret ids, tokens, accessors, wrapping tokens and SSH OTPs; each case runs against a
real `trellis dev` and the real OpenBao dev server, so the refusals are OpenBao's."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.security.secrets_targets import (
    Target,
    login,
    ssh_otp_mount,
    unique,
    userpass,
)

NUL = "\u0000"


def _refused(t: Target, path: str, payload: dict[str, str], status: int, message: str) -> None:
    r = t.req("POST", path, json=payload)
    assert r.status_code == status, (path, payload, r.status_code, r.text)
    assert any(message in e for e in r.json()["errors"]), r.text


@pytest.mark.parametrize("suffix", [NUL, NUL * 3, NUL + "x"], ids=["nul", "nuls", "nul-x"])
def test_userpass_refuses_a_nul_suffixed_password(target: Target, suffix: str) -> None:
    mount, user, password = userpass(target)
    _refused(
        target,
        f"auth/{mount}/login/{user}",
        {"password": password + suffix},
        400,
        "invalid username or password",
    )
    assert target.alive(login(target, mount, user, password))


def test_userpass_password_ending_in_nul_is_not_its_prefix(target: Target) -> None:
    mount, user = unique("up"), "bob"
    target.ok("POST", f"sys/auth/{mount}", json={"type": "userpass"})
    target.ok("POST", f"auth/{mount}/users/{user}", json={"password": "pw" + NUL})
    _refused(
        target,
        f"auth/{mount}/login/{user}",
        {"password": "pw"},
        400,
        "invalid username or password",
    )
    assert target.alive(login(target, mount, user, "pw" + NUL))


def _approle(t: Target) -> tuple[str, str, str]:
    mount = unique("ar")
    t.ok("POST", f"sys/auth/{mount}", json={"type": "approle"})
    t.ok("POST", f"auth/{mount}/role/r1", json={"token_policies": "default"})
    role_id = t.ok("GET", f"auth/{mount}/role/r1/role-id")["data"]["role_id"]
    secret_id = t.ok("POST", f"auth/{mount}/role/r1/secret-id")["data"]["secret_id"]
    return mount, role_id, secret_id


def test_approle_refuses_nul_suffixed_ids(target: Target) -> None:
    mount, role_id, secret_id = _approle(target)
    for rid, sid in (
        (role_id + NUL, secret_id),
        (role_id, secret_id + NUL),
        (role_id + "\x1f", secret_id),
    ):
        _refused(
            target,
            f"auth/{mount}/login",
            {"role_id": rid, "secret_id": sid},
            400,
            "invalid role or secret ID",
        )
    # Vault trims Go whitespace (and only that) around both ids.
    body = target.ok(
        "POST",
        f"auth/{mount}/login",
        json={"role_id": f" {role_id}\n", "secret_id": f"{secret_id} "},
    )
    assert target.alive(body["auth"]["client_token"])


def test_tokens_and_accessors_compare_on_exact_bytes(target: Target) -> None:
    mount, user, password = userpass(target)
    token = login(target, mount, user, password)
    accessor = target.ok("GET", "auth/token/lookup-self", token=token)["data"]["accessor"]
    _refused(target, "auth/token/lookup", {"token": token + NUL}, 403, "bad token")
    _refused(target, "auth/token/renew", {"token": token + NUL}, 400, "token not found")
    _refused(
        target, "auth/token/lookup-accessor", {"accessor": accessor + NUL}, 400, "invalid accessor"
    )
    r = target.req("POST", "auth/token/revoke", json={"token": token + NUL})
    assert r.status_code == 204, r.text
    r = target.req("POST", "auth/token/revoke-accessor", json={"accessor": accessor + NUL})
    assert r.status_code == 200, r.text
    assert r.json()["warnings"] == ["No token found with this accessor"]
    assert target.alive(token)  # neither revocation reached the real token


def test_wrapping_tokens_compare_on_exact_bytes(target: Target) -> None:
    r = target.req("POST", "sys/wrapping/wrap", json={"k": "v"}, headers={"X-Vault-Wrap-TTL": "5m"})
    assert r.status_code == 200, r.text
    wrap = r.json()["wrap_info"]["token"]
    for path in ("sys/wrapping/lookup", "sys/wrapping/unwrap"):
        _refused(
            target,
            path,
            {"token": wrap + NUL},
            400,
            "wrapping token is not valid or does not exist",
        )
    assert target.ok("POST", "sys/wrapping/unwrap", json={"token": wrap})["data"] == {"k": "v"}


def test_ssh_otp_compares_on_exact_bytes(target: Target) -> None:
    mount = unique("ssh")
    ssh_otp_mount(target, mount)
    otp = target.ok("POST", f"{mount}/creds/otp", json={"ip": "127.0.0.1"})["data"]["key"]
    _refused(target, f"{mount}/verify", {"otp": otp + NUL}, 400, "OTP not found")
    data = target.ok("POST", f"{mount}/verify", json={"otp": otp})["data"]
    assert data["username"] == "ubuntu" and data["ip"] == "127.0.0.1"


def test_token_bound_cidrs_hold_at_every_use(target: Target) -> None:
    """A login token bound to 127.0.0.1/32 works from there and nowhere else: the binding is
    checked on every use, not only at login."""
    mount, user = unique("up"), "carol"
    target.ok("POST", f"sys/auth/{mount}", json={"type": "userpass"})
    target.ok(
        "POST",
        f"auth/{mount}/users/{user}",
        json={"password": "pw", "token_bound_cidrs": "127.0.0.1/32"},
    )
    token = login(target, mount, user, "pw")
    assert target.status_from("127.0.0.1", "GET", "auth/token/lookup-self", token) == 200
    assert target.status_from("127.0.0.2", "GET", "auth/token/lookup-self", token) == 403
    # The same for an approle secret id's own token_bound_cidrs.
    mount, role_id, _ = _approle(target)
    secret_id = target.ok(
        "POST", f"auth/{mount}/role/r1/secret-id", json={"token_bound_cidrs": "127.0.0.1/32"}
    )["data"]["secret_id"]
    body = target.ok(
        "POST", f"auth/{mount}/login", json={"role_id": role_id, "secret_id": secret_id}
    )
    token = body["auth"]["client_token"]
    assert target.status_from("127.0.0.1", "GET", "auth/token/lookup-self", token) == 200
    assert target.status_from("127.0.0.2", "GET", "auth/token/lookup-self", token) == 403


@pytest.mark.parametrize(
    "path_of, payload",
    [
        (lambda m: f"auth/{m}/login/alice", {"password": "s3cret\ud800"}),
        (lambda m: "auth/token/lookup", {"token": "hvs.\ud800"}),
        (lambda m: "auth/token/lookup-accessor", {"accessor": "\udfff"}),
        (lambda m: "sys/wrapping/unwrap", {"token": "\ud800"}),
    ],
    ids=["password", "token", "accessor", "wrapping-token"],
)
def test_a_lone_surrogate_credential_is_refused_not_a_crash(
    target: Target, path_of: Any, payload: dict[str, str]
) -> None:
    mount, _, _ = userpass(target)
    r = target.req("POST", path_of(mount), json=payload)
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.json()["errors"], r.text


def test_a_wrapping_token_unwraps_once_under_concurrency(target: Target) -> None:
    r = target.req("POST", "sys/wrapping/wrap", json={"k": "v"}, headers={"X-Vault-Wrap-TTL": "5m"})
    wrap = r.json()["wrap_info"]["token"]
    with ThreadPoolExecutor(8) as pool:
        answers = list(
            pool.map(
                lambda _: target.req("POST", "sys/wrapping/unwrap", json={"token": wrap}),
                range(8),
            )
        )
    statuses = sorted(a.status_code for a in answers)
    # The wrapped data comes back once, whoever wins.
    unwrapped = [a for a in answers if a.status_code == 200 and a.json().get("data")]
    assert [a.json()["data"] for a in unwrapped] == [{"k": "v"}], statuses
    if target.name == "openbao":
        # OpenBao 2.7.2 races here itself: a loser now and then gets an empty 204 or a 500
        # (seen in about 1 run in 15), never the data.
        assert set(statuses) <= {200, 204, 400, 500}, statuses
    else:
        assert statuses == [200] + [400] * 7, statuses

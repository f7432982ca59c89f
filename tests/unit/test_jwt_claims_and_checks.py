"""The pure parts of the jwt/oidc auth method and the identity token issuer: claim lookup and
bound claims, time leeways, redirect URI matching, key rotation and identity templates."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from services.secrets.auth.jwt_claims import (
    ClaimError,
    check_bound_claims,
    get_claim,
    mapped_metadata,
)
from services.secrets.auth.jwt_verify import Expected, PublicKey, VerifyError, jwks_keys, verify
from services.secrets.auth.oidc_flow import valid_redirect
from services.secrets.identity.access import EntityView
from services.secrets.identity.oidc_keys import KeyVersion
from services.secrets.identity.oidc_store import NamedKey, rotated
from services.secrets.identity.oidc_template import TemplateError, claims

CLAIMS: dict[str, Any] = {
    "sub": "u1",
    "groups": ["ops", "dev"],
    "nested": {"team": {"name": "blue/7"}, "list": ["a", "b"]},
    "admin": True,
    "level": 3,
}


def test_json_pointer_claims() -> None:
    assert get_claim(CLAIMS, "/nested/team/name") == "blue/7"
    assert get_claim(CLAIMS, "/nested/list/1") == "b"
    assert get_claim(CLAIMS, "/nested/list/9") is None
    assert get_claim(CLAIMS, "nested/team") is None  # only a leading / makes a pointer


@pytest.mark.parametrize(
    ("kind", "bound", "ok"),
    [
        ("string", {"groups": "ops"}, True),
        ("string", {"groups": ["qa", "dev"]}, True),
        ("string", {"groups": "qa"}, False),
        ("string", {"admin": "true", "level": 3}, True),
        ("string", {"missing": "x"}, False),
        ("glob", {"/nested/team/name": "blue/*"}, True),
        ("glob", {"/nested/team/name": "red*"}, False),
    ],
)
def test_bound_claims(kind: str, bound: dict[str, Any], ok: bool) -> None:
    if ok:
        check_bound_claims(kind, bound, CLAIMS)
    else:
        with pytest.raises(ClaimError):
            check_bound_claims(kind, bound, CLAIMS)


def test_claim_mappings_take_scalars_only() -> None:
    assert mapped_metadata({"level": "lvl", "absent": "x"}, CLAIMS) == {"lvl": "3"}
    with pytest.raises(ClaimError):
        mapped_metadata({"groups": "g"}, CLAIMS)


def _signed(**claims: Any) -> tuple[str, list[PublicKey]]:
    key = ec.generate_private_key(ec.SECP256R1())
    return jwt.encode(claims, key, "ES256"), [PublicKey(key.public_key())]


@pytest.mark.parametrize(
    ("offset", "leeway", "ok"),
    [(-100, 0, True), (-300, 0, False), (-100, -1, False), (-100, 30, False), (60, -1, True)],
)
def test_expiry_leeway(offset: int, leeway: int, ok: bool) -> None:
    token, keys = _signed(sub="s", exp=int(time.time()) + offset)
    # Clock skew off, so only the expiration leeway (default 150 s) counts.
    e = Expected(algorithms=["ES256"], expiration_leeway=leeway, clock_skew_leeway=-1)
    if ok:
        assert verify(token, keys, e)["sub"] == "s"
    else:
        with pytest.raises(VerifyError, match="expired"):
            verify(token, keys, e)


def test_verify_refuses_other_algorithms_and_audiences() -> None:
    token, keys = _signed(sub="s", aud=["a", "b"])
    assert verify(token, keys, Expected(algorithms=["ES256"], audiences=["b"]))
    with pytest.raises(VerifyError, match="audience"):
        verify(token, keys, Expected(algorithms=["ES256"], audiences=["c"]))
    with pytest.raises(VerifyError, match="algorithm"):
        verify(token, keys, Expected(algorithms=["RS256"]))


def test_keys_of_another_type_are_skipped_not_errors() -> None:
    token, keys = _signed(sub="s")
    rsa_key = PublicKey(rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key())
    assert verify(token, [rsa_key, *keys], Expected(algorithms=["ES256"]))["sub"] == "s"
    with pytest.raises(VerifyError, match="signature"):
        verify(token, [rsa_key], Expected(algorithms=["ES256"]))
    # Symmetric keys in a JWKS are ignored: a published value must never verify a token.
    assert jwks_keys({"keys": [{"kty": "oct", "k": "c2VjcmV0"}, {"kty": "RSA"}]}) == []


@pytest.mark.parametrize(
    ("uri", "ok"),
    [
        ("https://app.example/cb", True),
        ("https://app.example/cb/", False),
        ("http://localhost:9999/oidc/callback", True),  # loopback: any port
        ("http://127.0.0.1:8250/oidc/callback", False),  # but the same host name
        ("http://localhost:9999/other", False),
    ],
)
def test_redirect_uris(uri: str, ok: bool) -> None:
    allowed = ["https://app.example/cb", "http://localhost:8250/oidc/callback"]
    assert valid_redirect(uri, allowed) is ok


def _version(kid: str) -> KeyVersion:
    return KeyVersion(kid=kid, public_jwk={"kid": kid}, private_pem="pem-" + kid)


def test_rotation_retires_the_signing_key_for_its_verification_ttl() -> None:
    key = NamedKey(verification_ttl=600, signing=_version("a"), upcoming=_version("b"))
    after = rotated(key, _version("c"), 30)
    assert after.signing and after.signing.kid == "b"
    assert after.upcoming and after.upcoming.kid == "c"
    (old,) = after.retired
    assert old.kid == "a" and old.private_pem == ""  # retired keys only verify
    now = time.time()
    assert [k.kid for k in after.public_keys(now)] == ["b", "c", "a"]
    assert [k.kid for k in after.public_keys(now + 31)] == ["b", "c"]


def test_identity_templates() -> None:
    entity = EntityView(
        id="e1",
        name="alice",
        namespace_id="root",
        metadata={"email": "a@example.com"},
        disabled=False,
        group_ids=["g1"],
        group_names=["ops"],
        aliases=[],
    )
    template = (
        '{"email": {{identity.entity.metadata.email}}, "groups": {{identity.entity.groups.names}},'
        ' "who": {"name": {{identity.entity.name}}, "missing": {{identity.entity.metadata.x}}}}'
    )
    assert claims(template, entity) == {
        "email": "a@example.com",
        "groups": ["ops"],
        "who": {"name": "alice", "missing": ""},
    }
    for bad in ('{"aud": "x"}', "[1]", "{{identity.entity.nope}}", "{"):
        with pytest.raises(TemplateError):
            claims(bad, entity)

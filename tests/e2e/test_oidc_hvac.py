"""Identity tokens and the jwt/oidc auth methods with unmodified hvac through `trellis dev`.

Identity tokens are checked independently: PyJWT verifies them against the JWKS fetched over
plain HTTP without a token. JWT logins use keys this test holds, served by a small HTTPS OIDC
provider (tests/fakes/oidc_provider.py), which also runs the browser flow's code exchange."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import hvac
import hvac.exceptions
import jwt
import nats
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from services.dev_nats import credentials, read_credentials
from tests.fakes.oidc_provider import Provider, start_provider
from tests.procs import DevProcess, dev, until

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server() -> Iterator[DevProcess]:
    with dev("--services", "crypto") as d:
        yield d


@pytest.fixture(scope="module")
def root(server: DevProcess) -> hvac.Client:
    return hvac.Client(url=server.secrets, token=server.root_token)


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    p = start_provider()
    yield p
    p.stop()


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def user_client(root: hvac.Client, server: DevProcess) -> hvac.Client:
    """A client logged in through userpass (so its token has an entity) that may ask for
    identity tokens."""
    mount, user = name("up"), name("user")
    root.sys.enable_auth_method("userpass", path=mount)
    root.sys.create_or_update_policy(
        mount, 'path "identity/oidc/token/*" { capabilities = ["read"] }'
    )
    root.write(f"auth/{mount}/users/{user}", password="pw", token_policies=mount)
    c = hvac.Client(url=server.secrets)
    c.auth.userpass.login(user, "pw", mount_point=mount)
    return c


def public_get(server: DevProcess, path: str) -> dict[str, Any]:
    resp = requests.get(f"{server.secrets}/v1/{path}", timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()


def verify_independently(server: DevProcess, token: str, audience: str) -> dict[str, Any]:
    """Checks `token` as a relying party would: discovery, then the JWKS, then PyJWT."""
    discovery = public_get(server, "identity/oidc/.well-known/openid-configuration")
    keys = requests.get(discovery["jwks_uri"], timeout=10).json()["keys"]
    kid = jwt.get_unverified_header(token)["kid"]
    (jwk,) = [k for k in keys if k["kid"] == kid]
    return jwt.decode(
        token,
        jwt.PyJWK(jwk).key,
        algorithms=discovery["id_token_signing_alg_values_supported"],
        audience=audience,
        issuer=discovery["issuer"],
    )


def make_role(root: hvac.Client, algorithm: str = "RS256", **role: Any) -> tuple[str, str, str]:
    """(key name, role name, client id) of a new key and a role allowed to use it."""
    idn = root.secrets.identity
    key, role_name = name("key"), name("role")
    idn.create_named_key(key, algorithm=algorithm)
    idn.create_or_update_role(role_name, key=key, **role)
    client_id = idn.read_role(role_name)["data"]["client_id"]
    idn.create_named_key(key, algorithm=algorithm, allowed_client_ids=[client_id])
    return key, role_name, client_id


# ---- identity tokens ------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", ["RS256", "ES384", "EdDSA"])
def test_signed_id_token_verifies_against_the_public_jwks(
    root: hvac.Client, server: DevProcess, algorithm: str
) -> None:
    template = '{"nick": {{identity.entity.name}}, "groups": {{identity.entity.groups.names}}}'
    key, role, client_id = make_role(root, algorithm, template=template, ttl="30m")
    assert root.secrets.identity.read_named_key(key)["data"]["algorithm"] == algorithm
    assert key in root.secrets.identity.list_named_keys()["data"]["keys"]
    assert role in root.secrets.identity.list_roles()["data"]["keys"]
    user = user_client(root, server)
    entity_id = user.lookup_token()["data"]["entity_id"]
    assert entity_id
    entity_name = root.secrets.identity.read_entity(entity_id)["data"]["name"]

    got = user.secrets.identity.generate_signed_id_token(role)["data"]
    assert got["client_id"] == client_id and got["ttl"] == 1800
    claims = verify_independently(server, got["token"], client_id)
    assert claims["sub"] == entity_id
    assert claims["namespace"] == "root"
    assert claims["exp"] - claims["iat"] == 1800
    assert claims["nick"] == entity_name and claims["groups"] == []

    idn = root.secrets.identity
    assert idn.introspect_signed_id_token(got["token"], client_id=client_id) == {"active": True}
    assert idn.introspect_signed_id_token(got["token"], client_id="someone-else")["active"] is False
    head, body, sig = got["token"].split(".")
    forged = f"{head}.{body}.{sig[:-4]}AAAA"
    assert idn.introspect_signed_id_token(forged)["active"] is False


def test_rotation_keeps_the_old_key_in_the_jwks_until_verification_ttl(
    root: hvac.Client, server: DevProcess
) -> None:
    key, role, client_id = make_role(root)
    user = user_client(root, server)
    before = user.secrets.identity.generate_signed_id_token(role)["data"]["token"]
    old_kid = jwt.get_unverified_header(before)["kid"]

    root.write(f"identity/oidc/key/{key}/rotate", verification_ttl=3)
    after = user.secrets.identity.generate_signed_id_token(role)["data"]["token"]
    assert jwt.get_unverified_header(after)["kid"] != old_kid
    # Both verify while the old key is within its verification TTL ...
    verify_independently(server, before, client_id)
    verify_independently(server, after, client_id)

    def old_key_gone() -> bool:
        keys = public_get(server, "identity/oidc/.well-known/keys")["keys"]
        return old_kid not in {k["kid"] for k in keys}

    # ... and the old one leaves the JWKS once it has passed.
    until(old_key_gone, timeout=30, what="the rotated key leaving the JWKS")
    assert root.secrets.identity.introspect_signed_id_token(before)["active"] is False
    verify_independently(server, after, client_id)


def test_identity_token_mistakes_are_4xx(root: hvac.Client, server: DevProcess) -> None:
    idn = root.secrets.identity
    key, role, _ = make_role(root)
    bad_calls = [
        lambda: idn.create_or_update_role(name("role"), key=name("missing")),
        lambda: idn.create_or_update_role(name("role"), key=key, template='{"sub": "x"}'),
        lambda: idn.create_or_update_role(name("role"), key=key, template="{not json"),
        lambda: idn.create_named_key(name("key"), algorithm="HS256"),
        lambda: idn.create_named_key(name("key"), rotation_period="10s"),
        lambda: idn.delete_named_key(key),  # a role uses it
        lambda: idn.configure_tokens_backend(issuer="https://example.com/path"),
        # The root token has no entity.
        lambda: idn.generate_signed_id_token(role),
        lambda: user_client(root, server).secrets.identity.generate_signed_id_token(name("nope")),
    ]
    for call in bad_calls:
        with pytest.raises(hvac.exceptions.InvalidRequest):
            call()
    # A key that does not list the role's client ID refuses to sign for it.
    other_key, other_role, _ = make_role(root)
    idn.create_named_key(other_key, allowed_client_ids=["someone-else"])
    with pytest.raises(hvac.exceptions.InvalidRequest, match="allowed client ID"):
        user_client(root, server).secrets.identity.generate_signed_id_token(other_role)


# ---- jwt logins -----------------------------------------------------------------------------
def jwt_mount(root: hvac.Client, provider: Provider, **role: Any) -> tuple[str, str]:
    mount, role_name = name("jwt"), name("role")
    root.sys.enable_auth_method("jwt", path=mount)
    root.auth.jwt.configure(
        jwks_url=provider.url + "/keys", jwks_ca_pem=provider.ca_pem, path=mount
    )
    root.auth.jwt.create_role(
        role_name,
        role_type="jwt",
        user_claim="email",
        allowed_redirect_uris=[],
        bound_audiences=["trellis-test"],
        path=mount,
        **role,
    )
    return mount, role_name


def test_jwt_login_with_keys_from_a_local_jwks(
    root: hvac.Client, server: DevProcess, provider: Provider
) -> None:
    mount, role = jwt_mount(
        root,
        provider,
        claim_mappings={"team": "team"},
        bound_claims={"team": "blue-*"},
        bound_claims_type="glob",
        token_policies=["default"],
        token_ttl="10m",
    )
    email = f"{name('u')}@example.com"
    token = provider.id_token("trellis-test", "s1", email=email, team="blue-7")
    c = hvac.Client(url=server.secrets)
    auth = c.auth.jwt.jwt_login(role, token, path=mount)["auth"]
    assert auth["metadata"] == {"role": role, "team": "blue-7"}
    assert auth["lease_duration"] == 600
    me = c.lookup_token()["data"]
    assert me["meta"]["role"] == role and me["entity_id"]
    # The same user again is the same entity (its alias is the email).
    again = hvac.Client(url=server.secrets)
    again.auth.jwt.jwt_login(role, token, path=mount)
    assert again.lookup_token()["data"]["entity_id"] == me["entity_id"]
    assert root.auth.jwt.read_config(path=mount)["data"]["jwks_url"] == provider.url + "/keys"
    assert root.auth.jwt.read_role(role, path=mount)["data"]["bound_claims"] == {"team": "blue-*"}
    assert role in root.auth.jwt.list_roles(path=mount)["data"]["keys"]


def test_jwt_login_refusals_are_4xx(
    root: hvac.Client, server: DevProcess, provider: Provider
) -> None:
    mount, role = jwt_mount(root, provider, bound_claims={"team": "blue"})
    email = f"{name('u')}@example.com"
    now = int(time.time())
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    good = {"iss": provider.url, "sub": "s", "email": email, "team": "blue", "aud": "trellis-test"}
    bad_tokens = {
        "garbage": "not.a.jwt",
        "wrong audience": provider.sign({**good, "aud": "other", "exp": now + 60}),
        "expired": provider.sign({**good, "exp": now - 3600}),
        "not yet valid": provider.sign({**good, "nbf": now + 3600}),
        "other signer": provider.sign({**good, "exp": now + 60}, key=stranger),
        "unsigned": jwt.encode({**good, "exp": now + 60}, None, "none"),
        "bound claim": provider.sign({**good, "team": "red", "exp": now + 60}),
        "no user claim": provider.sign({**good, "email": None, "exp": now + 60}),
    }
    c = hvac.Client(url=server.secrets)
    for label, token in bad_tokens.items():
        with pytest.raises(hvac.exceptions.InvalidRequest):
            c.auth.jwt.jwt_login(role, token, path=mount)
            pytest.fail(f"{label} logged in")
    with pytest.raises(hvac.exceptions.InvalidRequest):
        c.auth.jwt.jwt_login(name("nope"), provider.sign({**good, "exp": now + 60}), path=mount)
    c.auth.jwt.jwt_login(role, provider.sign({**good, "exp": now + 60}), path=mount)
    # The provider's certificate is not trusted without its CA.
    with pytest.raises(hvac.exceptions.InvalidRequest, match="error checking"):
        root.auth.jwt.configure(jwks_url=provider.url + "/keys", path=mount)
    with pytest.raises(hvac.exceptions.InvalidRequest):
        root.auth.jwt.configure(oidc_discovery_url=provider.url, path=mount)


def test_jwt_expiry_leeway(root: hvac.Client, server: DevProcess, provider: Provider) -> None:
    mount, lenient = jwt_mount(root, provider)
    strict = name("strict")
    root.auth.jwt.create_role(
        strict,
        role_type="jwt",
        user_claim="email",
        allowed_redirect_uris=[],
        bound_audiences=["trellis-test"],
        expiration_leeway=-1,
        clock_skew_leeway=-1,
        path=mount,
    )
    assert root.auth.jwt.read_role(strict, path=mount)["data"]["expiration_leeway"] == -1
    now = int(time.time())
    claims = {"aud": "trellis-test", "email": f"{name('u')}@example.com", "exp": now - 30}
    late = provider.sign(claims)
    c = hvac.Client(url=server.secrets)
    c.auth.jwt.jwt_login(lenient, late, path=mount)  # within the default 150 s + 60 s
    with pytest.raises(hvac.exceptions.InvalidRequest, match="expired"):
        c.auth.jwt.jwt_login(strict, late, path=mount)
    with pytest.raises(hvac.exceptions.InvalidRequest):
        root.auth.jwt.create_role(
            strict,
            user_claim="email",
            allowed_redirect_uris=[],
            role_type="jwt",
            bound_audiences=["x"],
            expiration_leeway=-5,
            path=mount,
        )


def test_jwt_login_with_static_keys_and_bound_issuer(
    root: hvac.Client, server: DevProcess, provider: Provider
) -> None:
    mount, role = jwt_mount(root, provider)
    pem = provider.signing_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    root.auth.jwt.configure(
        jwt_validation_pubkeys=[pem.decode()], bound_issuer=provider.url, path=mount
    )
    c = hvac.Client(url=server.secrets)
    email = f"{name('u')}@example.com"
    c.auth.jwt.jwt_login(role, provider.id_token("trellis-test", "s", email=email), path=mount)
    now = int(time.time())
    elsewhere = provider.sign(
        {"iss": "https://elsewhere", "aud": "trellis-test", "email": email, "exp": now + 60}
    )
    with pytest.raises(hvac.exceptions.InvalidRequest, match="issuer"):
        c.auth.jwt.jwt_login(role, elsewhere, path=mount)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="public key"):
        root.auth.jwt.configure(jwt_validation_pubkeys=["not a key"], path=mount)


def test_jwt_login_with_trellis_identity_tokens(root: hvac.Client, server: DevProcess) -> None:
    """The flow of hvac's own test: Trellis's identity issuer as the JWT method's provider."""
    root.secrets.identity.configure_tokens_backend(issuer=server.secrets)
    try:
        _, id_role, client_id = make_role(root)
        mount, role = name("jwt"), name("role")
        root.sys.enable_auth_method("jwt", path=mount)
        root.auth.jwt.configure(oidc_discovery_url=f"{server.secrets}/v1/identity/oidc", path=mount)
        root.auth.jwt.create_role(
            role,
            role_type="jwt",
            user_claim="sub",
            bound_audiences=[client_id],
            allowed_redirect_uris=[],
            path=mount,
        )
        user = user_client(root, server)
        token = user.secrets.identity.generate_signed_id_token(id_role)["data"]["token"]
        c = hvac.Client(url=server.secrets)
        c.auth.jwt.jwt_login(role, token, path=mount)
        assert c.lookup_token()["data"]["meta"]["role"] == role
    finally:
        root.secrets.identity.configure_tokens_backend(issuer="")


# ---- the oidc browser flow ------------------------------------------------------------------
def oidc_mount(root: hvac.Client, provider: Provider, **config: Any) -> tuple[str, str, str]:
    mount, role = name("oidc"), name("role")
    redirect = f"http://localhost:8250/{mount}/callback"
    root.sys.enable_auth_method("oidc", path=mount)
    root.auth.oidc.configure(
        oidc_discovery_url=provider.url,
        oidc_discovery_ca_pem=provider.ca_pem,
        oidc_client_id=provider.client_id,
        oidc_client_secret=provider.client_secret,
        path=mount,
        **config,
    )
    root.auth.oidc.create_role(
        role,
        allowed_redirect_uris=[redirect],
        user_claim="email",
        groups_claim="groups",
        path=mount,
    )
    return mount, role, redirect


def test_oidc_auth_url_and_callback(
    root: hvac.Client, server: DevProcess, provider: Provider
) -> None:
    mount, role, redirect = oidc_mount(root, provider)
    c = hvac.Client(url=server.secrets)
    auth_url = c.auth.oidc.oidc_authorization_url_request(role, redirect, path=mount)["data"][
        "auth_url"
    ]
    assert auth_url.startswith(f"{provider.url}/authorize?client_id={provider.client_id}&")
    email = f"{name('u')}@example.com"
    back = provider.approve(auth_url, subject="alice", email=email, groups=["ops"])
    q = {k: v[0] for k, v in parse_qs(urlsplit(back).query).items()}
    resp = c.auth.oidc.oidc_callback(q["state"], "", q["code"], path=mount)
    assert resp["auth"]["metadata"]["role"] == role
    c.token = resp["auth"]["client_token"]
    assert c.lookup_token()["data"]["entity_id"]
    # The state serves one callback.
    with pytest.raises(hvac.exceptions.InvalidRequest, match="OAuth state"):
        c.auth.oidc.oidc_callback(q["state"], "", q["code"], path=mount)


def test_a_failed_callback_consumes_its_state(
    root: hvac.Client, server: DevProcess, provider: Provider
) -> None:
    mount, role, redirect = oidc_mount(root, provider)
    c = hvac.Client(url=server.secrets)
    url = c.auth.oidc.oidc_authorization_url_request(role, redirect, path=mount)["data"]["auth_url"]
    back = provider.approve(url, subject="dave", email=f"{name('u')}@example.com", groups=[])
    q = {k: v[0] for k, v in parse_qs(urlsplit(back).query).items()}
    with pytest.raises(hvac.exceptions.InvalidRequest, match="exchanging oidc code"):
        c.auth.oidc.oidc_callback(q["state"], "", q["code"] + "x", path=mount)
    # As in OpenBao, the state went with the failed attempt: the genuine code comes too late.
    with pytest.raises(hvac.exceptions.InvalidRequest, match="OAuth state"):
        c.auth.oidc.oidc_callback(q["state"], "", q["code"], path=mount)


def secrets_writes(server: DevProcess) -> int:
    """The sequence of the secrets bucket's stream: it grows with every write to storage."""
    user, password = read_credentials(credentials(Path(server.data_dir))["secrets"])

    async def last_seq() -> int:
        nc = await nats.connect(server.nats_url, user=user, password=password)
        try:
            info = await nc.jetstream().stream_info("KV_trellis-secrets")
            return int(info.state.last_seq)
        finally:
            await nc.close()

    return asyncio.run(last_seq())


def test_oidc_auth_urls_write_nothing(
    root: hvac.Client, server: DevProcess, provider: Provider
) -> None:
    mount, role, redirect = oidc_mount(root, provider)
    c = hvac.Client(url=server.secrets)
    c.auth.oidc.oidc_authorization_url_request(role, redirect, path=mount)  # the mount's key
    before = secrets_writes(server)
    urls = [
        c.auth.oidc.oidc_authorization_url_request(role, redirect, path=mount)["data"]["auth_url"]
        for _ in range(30)
    ]
    assert secrets_writes(server) == before
    # Any of those states still logs in, once.
    back = provider.approve(urls[7], subject="carol", email=f"{name('u')}@example.com", groups=[])
    q = {k: v[0] for k, v in parse_qs(urlsplit(back).query).items()}
    resp = c.auth.oidc.oidc_callback(q["state"], "", q["code"], path=mount)
    assert resp["auth"]["metadata"]["role"] == role
    # An altered state is not one of ours.
    forged = q["state"][:-2] + ("AA" if not q["state"].endswith("AA") else "BB")
    with pytest.raises(hvac.exceptions.InvalidRequest, match="OAuth state"):
        c.auth.oidc.oidc_callback(forged, "", q["code"], path=mount)


def test_oidc_form_post_callback(root: hvac.Client, server: DevProcess, provider: Provider) -> None:
    mount, role, redirect = oidc_mount(
        root, provider, oidc_response_mode="form_post", oidc_response_types=["code"]
    )
    c = hvac.Client(url=server.secrets)
    auth_url = c.auth.oidc.oidc_authorization_url_request(role, redirect, path=mount)["data"][
        "auth_url"
    ]
    assert "response_mode=form_post" in auth_url
    back = provider.approve(
        auth_url, subject="bob", email=f"{name('u')}@example.com", groups=["dev"]
    )
    q = {k: v[0] for k, v in parse_qs(urlsplit(back).query).items()}
    resp = requests.post(
        f"{server.secrets}/v1/auth/{mount}/oidc/callback",
        data={"state": q["state"], "code": q["code"]},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["auth"]["metadata"]["role"] == role


def oidc_login(
    server: DevProcess, provider: Provider, mount: str, role: str, redirect: str, **claims: Any
) -> dict[str, Any]:
    """The auth block of a browser login as a user with `claims`."""
    c = hvac.Client(url=server.secrets)
    url = c.auth.oidc.oidc_authorization_url_request(role, redirect, path=mount)["data"]["auth_url"]
    q = {k: v[0] for k, v in parse_qs(urlsplit(provider.approve(url, **claims)).query).items()}
    return c.auth.oidc.oidc_callback(q["state"], "", q["code"], path=mount)["auth"]


def test_groups_claim_sets_external_group_membership(
    root: hvac.Client, server: DevProcess, provider: Provider
) -> None:
    mount, role, redirect = oidc_mount(root, provider)
    accessor = root.sys.list_auth_methods()["data"][f"{mount}/"]["accessor"]
    idn = root.secrets.identity
    groups = {}
    # Only ops may list the auth methods.
    rules = {"ops": 'path "sys/auth" { capabilities = ["read"] }', "dev": ""}
    for team in ("ops", "dev"):
        policy = name(f"{team}-pol")
        root.sys.create_or_update_policy(policy, rules[team] or 'path "x/*" { capabilities = [] }')
        group = idn.create_or_update_group(name(team), group_type="external", policies=[policy])
        alias = name(f"{team}-claim")
        idn.create_or_update_group_alias(
            alias, mount_accessor=accessor, canonical_id=group["data"]["id"]
        )
        groups[team] = (group["data"]["id"], policy, alias)
    email = f"{name('u')}@example.com"

    def members(team: str) -> list[str]:
        data = idn.read_group(groups[team][0])["data"]
        return data["member_entity_ids"] or []

    first = oidc_login(
        server,
        provider,
        mount,
        role,
        redirect,
        subject="dana",
        email=email,
        groups=[groups["ops"][2], "no-such-group"],
    )
    assert groups["ops"][1] in first["policies"] and groups["dev"][1] not in first["policies"]
    assert members("ops") == [first["entity_id"]] and members("dev") == []
    ops_token = hvac.Client(url=server.secrets, token=first["client_token"])
    assert f"{mount}/" in ops_token.sys.list_auth_methods()["data"]
    # The provider now says dev only: the entity leaves ops, and the policy leaves its tokens.
    second = oidc_login(
        server,
        provider,
        mount,
        role,
        redirect,
        subject="dana",
        email=email,
        groups=[groups["dev"][2]],
    )
    assert second["entity_id"] == first["entity_id"]
    assert groups["dev"][1] in second["policies"] and groups["ops"][1] not in second["policies"]
    assert members("ops") == [] and members("dev") == [first["entity_id"]]
    with pytest.raises(hvac.exceptions.Forbidden):
        ops_token.sys.list_auth_methods()


def test_oidc_flow_refusals_are_4xx(
    root: hvac.Client, server: DevProcess, provider: Provider
) -> None:
    mount, role, redirect = oidc_mount(root, provider)
    c = hvac.Client(url=server.secrets)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="redirect_uri"):
        c.auth.oidc.oidc_authorization_url_request(role, "https://evil.example/cb", path=mount)
    with pytest.raises(hvac.exceptions.InvalidRequest):
        c.auth.oidc.oidc_authorization_url_request(name("nope"), redirect, path=mount)
    with pytest.raises(hvac.exceptions.InvalidRequest, match="OAuth state"):
        c.auth.oidc.oidc_callback("0" * 40, "", "code", path=mount)
    # A code the provider refuses (wrong client secret): 400, and the secret stays out of it.
    auth_url = c.auth.oidc.oidc_authorization_url_request(role, redirect, path=mount)["data"][
        "auth_url"
    ]
    back = provider.approve(auth_url, subject="eve", email="eve@example.com", groups=[])
    q = {k: v[0] for k, v in parse_qs(urlsplit(back).query).items()}
    root.auth.oidc.configure(
        oidc_discovery_url=provider.url,
        oidc_discovery_ca_pem=provider.ca_pem,
        oidc_client_id=provider.client_id,
        oidc_client_secret="wrong-secret-value",
        path=mount,
    )
    with pytest.raises(hvac.exceptions.InvalidRequest) as err:
        c.auth.oidc.oidc_callback(q["state"], "", q["code"], path=mount)
    assert "invalid_client" in str(err.value) and "wrong-secret-value" not in str(err.value)
    assert "oidc_client_secret" not in root.auth.oidc.read_config(path=mount)["data"]

"""PKI engine policy, without I/O: name rules of roles, SAN checks, lifetimes, role validation
and the text helpers."""

from __future__ import annotations

import pytest

from services.secrets.engines.pki import names
from services.secrets.engines.pki.models import IssuerEntry
from services.secrets.engines.pki.pem import (
    as_format,
    normalize_serial,
    parse_time,
    serial_key,
    short_duration,
)
from services.secrets.engines.pki.roles import Role, normalize
from services.secrets.engines.pki.ttl import limit_to_issuer, validity
from services.secrets.errors import SecretsError


def role(**kw: object) -> Role:
    return normalize(Role(name="r", **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "name", "ok"),
    [
        ({"allowed_domains": ["example.com"]}, "example.com", False),
        ({"allowed_domains": ["example.com"], "allow_bare_domains": True}, "example.com", True),
        ({"allowed_domains": ["example.com"], "allow_bare_domains": True}, "EXAMPLE.com", True),
        ({"allowed_domains": ["example.com"], "allow_subdomains": True}, "a.b.example.com", True),
        ({"allowed_domains": ["example.com"], "allow_subdomains": True}, "*.example.com", True),
        ({"allowed_domains": ["example.com"], "allow_subdomains": True}, "badexample.com", False),
        (
            {
                "allowed_domains": ["example.com"],
                "allow_subdomains": True,
                "allow_wildcard_certificates": False,
            },
            "*.example.com",
            False,
        ),
        (
            {"allowed_domains": ["*.example.com"], "allow_glob_domains": True},
            "x.y.example.com",
            True,
        ),
        (
            {"allowed_domains": ["ftp*.example.com"], "allow_glob_domains": True},
            "ftp1.example.com",
            True,
        ),
        (
            {"allowed_domains": ["ftp*.example.com"], "allow_glob_domains": True},
            "www.example.com",
            False,
        ),
        ({"allowed_domains": ["*.example.com"]}, "x.example.com", False),  # glob not allowed
        ({}, "localhost", True),
        ({"allow_localhost": False}, "localhost", False),
        ({"allow_any_name": True}, "anything.at.all", True),
        ({"allow_any_name": True}, "not a hostname", False),  # enforce_hostnames still holds
        ({"allow_any_name": True, "enforce_hostnames": False}, "not a hostname", True),
        (
            {"allowed_domains": ["example.com"], "allow_subdomains": True},
            "me@sub.example.com",
            True,
        ),
        ({"allowed_domains": ["example.com"], "allow_bare_domains": True}, "me@example.com", True),
        ({"allowed_domains": ["example.com"], "allow_subdomains": True}, "me@*.example.com", False),
        ({"allowed_domains": ["example.com"], "allow_subdomains": True}, "@example.com", False),
        ({"allowed_domains": ["example.com"], "allow_subdomains": True}, "-bad.example.com", False),
    ],
)
def test_name_rules(kw: dict[str, object], name: str, ok: bool) -> None:
    assert names.name_allowed(role(**kw), name) is ok


def test_cn_validations() -> None:
    r = role(allow_any_name=True, enforce_hostnames=False, cn_validations=["hostname"])
    assert names.cn_allowed(r, "host.example.com")
    assert not names.cn_allowed(r, "me@example.com")
    assert names.cn_allowed(role(cn_validations=["disabled"]), "Any Text At All")
    assert names.cn_allowed(role(allow_any_name=True), "me@example.com")


def test_one_bad_name_rejects_the_request() -> None:
    r = role(allowed_domains=["example.com"], allow_subdomains=True)
    names.check_names(r, "a.example.com", ["a.example.com", "b.example.com"], [])
    with pytest.raises(SecretsError, match=r"subject alternate name evil\.com not allowed"):
        names.check_names(r, "a.example.com", ["a.example.com", "evil.com"], [])
    with pytest.raises(SecretsError, match=r"common name evil\.com not allowed"):
        names.check_names(r, "evil.com", [], [])
    with pytest.raises(SecretsError, match=r"email address x@evil\.com not allowed"):
        names.check_names(r, "a.example.com", [], ["x@evil.com"])


def test_ip_uri_and_other_sans() -> None:
    assert names.check_ips(role(), ["10.0.0.1", "::1"]) == ["10.0.0.1", "::1"]
    with pytest.raises(SecretsError, match="IP Subject Alternative Names are not allowed"):
        names.check_ips(role(allow_ip_sans=False), ["10.0.0.1"])
    with pytest.raises(SecretsError, match="not a valid IP address"):
        names.check_ips(role(), ["10.0.0.300"])
    r = role(allowed_uri_sans=["spiffe://example.com/*"])
    assert names.check_uris(r, ["spiffe://example.com/web"]) == ["spiffe://example.com/web"]
    with pytest.raises(SecretsError, match="URI Subject Alternative Name spiffe://other/x"):
        names.check_uris(r, ["spiffe://other/x"])
    with pytest.raises(SecretsError, match="URI Subject Alternative Names are not allowed"):
        names.check_uris(role(), ["spiffe://example.com/web"])
    r = role(allowed_other_sans=["1.3.6.1.4.1.311.20.2.3;UTF8:*@example.com"])
    assert names.check_other_sans(r, ["1.3.6.1.4.1.311.20.2.3;utf8:a@example.com"]) == [
        "1.3.6.1.4.1.311.20.2.3;UTF8:a@example.com"
    ]
    with pytest.raises(SecretsError, match=r"other SAN a@evil\.com not allowed for OID"):
        names.check_other_sans(r, ["1.3.6.1.4.1.311.20.2.3;UTF8:a@evil.com"])
    with pytest.raises(SecretsError, match="only the UTF8 type"):
        names.check_other_sans(r, ["1.2.3;IA5:x"])
    assert names.check_other_sans(role(allowed_other_sans=["*"]), ["1.2.3;UTF8:x"])


def test_glob() -> None:
    assert names.glob_match("*", "")
    assert names.glob_match("a*c*e", "abcde")
    assert not names.glob_match("a*c*e", "abcd")
    assert names.glob_match("spiffe://*/web", "spiffe://x.y/web")
    assert not names.glob_match("ab*ba", "aba")


def test_validity_rules() -> None:
    nb, na = validity(
        now=1000,
        ttl=0,
        not_after="",
        default_ttl=50,
        max_ttl=100,
        not_before_duration=30,
        limit_name="max",
    )
    assert (nb, na) == (970, 1050)
    # A default beyond the max is capped; a request beyond it is refused.
    assert (
        validity(
            now=0,
            ttl=0,
            not_after="",
            default_ttl=500,
            max_ttl=100,
            not_before_duration=0,
            limit_name="max",
        )[1]
        == 100
    )
    with pytest.raises(SecretsError, match="requested ttl of 2m exceeds the role's max_ttl"):
        validity(
            now=0,
            ttl=120,
            not_after="",
            default_ttl=0,
            max_ttl=60,
            not_before_duration=0,
            limit_name="role's max_ttl",
        )
    with pytest.raises(SecretsError, match="either ttl or not_after"):
        validity(
            now=0,
            ttl=5,
            not_after="2030-01-01T00:00:00Z",
            default_ttl=0,
            max_ttl=60,
            not_before_duration=0,
            limit_name="max",
        )
    _, end = validity(
        now=0,
        ttl=0,
        not_after="9999-12-31T23:59:59Z",
        default_ttl=0,
        max_ttl=60,
        not_before_duration=0,
        limit_name="max",
    )
    assert end == parse_time("9999-12-31T23:59:59Z", "not_after")
    with pytest.raises(SecretsError, match="cannot parse not_after"):
        validity(
            now=0,
            ttl=0,
            not_after="tomorrow",
            default_ttl=0,
            max_ttl=60,
            not_before_duration=0,
            limit_name="max",
        )


def test_issuer_expiry_behaviour() -> None:
    issuer = IssuerEntry(id="i", certificate="", serial_number="01", not_after=100)
    assert limit_to_issuer(90, issuer) == 90
    with pytest.raises(SecretsError, match="beyond the expiration of the CA certificate"):
        limit_to_issuer(200, issuer)
    assert limit_to_issuer(200, issuer, "truncate") == 100
    assert limit_to_issuer(200, issuer, "permit") == 200


def test_role_defaults_and_validation() -> None:
    r = role()
    assert (r.key_type, r.key_bits, r.signature_bits) == ("rsa", 2048, 256)
    assert r.key_usage == ["DigitalSignature", "KeyAgreement", "KeyEncipherment"]
    assert r.allow_localhost and r.enforce_hostnames and r.allow_ip_sans and r.server_flag
    assert r.client_flag and r.use_csr_common_name and r.use_csr_sans and r.require_cn
    assert r.not_before_duration == 30 and r.issuer_ref == "default"
    assert role(key_type="ec").key_bits == 256
    assert role(key_type="ed25519", key_bits=999).key_bits == 0
    for kw, message in (
        ({"key_type": "dsa"}, "unknown key_type"),
        ({"key_bits": 1024}, "unsupported bit length for RSA key: 1024"),
        ({"key_type": "ec", "key_bits": 300}, "unsupported bit length for EC"),
        ({"key_usage": ["Teleport"]}, "unknown key_usage"),
        ({"ext_key_usage": ["Fly"]}, "unknown ext_key_usage"),
        ({"ttl": 100, "max_ttl": 10}, "must be less than"),
        ({"allowed_other_sans": ["nope"]}, "invalid other_sans entry"),
        ({"cn_validations": ["disabled", "email"]}, "must be used alone"),
    ):
        with pytest.raises(SecretsError, match=message):
            role(**kw)


def test_text_helpers() -> None:
    assert normalize_serial("0A-0B-0C") == "0a:0b:0c"
    assert normalize_serial("abc") == "0a:bc"
    assert serial_key("0a:0b") == "0a-0b"
    with pytest.raises(SecretsError, match="invalid serial number"):
        normalize_serial("xyz")
    assert short_duration(21600) == "6h" and short_duration(90) == "1m30s"
    assert short_duration(0) == "0s"
    pem = "-----BEGIN CERTIFICATE-----\nAAEC\nAwQ=\n-----END CERTIFICATE-----\n"
    assert as_format(pem, "der") == "AAECAwQ="
    assert as_format(pem, "pem") == pem.strip()


def test_validity_caps_a_ttl_over_the_max_with_openbao_warning() -> None:
    warnings: list[str] = []
    _, end = validity(
        now=0,
        ttl=8760 * 3600,
        not_after="",
        default_ttl=0,
        max_ttl=768 * 3600,
        not_before_duration=0,
        limit_name="mount's max lease TTL",
        warnings=warnings,
    )
    assert end == 768 * 3600
    assert warnings == [
        'TTL "8760h0m0s" is longer than permitted maxTTL "768h0m0s", so maxTTL is being used'
    ]

"""Credentials compare on their exact bytes: the Go whitespace rule of approle, the byte
encoding, and the userpass hash that scrypt's HMAC key padding made blind to NUL suffixes."""

from __future__ import annotations

import os

import msgspec
import pytest

from services.secrets.auth import userpass
from services.secrets.auth.exact import equal, go_trim_space, secret_bytes
from services.secrets.auth.token_params import addr_allowed
from services.secrets.auth.userpass import PasswordHash, hash_password, verify_password

# A cheap cost for tests: the property does not depend on it.
N, R, P = 2**10, 8, 1


@pytest.fixture(autouse=True)
def _cheap_scrypt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(userpass, "SCRYPT_N", N)


def test_go_trim_space_removes_go_whitespace_only() -> None:
    assert go_trim_space(" \t\n\v\f\r\x85\xa0\u2003id\u3000 ") == "id"
    for kept in ("\x00", "\x1c", "\x1f", "\u200b"):  # NUL, separators Python strips, ZWSP
        assert go_trim_space(f"{kept}id{kept}") == f"{kept}id{kept}"
    assert go_trim_space("   ") == ""


def test_secret_bytes_are_exact_and_never_raise() -> None:
    assert secret_bytes("a\x00") == b"a\x00"
    assert secret_bytes("\ud800") != secret_bytes("\ufffd")
    assert equal("s3cret", "s3cret")
    assert not equal("s3cret", "s3cret\x00")
    assert not equal("\ud800", "\udc00")


@pytest.mark.parametrize("suffix", ["\x00", "\x00\x00", "\x00x"])
def test_a_password_and_its_nul_suffix_are_different_passwords(suffix: str) -> None:
    stored = hash_password("s3cret")
    assert stored.v == 2
    assert verify_password(stored, "s3cret")
    assert not verify_password(stored, "s3cret" + suffix)
    assert not verify_password(hash_password("s3cret" + suffix), "s3cret")


def test_legacy_hashes_verify_but_never_for_a_nul_ended_candidate() -> None:
    salt = os.urandom(16)
    legacy = PasswordHash(n=N, r=R, p=P, salt=salt, key=userpass._derive("pw", salt, N, R, P, 1))
    assert legacy.v == 1  # what entries written before version 2 decode as
    assert verify_password(legacy, "pw")
    assert not verify_password(legacy, "pw\x00")
    assert not verify_password(legacy, "pw\x00\x00")
    assert not verify_password(legacy, "p")


def test_an_unknown_hash_version_never_verifies() -> None:
    stored = hash_password("pw")
    assert not verify_password(msgspec.structs.replace(stored, v=3), "pw")


def test_cidr_bindings_see_ipv4_mapped_addresses_as_ipv4() -> None:
    assert addr_allowed("::ffff:10.1.2.3", ["10.0.0.0/8"])
    assert not addr_allowed("::ffff:11.1.2.3", ["10.0.0.0/8"])
    assert addr_allowed("10.1.2.3", ["10.0.0.0/8"])
    assert not addr_allowed("10.1.2.3\x00", ["10.0.0.0/8"])  # not an address: no match
    assert not addr_allowed("", ["10.0.0.0/8"])
    assert addr_allowed("", [])  # no binding: anyone

"""The libsodium signer gives OpenSSL's signatures (Ed25519 is deterministic), and its public
key is the one OpenSSL derives from the same seed."""

from __future__ import annotations

import os

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from hypothesis import given
from hypothesis import strategies as st

from services.secrets.engines.transit.ed25519_signer import Ed25519Signer


@given(seed=st.binary(min_size=32, max_size=32), message=st.binary(max_size=4096))
def test_signatures_are_openssls(seed: bytes, message: bytes) -> None:
    reference = ed25519.Ed25519PrivateKey.from_private_bytes(seed)
    signer = Ed25519Signer(seed)
    signature = signer.sign(message)
    assert signature == reference.sign(message)
    reference.public_key().verify(signature, message)  # raises if not valid


def test_public_key_is_openssls() -> None:
    seed = os.urandom(32)
    reference = ed25519.Ed25519PrivateKey.from_private_bytes(seed).public_key()
    assert Ed25519Signer(seed).public_key().public_bytes_raw() == reference.public_bytes_raw()


def test_a_large_message() -> None:
    seed, message = os.urandom(32), os.urandom(3 * 1024 * 1024)
    sig = Ed25519Signer(seed).sign(message)
    assert sig == ed25519.Ed25519PrivateKey.from_private_bytes(seed).sign(message)


@pytest.mark.parametrize("size", [0, 31, 33, 64])
def test_a_seed_of_the_wrong_size_is_refused(size: int) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        Ed25519Signer(b"\x01" * size)

"""The barrier keyring: value format, path binding, tamper detection, rotation, serialization."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.secrets.keyring import (
    KEY_SIZE,
    BarrierError,
    Keyring,
    open_with,
    seal_with,
)

_paths = st.text(min_size=0, max_size=40)


def test_barrier_error_is_a_value_error() -> None:
    assert issubclass(BarrierError, ValueError)


def test_new_keyring_starts_at_term_1() -> None:
    ring = Keyring.new()
    assert ring.active_term == 1
    assert ring.terms == [1]
    assert ring.installed_at(1).tzinfo is not None


def test_value_format() -> None:
    ring = Keyring.new()
    plaintext = b"hello barrier"
    blob = ring.encrypt("logical/abc/foo", plaintext)
    assert blob[:4] == (1).to_bytes(4, "big")
    assert blob[4] == 0x02
    # header 5 + nonce 12 + ciphertext (same length as plaintext) + tag 16
    assert len(blob) == 5 + 12 + len(plaintext) + 16


def test_nonces_are_fresh() -> None:
    ring = Keyring.new()
    blobs = {ring.encrypt("p", b"same") for _ in range(50)}
    assert len(blobs) == 50
    assert len({blob[5:17] for blob in blobs}) == 50


@settings(max_examples=100, deadline=None)
@given(path=_paths, plaintext=st.binary(max_size=512))
def test_roundtrip(path: str, plaintext: bytes) -> None:
    ring = Keyring.new()
    assert ring.decrypt(path, ring.encrypt(path, plaintext)) == plaintext


@settings(max_examples=100, deadline=None)
@given(plaintext=st.binary(min_size=16, max_size=512))
def test_ciphertext_does_not_contain_plaintext(plaintext: bytes) -> None:
    ring = Keyring.new()
    assert plaintext not in ring.encrypt("secret/data/x", plaintext)


def test_ciphertext_does_not_contain_readable_plaintext() -> None:
    ring = Keyring.new()
    plaintext = b'{"password":"hunter2-hunter2"}' * 4
    blob = ring.encrypt("secret/data/db", plaintext)
    assert b"hunter2" not in blob
    assert b"password" not in blob


def test_tampering_any_byte_fails() -> None:
    ring = Keyring.new()
    ring.rotate()  # term 2 active, so a flipped term byte can land on an existing term too
    blob = ring.encrypt("core/mounts", b"mount table contents")
    for index in range(len(blob)):
        for flip in (0x01, 0x80, 0xFF):
            tampered = bytearray(blob)
            tampered[index] ^= flip
            with pytest.raises(BarrierError):
                ring.decrypt("core/mounts", bytes(tampered))


@settings(max_examples=50, deadline=None)
@given(
    plaintext=st.binary(max_size=64),
    data=st.data(),
)
def test_tampering_property(plaintext: bytes, data: st.DataObject) -> None:
    ring = Keyring.new()
    blob = bytearray(ring.encrypt("p", plaintext))
    index = data.draw(st.integers(0, len(blob) - 1), label="index")
    flip = data.draw(st.integers(1, 255), label="flip")
    blob[index] ^= flip
    with pytest.raises(BarrierError):
        ring.decrypt("p", bytes(blob))


def test_truncation_and_extension_fail() -> None:
    ring = Keyring.new()
    blob = ring.encrypt("p", b"value")
    for cut in range(len(blob)):
        with pytest.raises(BarrierError):
            ring.decrypt("p", blob[:cut])
    with pytest.raises(BarrierError):
        ring.decrypt("p", blob + b"\x00")


@settings(max_examples=50, deadline=None)
@given(path=_paths, other=_paths, plaintext=st.binary(max_size=64))
def test_blob_is_bound_to_its_path(path: str, other: str, plaintext: bytes) -> None:
    ring = Keyring.new()
    blob = ring.encrypt(path, plaintext)
    if other == path:
        assert ring.decrypt(other, blob) == plaintext
    else:
        with pytest.raises(BarrierError, match="authentication"):
            ring.decrypt(other, blob)


def test_moved_blob_fails() -> None:
    ring = Keyring.new()
    blob = ring.encrypt("secret/data/alice", b"alice's password")
    with pytest.raises(BarrierError, match="authentication"):
        ring.decrypt("secret/data/bob", blob)


def test_too_short() -> None:
    ring = Keyring.new()
    with pytest.raises(BarrierError, match="too short"):
        ring.decrypt("p", b"")
    with pytest.raises(BarrierError, match="too short"):
        ring.decrypt("p", b"\x00\x00\x00\x01\x02" + bytes(12 + 15))


def test_unknown_term() -> None:
    ring = Keyring.new()
    blob = bytearray(ring.encrypt("p", b"v"))
    blob[:4] = (7).to_bytes(4, "big")
    with pytest.raises(BarrierError, match="unknown key term 7"):
        ring.decrypt("p", bytes(blob))


@pytest.mark.parametrize("version", [0, 1, 3, 0xFF])
def test_unknown_version(version: int) -> None:
    ring = Keyring.new()
    blob = bytearray(ring.encrypt("p", b"v"))
    blob[4] = version
    with pytest.raises(BarrierError, match=f"unknown encrypted value version {version}"):
        ring.decrypt("p", bytes(blob))


def test_other_keyring_cannot_decrypt() -> None:
    blob = Keyring.new().encrypt("p", b"v")
    with pytest.raises(BarrierError, match="authentication"):
        Keyring.new().decrypt("p", blob)


def test_errors_carry_no_secret_material() -> None:
    key = os.urandom(KEY_SIZE)
    ring = Keyring({1: key}, active_term=1)
    plaintext = b"top-secret-plaintext"
    blob = ring.encrypt("a", plaintext)
    with pytest.raises(BarrierError) as caught:
        ring.decrypt("b", blob)
    text = str(caught.value) + repr(caught.value)
    assert caught.value.__cause__ is None
    assert "top-secret" not in text
    assert key.hex() not in text
    assert repr(key) not in text
    assert key.hex() not in repr(ring)
    assert repr(key) not in repr(ring)


def test_rotation_keeps_old_terms_readable() -> None:
    ring = Keyring.new()
    old = ring.encrypt("p", b"written at term 1")
    assert ring.rotate() == 2
    assert ring.active_term == 2
    assert ring.terms == [1, 2]
    new = ring.encrypt("p", b"written at term 2")
    assert new[:4] == (2).to_bytes(4, "big")
    assert ring.decrypt("p", old) == b"written at term 1"
    assert ring.decrypt("p", new) == b"written at term 2"
    assert ring.rotate() == 3
    assert ring.decrypt("p", old) == b"written at term 1"
    assert ring.installed_at(3) >= ring.installed_at(1)


def test_rotation_uses_a_fresh_key() -> None:
    ring = Keyring.new()
    ring.rotate()
    blob = bytearray(ring.encrypt("p", b"v"))
    # The same blob relabelled as term 1 must not authenticate: the keys differ.
    blob[:4] = (1).to_bytes(4, "big")
    with pytest.raises(BarrierError, match="authentication"):
        ring.decrypt("p", bytes(blob))


def test_serialization_roundtrip() -> None:
    ring = Keyring.new()
    ring.rotate()
    ring.rotate()
    blob_active = ring.encrypt("p", b"active")
    restored = Keyring.from_bytes(ring.to_bytes())
    assert restored.active_term == 3
    assert restored.terms == [1, 2, 3]
    for term in ring.terms:
        assert restored.installed_at(term) == ring.installed_at(term)
    assert restored.decrypt("p", blob_active) == b"active"
    assert ring.decrypt("q", restored.encrypt("q", b"back")) == b"back"
    # Serialization is stable, so a rewrite of an unchanged keyring stores the same JSON.
    assert restored.to_bytes() == ring.to_bytes()


def test_serialization_keeps_older_terms_readable() -> None:
    ring = Keyring.new()
    old = ring.encrypt("p", b"old")
    ring.rotate()
    assert Keyring.from_bytes(ring.to_bytes()).decrypt("p", old) == b"old"


def test_explicit_construction() -> None:
    keys = {1: os.urandom(KEY_SIZE), 5: os.urandom(KEY_SIZE)}
    when = datetime(2024, 1, 2, tzinfo=UTC)
    ring = Keyring(keys, active_term=5, installed_at={1: when, 5: when})
    assert ring.terms == [1, 5]
    assert ring.installed_at(1) == when
    assert ring.rotate() == 6
    with pytest.raises(BarrierError, match="unknown key term"):
        ring.installed_at(2)


@pytest.mark.parametrize(
    ("keys", "active", "message"),
    [
        ({}, 1, "at least one term"),
        ({1: b"short"}, 1, "key must be 32 bytes"),
        ({1: bytes(32)}, 2, "active term 2 is not in the keyring"),
        ({0: bytes(32)}, 0, "term must be between"),
        ({2**32: bytes(32)}, 2**32, "term must be between"),
    ],
)
def test_construction_validation(keys: dict[int, bytes], active: int, message: str) -> None:
    with pytest.raises(BarrierError, match=message):
        Keyring(keys, active_term=active)


def test_rotation_past_u32_fails() -> None:
    ring = Keyring({2**32 - 1: bytes(32)}, active_term=2**32 - 1)
    with pytest.raises(BarrierError, match="term must be between"):
        ring.rotate()
    assert ring.active_term == 2**32 - 1


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"{}",
        b'{"format":1,"active_term":1,"terms":[{"term":1,"key":"!!!","installed_at":"x"}]}',
        b'{"format":9,"active_term":1,"terms":[]}',
    ],
)
def test_from_bytes_rejects_malformed(data: bytes) -> None:
    with pytest.raises(BarrierError) as caught:
        Keyring.from_bytes(data)
    assert caught.value.__cause__ is None


def test_from_bytes_rejects_duplicate_terms() -> None:
    ring = Keyring.new()
    text = ring.to_bytes().decode()
    start = text.index("[") + 1
    record = text[start : text.rindex("]")]
    doubled = text[:start] + record + "," + record + "]}"
    with pytest.raises(BarrierError, match="twice"):
        Keyring.from_bytes(doubled.encode())


def test_from_bytes_rejects_missing_active_term() -> None:
    ring = Keyring.new()
    data = ring.to_bytes().replace(b'"active_term":1', b'"active_term":4')
    with pytest.raises(BarrierError, match="active term 4"):
        Keyring.from_bytes(data)


def test_malformed_keyring_error_does_not_quote_input() -> None:
    key_text = "c2VjcmV0LWtleS1tYXRlcmlhbA=="
    data = f'{{"format":1,"active_term":1,"terms":[{{"term":"{key_text}"}}]}}'.encode()
    with pytest.raises(BarrierError) as caught:
        Keyring.from_bytes(data)
    assert key_text not in str(caught.value)


@settings(max_examples=50, deadline=None)
@given(data=st.binary(max_size=256), aad=st.binary(max_size=32))
def test_seal_open_roundtrip(data: bytes, aad: bytes) -> None:
    key = os.urandom(KEY_SIZE)
    blob = seal_with(key, data, aad)
    assert len(blob) == 12 + len(data) + 16
    assert open_with(key, blob, aad) == data


def test_seal_wraps_keyring_and_root_key() -> None:
    """The init chain: keyring under the root key, root key under the unseal key."""
    unseal_key = os.urandom(KEY_SIZE)
    root_key = os.urandom(KEY_SIZE)
    ring = Keyring.new()
    value = ring.encrypt("secret/data/x", b"payload")
    wrapped_ring = seal_with(root_key, ring.to_bytes(), b"core/keyring")
    wrapped_root = seal_with(unseal_key, root_key, b"core/root-key")
    assert ring.to_bytes() not in wrapped_ring
    assert root_key not in wrapped_root

    recovered_root = open_with(unseal_key, wrapped_root, b"core/root-key")
    recovered_ring = Keyring.from_bytes(open_with(recovered_root, wrapped_ring, b"core/keyring"))
    assert recovered_ring.decrypt("secret/data/x", value) == b"payload"


def test_open_with_failures() -> None:
    key = os.urandom(KEY_SIZE)
    blob = seal_with(key, b"root key bytes", b"core/root-key")
    with pytest.raises(BarrierError, match="authentication"):
        open_with(os.urandom(KEY_SIZE), blob, b"core/root-key")
    with pytest.raises(BarrierError, match="authentication"):
        open_with(key, blob, b"core/keyring")
    for index in range(len(blob)):
        tampered = bytearray(blob)
        tampered[index] ^= 0x01
        with pytest.raises(BarrierError):
            open_with(key, bytes(tampered), b"core/root-key")
    with pytest.raises(BarrierError, match="too short"):
        open_with(key, blob[: 12 + 15], b"core/root-key")


def test_seal_with_rejects_wrong_key_size() -> None:
    with pytest.raises(BarrierError, match="key must be 32 bytes"):
        seal_with(b"short", b"data", b"")
    with pytest.raises(BarrierError, match="key must be 32 bytes"):
        open_with(bytes(16), bytes(40), b"")

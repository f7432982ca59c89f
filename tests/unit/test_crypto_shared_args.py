"""Arguments sent to a crypto worker once and named by digest: a worker holds them only under the
digest of the bytes it received, asks again for a name it does not hold, and completes a call's
own arguments with them (the call's fields winning)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from services.crypto import shared_args
from services.crypto.messages import CryptoRequest
from services.crypto.service import run_one
from services.crypto.shared_args import SharedArgs, SharedStore, UnknownRef


def test_a_name_is_the_digest_of_its_bytes() -> None:
    a = SharedArgs.of({"signer": {"certificate": "A", "private_key": "a"}})
    b = SharedArgs.of({"signer": {"certificate": "A", "private_key": "b"}})
    assert a.ref == shared_args.digest(a.raw) and a.ref != b.ref
    assert SharedArgs.of({"signer": {"certificate": "A", "private_key": "a"}}) == a


def test_the_call_wins_and_dicts_merge_one_level() -> None:
    shared = {"signer": {"certificate": "C"}, "cert": {"key_usage": ["x"], "not_after": 1}}
    args = {"key_type": "ec", "cert": {"not_after": 5, "subject": {"common_name": "h"}}}
    assert shared_args.merge(shared, args) == {
        "signer": {"certificate": "C"},
        "key_type": "ec",
        "cert": {"key_usage": ["x"], "not_after": 5, "subject": {"common_name": "h"}},
    }
    assert shared == {"signer": {"certificate": "C"}, "cert": {"key_usage": ["x"], "not_after": 1}}


def test_unknown_until_sent_then_held() -> None:
    store = SharedStore()
    held = SharedArgs.of({"cert": {"key_usage": ["DigitalSignature"]}})
    with pytest.raises(UnknownRef):
        store.resolve(held.ref, b"", {"cert": {}})
    sent = store.resolve(held.ref, held.raw, {"cert": {"not_after": 9}})
    assert sent == {"cert": {"key_usage": ["DigitalSignature"], "not_after": 9}}
    assert store.resolve(held.ref, b"", {"cert": {"not_after": 7}}) == {
        "cert": {"key_usage": ["DigitalSignature"], "not_after": 7}
    }


def test_held_under_the_digest_of_what_came_not_the_name_given() -> None:
    store = SharedStore()
    first, other = SharedArgs.of({"n": 1}), SharedArgs.of({"n": 2})
    assert store.resolve(first.ref, other.raw, {}) == {"n": 2}  # a wrong name never sticks
    with pytest.raises(UnknownRef):
        store.resolve(first.ref, b"", {})
    assert store.resolve(other.ref, b"", {}) == {"n": 2}


def test_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_args, "STORE_MAX", 3)
    store = SharedStore()
    refs = []
    for n in range(5):
        held = SharedArgs.of({"n": n})
        store.resolve(held.ref, held.raw, {})
        refs.append(held.ref)
        assert len(store.entries) <= 3
    assert store.resolve(refs[-1], b"", {}) == {"n": 4}


def test_worker_replies() -> None:
    store = SharedStore()
    held = SharedArgs.of({"key_type": "ed25519"})
    missing = run_one(CryptoRequest(op="generate_key", ref=held.ref), store)
    assert missing.unknown_ref and missing.error_code == 503 and missing.result is None
    sent = run_one(CryptoRequest(op="generate_key", ref=held.ref, shared=held.raw), store)
    assert not sent.error_code and not sent.unknown_ref and sent.result["key_type"] == "ed25519"
    again = run_one(CryptoRequest(op="generate_key", ref=held.ref), store)
    assert not again.error_code and again.result["key_type"] == "ed25519"
    junk = run_one(CryptoRequest(op="generate_key", ref="x", shared=b"\xc1"), store)
    assert junk.error_code == 400 and not junk.unknown_ref
    not_a_map = msgspec.msgpack.encode([1, 2])
    listed = run_one(CryptoRequest(op="generate_key", shared=not_a_map), store)
    assert listed.error_code == 400


class OldRequest(msgspec.Struct):
    """CryptoRequest as workers before shared arguments decoded it."""

    op: str = ""
    args: dict[str, Any] = {}
    batch: list[OldRequest] = []


def test_a_worker_without_the_protocol_refuses_rather_than_runs_it_incomplete() -> None:
    """Such a worker reads only `op` and `args`: the call's own arguments are not there."""
    held = SharedArgs.of({"signer": {"certificate": "C", "private_key": "K"}})
    own = {"key_type": "ec", "cert": {"not_before": 0, "not_after": 10}}
    sent = CryptoRequest(op="x509_issue", own=own, ref=held.ref, shared=held.raw)
    old = msgspec.msgpack.decode(msgspec.msgpack.encode(sent), type=OldRequest)
    reply = run_one(CryptoRequest(op=old.op, args=old.args), SharedStore())
    assert reply.error_code == 400 and "invalid arguments" in reply.error_message

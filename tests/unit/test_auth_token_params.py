"""Pure pieces of the auth methods: token_* parameters, CIDR checks, password hashing, field
decoding, and that the KDF never blocks the event loop."""

from __future__ import annotations

import asyncio
import time

import msgspec
import pytest

from services.secrets.auth import userpass
from services.secrets.auth.approle import RoleFields, SecretIdFields, _metadata
from services.secrets.auth.token_params import (
    TokenInput,
    TokenParams,
    addr_allowed,
    apply_token_input,
    cidrs_subset,
    parse_cidrs,
    sanitize_policies,
    take_deprecated,
    token_data,
)
from services.secrets.errors import SecretsError
from services.secrets.framework.fields import FieldError, decode_fields


def test_sanitize_policies() -> None:
    assert sanitize_policies([" B", "a", "", "a", "C "]) == ["a", "b", "c"]
    assert sanitize_policies(["dev", "Root"]) == ["root"]
    assert sanitize_policies([]) == []


def test_cidr_helpers() -> None:
    assert parse_cidrs(["10.0.0.0/8", " 127.0.0.1 ", "", "::1/128"], "f") == [
        "10.0.0.0/8",
        "127.0.0.1",
        "::1/128",
    ]
    with pytest.raises(SecretsError) as err:
        parse_cidrs(["10.0.0.0/33"], "token_bound_cidrs")
    assert err.value.code == 400 and "token_bound_cidrs" in err.value.message
    assert addr_allowed("1.2.3.4", [])
    assert addr_allowed("127.0.0.1", ["10.0.0.0/8", "127.0.0.0/8"])
    assert addr_allowed("::1", ["::1/128"])
    assert addr_allowed("[::1]", ["::1"])
    assert not addr_allowed("192.168.1.1", ["10.0.0.0/8"])
    assert not addr_allowed("", ["10.0.0.0/8"])  # unknown source: refused
    assert not addr_allowed("not-an-ip", ["0.0.0.0/0"])
    assert cidrs_subset(["10.1.0.0/16", "10.2.3.4"], ["10.0.0.0/8"])
    assert not cidrs_subset(["11.0.0.0/16"], ["10.0.0.0/8"])
    assert not cidrs_subset(["::1/128"], ["10.0.0.0/8"])
    assert cidrs_subset(["11.0.0.0/16"], [])


def test_apply_token_input_validates_and_changes_only_what_is_given() -> None:
    current = TokenParams(token_ttl=60, token_policies=["a"])
    changes = apply_token_input(current, TokenInput(token_max_ttl=120, token_type="Service"))
    assert changes == {"token_max_ttl": 120, "token_type": "service"}
    # Batch tokens (issue 21): a role or user may issue them.
    assert apply_token_input(current, TokenInput(token_type="default-batch")) == {
        "token_type": "default-batch"
    }
    bad = [
        TokenInput(token_ttl=-1),
        TokenInput(token_num_uses=-2),
        TokenInput(token_type="whatever"),
        TokenInput(token_bound_cidrs=["x"]),
        TokenInput(token_max_ttl=30),  # below the stored token_ttl of 60
    ]
    for inp in bad:
        with pytest.raises(SecretsError) as err:
            apply_token_input(current, inp)
        assert err.value.code == 400
    data = token_data(msgspec.structs.replace(current, **changes))
    assert data["token_ttl"] == 60 and data["token_max_ttl"] == 120
    assert set(data) == {f.name for f in msgspec.structs.fields(TokenParams)}


def test_take_deprecated() -> None:
    inp = TokenInput(token_ttl=5)
    used, dropped = take_deprecated(
        inp, {"policies": ("token_policies", ["x"]), "ttl": ("token_ttl", None)}
    )
    assert used == {"policies"} and dropped == {"ttl"} and inp.token_policies == ["x"]
    with pytest.raises(SecretsError):
        take_deprecated(TokenInput(token_ttl=5), {"ttl": ("token_ttl", 6)})


def test_weak_decoding_of_auth_fields() -> None:
    fields, unknown = decode_fields(
        RoleFields,
        {
            "token_policies": "a,b",
            "token_ttl": "1h",
            "secret_id_num_uses": "3",
            "bind_secret_id": "",
            "secret_id_bound_cidrs": "10.0.0.0/8,127.0.0.1/32",
            "token_no_default_policy": 1,
            "surprise": True,
        },
        {"role_name": "r"},
    )
    assert isinstance(fields, RoleFields)
    assert fields.token_policies == ["a", "b"] and fields.token_ttl == 3600
    assert fields.secret_id_num_uses == 3 and fields.bind_secret_id is False
    assert fields.secret_id_bound_cidrs == ["10.0.0.0/8", "127.0.0.1/32"]
    assert fields.token_no_default_policy is True and fields.token_max_ttl is None
    assert unknown == ["surprise"]
    with pytest.raises(FieldError):
        decode_fields(RoleFields, {"token_ttl": "soon"}, {"role_name": "r"})
    sid, _ = decode_fields(SecretIdFields, {"metadata": {"a": "b"}}, {"role_name": "r"})
    assert isinstance(sid, SecretIdFields) and sid.metadata == {"a": "b"}


def test_secret_id_metadata() -> None:
    assert _metadata(None) == {} and _metadata("") == {}
    assert _metadata('{"a": "b"}') == {"a": "b"}
    assert _metadata({"a": "b"}) == {"a": "b"}
    for bad in ("{", "[1]", {"a": 1}, '{"a": null}'):
        with pytest.raises(SecretsError):
            _metadata(bad)


def test_password_hash_round_trip() -> None:
    stored = userpass.hash_password("correct horse")
    assert stored.alg == "scrypt" and len(stored.salt) == userpass.SALT_LEN
    assert b"correct horse" not in msgspec.json.encode(stored)
    assert userpass.verify_password(stored, "correct horse")
    assert not userpass.verify_password(stored, "correct horsE")
    # A fresh salt per hash: the same password never gives the same record.
    again = userpass.hash_password("correct horse")
    assert again.salt != stored.salt and again.key != stored.key
    # Stored parameters are honoured; an unknown algorithm never verifies.
    assert not userpass.verify_password(msgspec.structs.replace(stored, alg="md5"), "correct horse")
    decoded = msgspec.json.decode(msgspec.json.encode(stored), type=userpass.PasswordHash)
    assert userpass.verify_password(decoded, "correct horse")


async def test_kdf_runs_off_the_event_loop() -> None:
    """While a password is checked, the loop keeps ticking (the KDF runs in a thread)."""
    backend = userpass.UserpassBackend(None, None, None)  # type: ignore[arg-type]
    stored = userpass.hash_password("pw")
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    start = time.perf_counter()
    assert await backend._verify(stored, "pw")
    elapsed = time.perf_counter() - start
    done.set()
    await task
    # The check takes ~0.1 s of CPU; the loop must not have stalled for most of it.
    assert max(gaps) < max(0.06, elapsed / 2), (max(gaps), elapsed)
    assert len(gaps) >= 3

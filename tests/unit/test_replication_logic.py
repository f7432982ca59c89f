"""Pure DR logic: the state table, the OTP encoding, operation-token attempts, activation tokens
(JWT signed by the cluster key, encryption to a generated public key), frames."""

from __future__ import annotations

import asyncio
import base64
import time

import msgspec
import pytest

from services.replication import activation, otp, promote_key
from services.replication.channel import fingerprint, new_identity
from services.replication.modes import (
    DISABLED,
    PRIMARY,
    SECONDARY,
    TABLE,
    Move,
    next_mode,
    require,
)
from services.replication.optoken import TOKEN_LENGTH, OperationTokens, is_valid, token_hash
from services.secrets import shamir
from services.secrets.core.seal import ROOT_KEY, SealConfig
from services.secrets.keyring import seal_with
from shared.errors import ServiceError


# ---- state table ------------------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "move", "to"), [(m, mv, t) for (m, mv), t in TABLE.items()])
def test_table_moves(mode: str, move: Move, to: str) -> None:
    assert next_mode(mode, move) == to


@pytest.mark.parametrize(
    ("mode", "move"),
    [
        (PRIMARY, Move.ENABLE_PRIMARY),
        (SECONDARY, Move.ENABLE_PRIMARY),
        (PRIMARY, Move.ENABLE_SECONDARY),
        (SECONDARY, Move.ENABLE_SECONDARY),
        (DISABLED, Move.PROMOTE),
        (PRIMARY, Move.PROMOTE),
        (DISABLED, Move.DEMOTE),
        (SECONDARY, Move.DEMOTE),
        (DISABLED, Move.UPDATE_PRIMARY),
        (PRIMARY, Move.DISABLE_SECONDARY),
    ],
)
def test_moves_outside_the_table_are_400_with_a_reason(mode: str, move: Move) -> None:
    with pytest.raises(ServiceError) as exc:
        next_mode(mode, move)
    assert exc.value.code == 400 and exc.value.message


def test_require() -> None:
    require(PRIMARY, PRIMARY, "x")
    with pytest.raises(ServiceError, match="not a DR secondary"):
        require(PRIMARY, SECONDARY, "generate an operation token")


# ---- OTP ------------------------------------------------------------------------------------
def test_otp_encoding_is_vaults() -> None:
    token = "hvb." + "A" * 24
    pad = otp.new_otp(len(token))
    assert len(pad) == 28 and pad.isalnum()
    enc = otp.encode(token, pad)
    assert "=" not in enc  # base64 standard alphabet without padding
    raw = base64.b64decode(enc + "=" * (-len(enc) % 4))
    assert bytes(a ^ b for a, b in zip(raw, pad.encode(), strict=True)) == token.encode()
    assert otp.decode(enc, pad) == token
    with pytest.raises(ValueError):
        otp.encode(token, pad[:-1])


# ---- operation-token attempts ---------------------------------------------------------------
def _reader(shares: int, threshold: int) -> tuple[list[bytes], object]:
    kek = bytes(range(32))
    parts = [kek] if shares == 1 else shamir.split(kek, shares, threshold)
    config = SealConfig(secret_shares=shares, secret_threshold=threshold)
    blob = seal_with(kek, b"root key", ROOT_KEY.encode())

    async def read() -> tuple[SealConfig, bytes]:
        return config, blob

    return parts, read


def _run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_attempt_completes_with_threshold_shares() -> None:
    parts, read = _reader(5, 3)
    ops = OperationTokens(read)  # type: ignore[arg-type]
    assert ops.record()["started"] is False
    start = _run(ops.start())
    assert start["required"] == 3 and start["otp_length"] == TOKEN_LENGTH
    with pytest.raises(ServiceError, match="already in progress"):
        _run(ops.start())
    for i, part in enumerate(parts[:2]):
        rec, token, wrapped = _run(ops.update(part.hex(), start["nonce"]))
        assert rec["progress"] == i + 1 and not token and not wrapped and rec["complete"] is False
    rec, token, wrapped = _run(ops.update(base64.b64encode(parts[4]).decode(), start["nonce"]))
    assert rec["complete"] is True and token.startswith("hvb.")
    # The proven unseal key is kept only wrapped under the token (promote_key.py).
    kek = shamir.combine(parts[:3])
    assert kek not in wrapped
    assert promote_key.unwrap(token, token_hash(token), wrapped) == kek
    assert promote_key.unwrap(token + "x", token_hash(token), wrapped) is None
    assert promote_key.unwrap(token, token_hash(token + "x"), wrapped) is None
    assert otp.decode(rec["encoded_token"], start["otp"]) == token
    assert ops.record()["started"] is False  # the attempt is over
    assert is_valid(token, [token_hash(token)]) and not is_valid(token + "x", [token_hash(token)])
    assert not is_valid("", [token_hash("")])


def test_attempt_rejects_bad_input() -> None:
    parts, read = _reader(3, 2)
    ops = OperationTokens(read)  # type: ignore[arg-type]
    with pytest.raises(ServiceError, match="no operation token generation"):
        _run(ops.update(parts[0].hex(), "x"))
    start = _run(ops.start())
    with pytest.raises(ServiceError, match="nonce"):
        _run(ops.update(parts[0].hex(), "another-attempt"))
    with pytest.raises(ServiceError, match="wrong length"):
        _run(ops.update(parts[0][:20].hex(), start["nonce"]))
    with pytest.raises(ServiceError, match="neither hex nor base64"):
        _run(ops.update("not a key!", start["nonce"]))
    _run(ops.update(parts[0].hex(), start["nonce"]))
    with pytest.raises(ServiceError, match="already given"):
        _run(ops.update(parts[0].hex(), start["nonce"]))
    # A share of the right length from another key: the root key does not open; reset.
    # (x is the share's last byte, drawn at random: one that differs from the share given.)
    other = next(sh for sh in shamir.split(bytes(32), 3, 2) if sh[-1] != parts[0][-1])
    with pytest.raises(ServiceError, match="progress was reset"):
        _run(ops.update(other.hex(), start["nonce"]))
    assert ops.record()["progress"] == 0 and ops.record()["started"] is True
    ops.cancel()
    assert ops.record() == {
        "started": False,
        "nonce": "",
        "progress": 0,
        "required": 0,
        "encoded_token": "",
        "pgp_fingerprint": "",
        "complete": False,
    }


def test_single_share_and_nothing_replicated() -> None:
    parts, read = _reader(1, 1)
    ops = OperationTokens(read)  # type: ignore[arg-type]
    start = _run(ops.start())
    rec, token, wrapped = _run(ops.update(parts[0].hex(), start["nonce"]))
    assert rec["complete"] and token
    assert promote_key.unwrap(token, token_hash(token), wrapped) == parts[0]

    async def empty() -> tuple[None, None]:
        return None, None

    with pytest.raises(ServiceError, match="no data has been replicated"):
        _run(OperationTokens(empty).start())  # type: ignore[arg-type]


# ---- activation tokens ---------------------------------------------------------------------
def _activation(ttl: float = 60) -> activation.Activation:
    return activation.Activation(
        cluster_id="c",
        secondary_id="s",
        primary_cluster_addr="h:1",
        fingerprint="f",
        secret="c2VjcmV0",
        expires_at=time.time() + ttl,
    )


def test_jwt_is_signed_by_the_cluster_key() -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert, key = new_identity("test")
    other_cert, _ = new_identity("other")
    der = x509.load_pem_x509_certificate(cert.encode()).public_bytes(serialization.Encoding.DER)
    other = x509.load_pem_x509_certificate(other_cert.encode()).public_bytes(
        serialization.Encoding.DER
    )
    jwt = activation.sign_jwt({"jti": "hvs.x", "addr": "http://p", "type": "wrapping"}, key)
    assert activation.jwt_claims(jwt) == {"jti": "hvs.x", "addr": "http://p", "type": "wrapping"}
    assert activation.verify_jwt(jwt, der)
    assert not activation.verify_jwt(jwt, other)
    head, body, sig = jwt.split(".")
    assert not activation.verify_jwt(f"{head}.{body}x.{sig}", der)
    assert activation.jwt_claims("hvs.plainwrappingtoken") is None
    assert len(fingerprint(cert)) == 64 and fingerprint(cert) == fingerprint(der)


def test_encrypted_activation_opens_only_with_its_key() -> None:
    private, public = activation.new_keypair()
    other, _ = activation.new_keypair()
    token = activation.seal_for(public, _activation())
    assert token.startswith(activation.SEALED_PREFIX)
    assert activation.open_sealed(token, private).cluster_id == "c"
    for key in (other, ""):
        with pytest.raises(ServiceError) as exc:
            activation.open_sealed(token, key)
        assert exc.value.code == 400
    expired = activation.seal_for(public, _activation(ttl=-1))
    with pytest.raises(ServiceError, match="expired"):
        activation.open_sealed(expired, private)
    with pytest.raises(ServiceError):
        activation.seal_for("not a key", _activation())


def test_frames_round_trip() -> None:
    from services.replication import wire

    frame = wire.Batch(
        entries=[wire.WalEntry(3, "a.b", b"ct"), wire.WalEntry(4, "a.c", b"", "PURGE")]
    )
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(frame), type=wire.Frame) == frame

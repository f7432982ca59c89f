"""Transit's pure parts: key rules (config, trim, rotation), the ciphertext format and key
derivations, Vault-format backups, and the signature helpers the crypto worker runs."""

from __future__ import annotations

import base64
import hashlib
import hmac

import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from services.crypto import ops_transit as ops
from services.secrets.engines.transit import backup
from services.secrets.engines.transit import symmetric as sym
from services.secrets.engines.transit.keytypes import KEY_TYPES
from services.secrets.engines.transit.paths_keys import ConfigFields
from services.secrets.engines.transit.policy import (
    KDF_COUNTER,
    Policy,
    TransitError,
    add_version,
    apply_config,
    describe,
    new_version_material,
    rotation_due,
    set_private,
    trim,
)


def make(kt: str = "aes256-gcm96", versions: int = 1, **kw: object) -> Policy:
    p = Policy(name="k", type=kt, min_decryption_version=0, **kw)  # type: ignore[arg-type]
    for _ in range(versions):
        if KEY_TYPES[kt].is_rsa:
            from services.secrets.engines.transit.policy import blank_version

            e = blank_version()
            set_private(e, rsa.generate_private_key(public_exponent=65537, key_size=2048))
        else:
            e = new_version_material(KEY_TYPES[kt], 32)
        add_version(p, e)
    return p


def config(p: Policy, **values: object) -> list[str]:
    f = ConfigFields(name="k", **values)  # type: ignore[arg-type]
    return apply_config(p, f, set(values))


def test_config_rules() -> None:
    p = make(versions=3)
    with pytest.raises(TransitError, match="latest key version is 3"):
        config(p, min_decryption_version=4)
    with pytest.raises(TransitError, match="at least an hour"):
        config(p, auto_rotate_period=60)
    assert config(p, min_decryption_version=0) and p.min_decryption_version == 1
    config(p, min_decryption_version=2, min_encryption_version=3, exportable=True)
    with pytest.raises(TransitError, match="should not be less"):
        config(p, min_encryption_version=1)
    config(p, exportable=False)  # cannot be taken back
    assert p.exportable and describe(p)["keys"].keys() == {"2", "3"}


def test_trim_and_rotation_due() -> None:
    p = make(versions=4)
    config(p, min_decryption_version=3)
    with pytest.raises(TransitError, match="greater than minimum decryption"):
        trim(p, 4)
    trim(p, 3)
    assert sorted(p.keys) == ["3", "4"] and p.min_available_version == 3
    with pytest.raises(TransitError, match="decremented"):
        trim(p, 2)
    with pytest.raises(TransitError, match="minimum available version is 3"):
        config(p, min_decryption_version=2)
    assert not rotation_due(p, p.keys["4"].creation_time + 10**6)
    p.auto_rotate_period = 3600
    assert not rotation_due(p, p.keys["4"].creation_time + 3599)
    assert rotation_due(p, p.keys["4"].creation_time + 3600)


@pytest.mark.parametrize("kt", ["aes128-gcm96", "aes256-gcm96", "chacha20-poly1305"])
def test_symmetric_round_trip_and_format(kt: str) -> None:
    p = make(kt, versions=2)
    raw = sym.encrypt(p, 2, b"data", ad=b"ad")
    assert len(raw) == 12 + 4 + 16
    assert sym.decrypt(p, 2, raw, ad=b"ad") == b"data"
    with pytest.raises(TransitError, match="authentication failed"):
        sym.decrypt(p, 2, raw)
    with pytest.raises(TransitError, match="authentication failed"):
        sym.decrypt(p, 1, raw, ad=b"ad")
    assert sym.split_versioned(p, "vault:v0:abc")[0] == 1  # Vault's first keys were v0
    text = sym.prefix(2) + base64.b64encode(raw).decode()
    assert sym.split_versioned(p, text) == (2, text.split(":", 2)[2])
    for bad, message in (
        ("v1:abc", "no prefix"),
        ("vault:vx:abc", "could not be decoded"),
        ("vault:v3:abc", "too new"),
        ("vault:v2", "wrong number"),
    ):
        with pytest.raises(TransitError, match=message):
            sym.split_versioned(p, bad)
    config(p, min_decryption_version=2)
    with pytest.raises(TransitError, match="too old"):
        sym.split_versioned(p, "vault:v1:abc")


def test_derived_and_convergent() -> None:
    p = make(derived=True, convergent_encryption=True)
    with pytest.raises(TransitError, match="missing 'context'"):
        sym.encrypt(p, 1, b"x")
    a = sym.encrypt(p, 1, b"same", b"ctx")
    assert a == sym.encrypt(p, 1, b"same", b"ctx")
    assert a != sym.encrypt(p, 1, b"same", b"other")
    # The nonce is HMAC-SHA256(derived HMAC key, plaintext) truncated, as Vault's version 3.
    material = sym.derive(p, 1, b"ctx", 64)
    nonce = hmac.new(material[32:], b"same", hashlib.sha256).digest()[:12]
    assert a[:12] == nonce
    assert sym.decrypt(p, 1, a, b"ctx") == b"same"
    # The legacy counter-mode derivation gives other keys from the same material.
    legacy = msgspec.structs.replace(p, kdf=KDF_COUNTER)
    assert sym.derive(legacy, 1, b"ctx", 32) != sym.derive(p, 1, b"ctx", 32)
    expected = hmac.new(
        p.keys["1"].key, b"\x00\x00\x00\x00ctx\x00\x00\x01\x00", hashlib.sha256
    ).digest()
    assert sym.counter_kdf(p.keys["1"].key, b"ctx") == expected


@pytest.mark.parametrize("kt", ["aes256-gcm96", "ed25519", "ecdsa-p521", "rsa-2048", "hmac"])
def test_backup_round_trip(kt: str) -> None:
    p = make(kt, versions=2, key_size=32 if kt == "hmac" else 0, exportable=True)
    config(p, min_decryption_version=2)
    back = backup.decode(backup.encode(p), "copy")
    assert back.name == "copy" and back.type == kt and back.latest_version == 2
    for v in ("1", "2"):
        assert back.keys[v].key == p.keys[v].key
        assert back.keys[v].hmac_key == p.keys[v].hmac_key
        assert back.keys[v].public_key == p.keys[v].public_key
        assert back.keys[v].private_der == p.keys[v].private_der
    with pytest.raises(TransitError):
        backup.decode("not base64!", "")
    with pytest.raises(TransitError):
        backup.decode(base64.b64encode(b'{"policy": {"type": 99}}').decode(), "")


def test_signature_helpers() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    digest = hashlib.sha256(b"m").digest()
    for algo, salt in (("pss", ops.SALT_AUTO), ("pss", ops.SALT_HASH), ("pkcs1v15", 0)):
        sig = ops.sign(key, "rsa-2048", digest, "sha2-256", algo, salt)
        assert ops.verify(key.public_key(), "rsa-2048", digest, sig, "sha2-256", algo, salt)
        assert not ops.verify(key.public_key(), "rsa-2048", digest[::-1], sig, "sha2-256", algo)
    raw = ops.sign(key, "rsa-2048", b"raw bytes", "none", "pkcs1v15")
    assert ops.verify(key.public_key(), "rsa-2048", b"raw bytes", raw, "none", "pkcs1v15")
    assert not ops.verify(key.public_key(), "rsa-2048", b"raw byte", raw, "none", "pkcs1v15")
    with pytest.raises(ops.CryptoFailure, match="prehashed input"):
        ops.sign(key, "rsa-2048", b"short", "sha2-256")
    p = make("ecdsa-p384")
    ec_key = ops.load_der(p.keys["1"].private_der)
    d384 = hashlib.sha384(b"m").digest()
    jws = ops.sign(ec_key, "ecdsa-p384", d384, "sha2-384", marshaling="jws")
    assert len(jws) == 96
    assert ops.verify(ec_key.public_key(), "ecdsa-p384", d384, jws, "sha2-384", marshaling="jws")
    assert not ops.verify(
        ec_key.public_key(), "ecdsa-p384", d384, jws[:-1], "sha2-384", marshaling="jws"
    )


def test_worker_ops_run_from_typed_arguments() -> None:
    from cryptography.hazmat.primitives import serialization

    from services.crypto.ops import CryptoFailure, run_local

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    der = key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    digest = hashlib.sha256(b"m").digest()
    sig = run_local("transit_sign", {"key_der": der, "key_type": "rsa-2048", "input": digest})
    assert ops.verify(key.public_key(), "rsa-2048", digest, sig["signature"], "sha2-256")
    ct = ops.rsa_encrypt(key.public_key(), b"secret")
    got = run_local("transit_rsa_decrypt", {"key_der": der, "ciphertext": ct})
    assert got["plaintext"] == b"secret"
    with pytest.raises(CryptoFailure, match="failed to RSA decrypt"):
        run_local("transit_rsa_decrypt", {"key_der": der, "ciphertext": b"\x00" * 256})
    with pytest.raises(CryptoFailure, match="invalid arguments"):
        run_local("transit_sign", {"key_type": "rsa-2048"})

"""The transit engine against the real OpenBao: the same request sequences, compared by status
and response keys (tests/conformance's replay), plus ciphertexts crossing between the two: a
key backed up from OpenBao restores into Trellis and decrypts OpenBao's ciphertexts, and the
reverse, which proves the `vault:vN:` format and the derivations byte for byte."""

from __future__ import annotations

import base64
import uuid

import pytest
import requests

from tests.conformance import allowlist
from tests.conformance.replay import Target
from tests.conformance.report import replay, stale
from tests.conformance.steps import S, Step, setup
from tests.openbao import OpenBao
from tests.procs import DevProcess

pytestmark = pytest.mark.e2e

P = base64.b64encode(b"the quick brown fox").decode()
CTX = base64.b64encode(b"tenant-1").decode()
AD = base64.b64encode(b"row-7").decode()


def steps(u: str) -> list[Step]:
    t = f"c-transit-{u}"
    return [
        setup("transit.enable", "POST", f"sys/mounts/{t}", {"type": "transit"}),
        S("transit.list.empty", "LIST", f"{t}/keys"),
        S("transit.read.missing", "GET", f"{t}/keys/none"),
        S("transit.create", "POST", f"{t}/keys/aes", {}),
        S("transit.create.again", "POST", f"{t}/keys/aes", {}),
        S("transit.create.badtype", "POST", f"{t}/keys/bad", {"type": "des"}),
        S("transit.create.hmac.nosize", "POST", f"{t}/keys/hm0", {"type": "hmac"}),
        S("transit.create.hmac", "POST", f"{t}/keys/hm", {"type": "hmac", "key_size": 64}),
        S(
            "transit.create.convergent.underived",
            "POST",
            f"{t}/keys/cv0",
            {"convergent_encryption": True},
        ),
        S(
            "transit.create.derived.ec",
            "POST",
            f"{t}/keys/dec",
            {"type": "ecdsa-p256", "derived": True},
        ),
        S(
            "transit.create.derived",
            "POST",
            f"{t}/keys/der",
            {"derived": True, "convergent_encryption": True},
        ),
        S("transit.create.ed", "POST", f"{t}/keys/ed", {"type": "ed25519", "exportable": True}),
        S("transit.create.ec", "POST", f"{t}/keys/ec", {"type": "ecdsa-p384"}),
        S("transit.create.rsa", "POST", f"{t}/keys/rsa", {"type": "rsa-2048"}),
        S("transit.create.chacha", "POST", f"{t}/keys/cha", {"type": "chacha20-poly1305"}),
        S("transit.read", "GET", f"{t}/keys/aes"),
        S("transit.read.ed", "GET", f"{t}/keys/ed"),
        S("transit.read.rsa", "GET", f"{t}/keys/rsa"),
        S("transit.read.hmac", "GET", f"{t}/keys/hm"),
        S("transit.read.derived", "GET", f"{t}/keys/der"),
        S("transit.list", "LIST", f"{t}/keys"),
        S(
            "transit.encrypt",
            "POST",
            f"{t}/encrypt/aes",
            {"plaintext": P},
            save={"ct": ("data", "ciphertext")},
        ),
        S(
            "transit.encrypt.ad",
            "POST",
            f"{t}/encrypt/aes",
            {"plaintext": P, "associated_data": AD},
            save={"ct_ad": ("data", "ciphertext")},
        ),
        S(
            "transit.decrypt.ad",
            "POST",
            f"{t}/decrypt/aes",
            {"ciphertext": "{ct_ad}", "associated_data": AD},
        ),
        S("transit.decrypt.ad.wrong", "POST", f"{t}/decrypt/aes", {"ciphertext": "{ct_ad}"}),
        S("transit.encrypt.missing", "POST", f"{t}/encrypt/aes", {}),
        S("transit.encrypt.notb64", "POST", f"{t}/encrypt/aes", {"plaintext": "not base64!"}),
        S("transit.encrypt.ed", "POST", f"{t}/encrypt/ed", {"plaintext": P}),
        S("transit.encrypt.upsert", "POST", f"{t}/encrypt/made", {"plaintext": P}),
        S("transit.encrypt.upsert.read", "GET", f"{t}/keys/made"),
        S(
            "transit.encrypt.version.high",
            "POST",
            f"{t}/encrypt/aes",
            {"plaintext": P, "key_version": 9},
        ),
        S(
            "transit.encrypt.batch",
            "POST",
            f"{t}/encrypt/aes",
            {"batch_input": [{"plaintext": P, "reference": "a"}, {"plaintext": P}]},
        ),
        S(
            "transit.encrypt.batch.partial",
            "POST",
            f"{t}/encrypt/aes",
            {"batch_input": [{"plaintext": P}, {"plaintext": "!!"}]},
        ),
        S(
            "transit.encrypt.batch.code",
            "POST",
            f"{t}/encrypt/aes",
            {
                "batch_input": [{"plaintext": P}, {"plaintext": "!!"}],
                "partial_failure_response_code": 207,
            },
        ),
        S("transit.decrypt", "POST", f"{t}/decrypt/aes", {"ciphertext": "{ct}"}),
        S(
            "transit.decrypt.batch",
            "POST",
            f"{t}/decrypt/aes",
            {"batch_input": [{"ciphertext": "{ct}", "reference": "r"}]},
        ),
        S("transit.decrypt.noprefix", "POST", f"{t}/decrypt/aes", {"ciphertext": "junk"}),
        S("transit.decrypt.badb64", "POST", f"{t}/decrypt/aes", {"ciphertext": "vault:v1:@@"}),
        S("transit.decrypt.toonew", "POST", f"{t}/decrypt/aes", {"ciphertext": "vault:v7:AAAA"}),
        S("transit.decrypt.nokey", "POST", f"{t}/decrypt/none", {"ciphertext": "{ct}"}),
        S("transit.derived.nocontext", "POST", f"{t}/encrypt/der", {"plaintext": P}),
        S(
            "transit.derived.encrypt",
            "POST",
            f"{t}/encrypt/der",
            {"plaintext": P, "context": CTX},
            save={"dct": ("data", "ciphertext")},
        ),
        S(
            "transit.derived.decrypt",
            "POST",
            f"{t}/decrypt/der",
            {"ciphertext": "{dct}", "context": CTX},
        ),
        S(
            "transit.derived.nonce",
            "POST",
            f"{t}/encrypt/der",
            {"plaintext": P, "context": CTX, "nonce": base64.b64encode(b"x" * 12).decode()},
        ),
        S(
            "transit.chacha.encrypt",
            "POST",
            f"{t}/encrypt/cha",
            {"plaintext": P},
            save={"cct": ("data", "ciphertext")},
        ),
        S("transit.chacha.decrypt", "POST", f"{t}/decrypt/cha", {"ciphertext": "{cct}"}),
        S(
            "transit.rsa.encrypt",
            "POST",
            f"{t}/encrypt/rsa",
            {"plaintext": P},
            save={"rct": ("data", "ciphertext")},
        ),
        S("transit.rsa.decrypt", "POST", f"{t}/decrypt/rsa", {"ciphertext": "{rct}"}),
        S("transit.rewrap", "POST", f"{t}/rewrap/aes", {"ciphertext": "{ct}"}),
        S(
            "transit.rewrap.batch",
            "POST",
            f"{t}/rewrap/aes",
            {"batch_input": [{"ciphertext": "{ct}"}]},
        ),
        S("transit.datakey.plain", "POST", f"{t}/datakey/plaintext/aes", {}),
        S("transit.datakey.wrapped", "POST", f"{t}/datakey/wrapped/aes", {"bits": 512}),
        S("transit.datakey.badtype", "POST", f"{t}/datakey/other/aes", {}),
        S("transit.datakey.badbits", "POST", f"{t}/datakey/plaintext/aes", {"bits": 100}),
        S("transit.datakey.ed", "POST", f"{t}/datakey/plaintext/ed", {}),
        S("transit.random", "POST", f"{t}/random", {}),
        S("transit.random.url", "POST", f"{t}/random/16", {"format": "hex"}),
        S("transit.random.source", "POST", f"{t}/random/platform/16", {}),
        S("transit.random.badformat", "POST", f"{t}/random", {"format": "xx"}),
        S("transit.random.toomany", "POST", f"{t}/random/999999999", {}),
        S("transit.hash", "POST", f"{t}/hash", {"input": P}),
        S("transit.hash.url", "POST", f"{t}/hash/sha3-512", {"input": P, "format": "base64"}),
        S("transit.hash.badalgo", "POST", f"{t}/hash/md5", {"input": P}),
        S("transit.hash.badformat", "POST", f"{t}/hash", {"input": P, "format": "b32"}),
        S("transit.hmac", "POST", f"{t}/hmac/aes", {"input": P}, save={"mac": ("data", "hmac")}),
        S("transit.hmac.url", "POST", f"{t}/hmac/hm/sha2-512", {"input": P}),
        S("transit.hmac.batch", "POST", f"{t}/hmac/aes", {"batch_input": [{"input": P}]}),
        S("transit.hmac.badalgo", "POST", f"{t}/hmac/aes/md5", {"input": P}),
        S("transit.hmac.nokey", "POST", f"{t}/hmac/none", {"input": P}),
        S("transit.hmac.verify", "POST", f"{t}/verify/aes", {"input": P, "hmac": "{mac}"}),
        S(
            "transit.hmac.verify.bad",
            "POST",
            f"{t}/verify/aes",
            {"input": P, "hmac": "vault:v1:AAAA"},
        ),
        S(
            "transit.sign.ed",
            "POST",
            f"{t}/sign/ed",
            {"input": P},
            save={"sig": ("data", "signature")},
        ),
        S("transit.sign.ed.verify", "POST", f"{t}/verify/ed", {"input": P, "signature": "{sig}"}),
        S(
            "transit.sign.ed.verify.bad",
            "POST",
            f"{t}/verify/ed",
            {"input": P, "signature": "vault:v1:AAAA"},
        ),
        S("transit.verify.nothing", "POST", f"{t}/verify/ed", {"input": P}),
        S("transit.sign.ec", "POST", f"{t}/sign/ec/sha2-384", {"input": P}),
        S(
            "transit.sign.ec.jws",
            "POST",
            f"{t}/sign/ec",
            {"input": P, "marshaling_algorithm": "jws"},
        ),
        S(
            "transit.sign.ec.badmarshal",
            "POST",
            f"{t}/sign/ec",
            {"input": P, "marshaling_algorithm": "pem"},
        ),
        S("transit.sign.rsa", "POST", f"{t}/sign/rsa", {"input": P}),
        S(
            "transit.sign.rsa.pkcs1",
            "POST",
            f"{t}/sign/rsa",
            {"input": P, "signature_algorithm": "pkcs1v15", "hash_algorithm": "sha2-512"},
        ),
        S(
            "transit.sign.rsa.batch",
            "POST",
            f"{t}/sign/rsa",
            {"batch_input": [{"input": P, "reference": "1"}, {"input": P}]},
        ),
        S("transit.sign.aes", "POST", f"{t}/sign/aes", {"input": P}),
        S(
            "transit.sign.rsa.none",
            "POST",
            f"{t}/sign/rsa",
            {
                "input": P,
                "hash_algorithm": "none",
                "prehashed": True,
                "signature_algorithm": "pkcs1v15",
            },
            save={"rsig": ("data", "signature")},
        ),
        S(
            "transit.verify.rsa.none",
            "POST",
            f"{t}/verify/rsa",
            {
                "input": P,
                "hash_algorithm": "none",
                "prehashed": True,
                "signature_algorithm": "pkcs1v15",
                "signature": "{rsig}",
            },
        ),
        S("transit.sign.ec.none", "POST", f"{t}/sign/ec", {"input": P, "hash_algorithm": "none"}),
        S("transit.sign.ed.none", "POST", f"{t}/sign/ed", {"input": P, "hash_algorithm": "none"}),
        S("transit.sign.rsa.badsalt", "POST", f"{t}/sign/rsa", {"input": P, "salt_length": "x"}),
        S(
            "transit.sign.rsa.salthash",
            "POST",
            f"{t}/sign/rsa",
            {"input": P, "salt_length": "hash"},
        ),
        S("transit.sign.rsa.salt-1", "POST", f"{t}/sign/rsa", {"input": P, "salt_length": "-1"}),
        S("transit.sign.rsa.salt-2", "POST", f"{t}/sign/rsa", {"input": P, "salt_length": "-2"}),
        S("transit.sign.batch.error", "POST", f"{t}/sign/ed", {"batch_input": [{"input": "!!"}]}),
        S(
            "transit.verify.batch.error",
            "POST",
            f"{t}/verify/ed",
            {"batch_input": [{"input": "!!", "signature": "x"}]},
        ),
        S("transit.hmac.batch.error", "POST", f"{t}/hmac/aes", {"batch_input": [{"input": "!!"}]}),
        S(
            "transit.verify.hmac.badb64",
            "POST",
            f"{t}/verify/aes",
            {"input": P, "hmac": "vault:v1:@@"},
        ),
        S(
            "transit.verify.sig.toonew",
            "POST",
            f"{t}/verify/ed",
            {"input": P, "signature": "vault:v9:AAAA"},
        ),
        S(
            "transit.encrypt.nonce",
            "POST",
            f"{t}/encrypt/aes",
            {"plaintext": P, "nonce": base64.b64encode(b"x" * 12).decode()},
        ),
        S(
            "transit.encrypt.batch.allbad",
            "POST",
            f"{t}/encrypt/aes",
            {"batch_input": [{"plaintext": "!!"}]},
        ),
        S("transit.sign.nokey", "POST", f"{t}/sign/none", {"input": P}),
        S("transit.sign.badhash", "POST", f"{t}/sign/ec/sha2-999", {"input": P}),
        S("transit.rotate", "POST", f"{t}/keys/aes/rotate", {}),
        S("transit.rotate.again", "POST", f"{t}/keys/aes/rotate", {}),
        S("transit.rotate.missing", "POST", f"{t}/keys/none/rotate", {}),
        S("transit.rotate.get", "GET", f"{t}/keys/aes/rotate"),
        S(
            "transit.config",
            "POST",
            f"{t}/keys/aes/config",
            {"min_decryption_version": 2, "min_encryption_version": 3},
        ),
        S("transit.config.toohigh", "POST", f"{t}/keys/aes/config", {"min_decryption_version": 9}),
        S("transit.config.enc.low", "POST", f"{t}/keys/aes/config", {"min_encryption_version": 1}),
        S(
            "transit.config.rotate.short",
            "POST",
            f"{t}/keys/aes/config",
            {"auto_rotate_period": "30m"},
        ),
        S("transit.config.rotate", "POST", f"{t}/keys/aes/config", {"auto_rotate_period": "24h"}),
        S("transit.config.missing", "POST", f"{t}/keys/none/config", {"deletion_allowed": True}),
        S("transit.decrypt.tooold", "POST", f"{t}/decrypt/aes", {"ciphertext": "{ct}"}),
        S("transit.encrypt.tooold", "POST", f"{t}/encrypt/aes", {"plaintext": P, "key_version": 2}),
        S("transit.trim.toohigh", "POST", f"{t}/keys/aes/trim", {"min_available_version": 3}),
        S("transit.trim.zero", "POST", f"{t}/keys/aes/trim", {"min_available_version": 0}),
        S("transit.trim", "POST", f"{t}/keys/aes/trim", {"min_available_version": 2}),
        S("transit.trim.read", "GET", f"{t}/keys/aes"),
        S("transit.export.notexportable", "GET", f"{t}/export/encryption-key/aes"),
        S("transit.export.public.ed", "GET", f"{t}/export/public-key/ed"),
        S("transit.export.public.rsa", "GET", f"{t}/export/public-key/rsa/1"),
        S("transit.export.public.aes", "GET", f"{t}/export/public-key/aes"),
        S("transit.export.signing.ed", "GET", f"{t}/export/signing-key/ed"),
        S("transit.export.hmac.ed", "GET", f"{t}/export/hmac-key/ed/latest"),
        S("transit.export.enc.ed", "GET", f"{t}/export/encryption-key/ed"),
        S("transit.export.badtype", "GET", f"{t}/export/secret-key/ed"),
        S("transit.export.missing", "GET", f"{t}/export/hmac-key/none"),
        S(
            "transit.config.exportable",
            "POST",
            f"{t}/keys/aes/config",
            {"exportable": True, "allow_plaintext_backup": True, "deletion_allowed": True},
        ),
        S("transit.export.enc", "GET", f"{t}/export/encryption-key/aes"),
        S("transit.export.enc.version", "GET", f"{t}/export/encryption-key/aes/3"),
        S("transit.export.enc.old", "GET", f"{t}/export/encryption-key/aes/1"),
        S("transit.backup", "GET", f"{t}/backup/aes", save={"bk": ("data", "backup")}),
        S("transit.backup.read", "GET", f"{t}/keys/aes"),
        S("transit.restore.exists", "POST", f"{t}/restore", {"backup": "{bk}"}),
        S("transit.restore.rename", "POST", f"{t}/restore/aes2", {"backup": "{bk}"}),
        S("transit.restore.read", "GET", f"{t}/keys/aes2"),
        S("transit.restore.force", "POST", f"{t}/restore", {"backup": "{bk}", "force": True}),
        S("transit.restore.empty", "POST", f"{t}/restore", {}),
        S("transit.delete.notallowed", "DELETE", f"{t}/keys/ed"),
        S("transit.delete.missing", "DELETE", f"{t}/keys/none"),
        S("transit.delete", "DELETE", f"{t}/keys/aes"),
        S("transit.delete.read", "GET", f"{t}/keys/aes"),
        S("transit.cache.read", "GET", f"{t}/cache-config"),
        S("transit.cache.small", "POST", f"{t}/cache-config", {"size": 5}),
        S("transit.cache.write", "POST", f"{t}/cache-config", {"size": 100}),
        S("transit.cache.read2", "GET", f"{t}/cache-config"),
    ]


def test_transit_answers_like_openbao(openbao: OpenBao, trellis: DevProcess) -> None:
    # Only OpenBao's 5xx answers are documented rows: everything compared must match.
    allowed = [a for a in allowlist.load() if a.kind == "oracle"]
    replayed = steps(uuid.uuid4().hex[:6])
    report = replay(
        Target("openbao", openbao.addr, openbao.token),
        Target("trellis", trellis.secrets, trellis.root_token),
        replayed,
        allowed,
    )
    print(report.summary())
    assert not report.setup_failures, report.summary()
    assert not report.undocumented, report.summary()
    assert not stale(allowed, report, replayed), "documented rows that no longer occur"
    assert report.compared >= 100


def _call(addr: str, token: str, method: str, path: str, body: dict | None = None) -> dict:
    r = requests.request(
        method, f"{addr}/v1/{path}", json=body, headers={"X-Vault-Token": token}, timeout=60
    )
    assert r.status_code in (200, 204), (addr, path, r.status_code, r.text[:2000])
    return r.json() if r.content else {}


@pytest.mark.parametrize(
    "key_type", ["aes256-gcm96", "aes128-gcm96", "chacha20-poly1305", "derived"]
)
def test_ciphertexts_cross_between_openbao_and_trellis(
    openbao: OpenBao, trellis: DevProcess, key_type: str
) -> None:
    u = uuid.uuid4().hex[:6]
    bao = (openbao.addr, openbao.token)
    tre = (trellis.secrets, trellis.root_token)
    mount = f"x-transit-{u}"
    for side in (bao, tre):
        _call(*side, "POST", f"sys/mounts/{mount}", {"type": "transit"})
    derived = key_type == "derived"
    create = {"derived": True, "convergent_encryption": True} if derived else {"type": key_type}
    extra = {"context": CTX} if derived else {}
    for direction, (src, dst) in enumerate(((bao, tre), (tre, bao))):
        name = f"k{direction}{u}"
        _call(
            *src,
            "POST",
            f"{mount}/keys/{name}",
            {**create, "exportable": True, "allow_plaintext_backup": True},
        )
        _call(*src, "POST", f"{mount}/keys/{name}/rotate")
        ct = _call(*src, "POST", f"{mount}/encrypt/{name}", {"plaintext": P, **extra})["data"]
        backup = _call(*src, "GET", f"{mount}/backup/{name}")["data"]["backup"]
        _call(*dst, "POST", f"{mount}/restore/{name}", {"backup": backup})
        plain = _call(
            *dst, "POST", f"{mount}/decrypt/{name}", {"ciphertext": ct["ciphertext"], **extra}
        )["data"]["plaintext"]
        assert plain == P
        assert ct["ciphertext"].startswith("vault:v2:")
        if derived:
            # Convergent: both sides derive the same key and nonce, so the same ciphertext.
            again = _call(*dst, "POST", f"{mount}/encrypt/{name}", {"plaintext": P, **extra})
            assert again["data"]["ciphertext"] == ct["ciphertext"]
        mac = _call(*src, "POST", f"{mount}/hmac/{name}", {"input": P})["data"]["hmac"]
        assert _call(*dst, "POST", f"{mount}/hmac/{name}", {"input": P})["data"]["hmac"] == mac

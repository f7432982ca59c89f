"""Operation tokens encrypted to a PGP key (through gpg, in throwaway home directories)."""

from __future__ import annotations

import asyncio
import base64
import shutil
import subprocess
import tempfile

import pytest

from services.replication import pgp
from shared.errors import ServiceError

assert shutil.which("gpg"), "gpg is not installed (apt-get install gnupg; ./test.sh does)"


def _gpg(home: str, *args: str, stdin: bytes = b"") -> bytes:
    return subprocess.run(
        [
            "gpg",
            "--homedir",
            home,
            "--batch",
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            "",
            *args,
        ],
        input=stdin,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout


def test_encrypted_token_decrypts_with_the_private_key() -> None:
    with tempfile.TemporaryDirectory() as home:
        _gpg(
            home,
            "--quick-gen-key",
            "DR Operator <dr@example.org>",
            "future-default",
            "default",
            "never",
        )
        public = base64.b64encode(_gpg(home, "--export")).decode()
        fpr = asyncio.run(pgp.fingerprint(public))
        assert len(fpr) == 40
        assert fpr.upper().encode() in _gpg(home, "--with-colons", "--list-keys")
        sealed = asyncio.run(pgp.encrypt(public, b"hvb.operationtoken"))
        assert _gpg(home, "--decrypt", stdin=base64.b64decode(sealed)) == b"hvb.operationtoken"
        # The operator's keyring is untouched: gpg ran in its own home.
        assert _gpg(home, "--with-colons", "--list-keys").count(b"\npub:") <= 1


@pytest.mark.parametrize("key", ["not base64!", base64.b64encode(b"no key here").decode()])
def test_bad_keys_are_400(key: str) -> None:
    with pytest.raises(ServiceError) as exc:
        asyncio.run(pgp.fingerprint(key))
    assert exc.value.code == 400

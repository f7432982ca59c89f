"""PGP encryption of a generated token, through the `gpg` program in a throwaway home directory
(nothing is imported into any real keyring). Keys come base64-encoded, as Vault takes them."""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import shutil
import tempfile

from shared.errors import ServiceError


def _key_bytes(pgp_key: str) -> bytes:
    try:
        raw = base64.b64decode(pgp_key.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ServiceError(400, "pgp_key must be a base64-encoded PGP public key") from None
    if not raw:
        raise ServiceError(400, "pgp_key is empty")
    return raw


async def _gpg(home: str, args: list[str], stdin: bytes) -> bytes:
    binary = shutil.which("gpg")
    if binary is None:
        raise ServiceError(
            400,
            "PGP keys need gpg on the server, which it lacks; start the "
            "attempt without pgp_key to use a one-time password",
        )
    proc = await asyncio.create_subprocess_exec(
        binary,
        "--homedir",
        home,
        "--batch",
        "--no-tty",
        "--quiet",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        # gpg needs nothing of the service's environment (its NATS credentials included).
        env={"PATH": os.defpath, "GNUPGHOME": home, "LC_ALL": "C"},
    )
    out, _ = await asyncio.wait_for(proc.communicate(stdin), 30)
    if proc.returncode != 0:
        raise ServiceError(400, "pgp_key is not a usable PGP public key")
    return out


def _first_fingerprint(colons: bytes) -> str:
    for line in colons.decode(errors="replace").splitlines():
        fields = line.split(":")
        if fields[0] == "fpr" and len(fields) > 9 and fields[9]:
            return fields[9].lower()
    raise ServiceError(400, "pgp_key holds no PGP public key")


async def fingerprint(pgp_key: str) -> str:
    raw = _key_bytes(pgp_key)
    with tempfile.TemporaryDirectory(prefix="trellis-gpg-") as home:
        out = await _gpg(home, ["--with-colons", "--import-options", "show-only", "--import"], raw)
    return _first_fingerprint(out)


async def encrypt(pgp_key: str, data: bytes) -> str:
    """`data` encrypted to the key, as base64 of the binary OpenPGP message."""
    raw = _key_bytes(pgp_key)
    with tempfile.TemporaryDirectory(prefix="trellis-gpg-") as home:
        await _gpg(home, ["--import"], raw)
        listing = await _gpg(home, ["--with-colons", "--list-keys"], b"")
        fpr = _first_fingerprint(listing)
        out = await _gpg(
            home,
            ["--trust-model", "always", "--encrypt", "--recipient", fpr, "--output", "-"],
            data,
        )
    return base64.b64encode(out).decode()

"""The secrets cluster's identity: a secret no NATS user can be handed.

One 32-byte seed, kept in a 0600 file (the dev data dir, a Kubernetes Secret, a path in the
settings), is the Ed25519 signing key of the secrets replicas. Every other key is derived from it
with HKDF, one per purpose, so that a holder of one derived key learns nothing of the others:

- `replica_key` seals control messages between secrets replicas (seal, unseal shares, keyring
  hand-offs, invalidations) and the replication service;
- `ticket_key` seals the API session tickets any replica can open (shared/api_session.py);
- `crypto_key` seals commands to the crypto workers, which hold only this key (their own file);
- `state_key` seals control state kept in JetStream (the DR state bucket), which the secrets
  replicas obey.

The gateway holds only the public key (`cluster_public_key`) and pins it. With `insecure_bus`
and no key configured, the seed is derived from the cluster name: every process agrees without
configuration (drills, tests), and nothing is secret: that mode is for throwaway clusters only.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import structlog
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from shared.settings import Settings

log = structlog.get_logger("identity")

SEED_BYTES = 32


class IdentityError(Exception):
    """The identity is missing or unreadable; the message says which setting to fix."""


def _derive(seed: bytes, purpose: bytes) -> bytes:
    return HKDF(hashes.SHA256(), 32, salt=None, info=b"trellis cluster key v1: " + purpose).derive(
        seed
    )


@dataclass(frozen=True, slots=True)
class ClusterIdentity:
    """What this process holds: always the public key; the rest only where it may act."""

    public_key: Ed25519PublicKey
    signing_key: Ed25519PrivateKey | None = None
    replica_key: bytes | None = None
    ticket_key: bytes | None = None
    crypto_key: bytes | None = None
    state_key: bytes | None = None
    insecure: bool = False

    @classmethod
    def from_seed(cls, seed: bytes, *, insecure: bool = False) -> ClusterIdentity:
        if len(seed) != SEED_BYTES:
            raise IdentityError(f"a cluster key is {SEED_BYTES} bytes")
        signing = Ed25519PrivateKey.from_private_bytes(seed)
        return cls(
            public_key=signing.public_key(),
            signing_key=signing,
            replica_key=_derive(seed, b"replica control"),
            ticket_key=_derive(seed, b"api session tickets"),
            crypto_key=_derive(seed, b"crypto workers"),
            state_key=_derive(seed, b"stored control state"),
            insecure=insecure,
        )

    @property
    def public_b64(self) -> str:
        return base64.b64encode(self.public_key.public_bytes_raw()).decode()

    def crypto_only(self) -> ClusterIdentity:
        """What a crypto worker gets: the public key and its own channel key."""
        return ClusterIdentity(public_key=self.public_key, crypto_key=self.crypto_key)


def _decode_b64(text: str, what: str, size: int) -> bytes:
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise IdentityError(f"{what} is not base64") from None
    if len(raw) != size:
        raise IdentityError(f"{what} must be {size} bytes, base64-encoded")
    return raw


def write_secret_file(path: Path, text: str) -> None:
    """Create (or replace) a 0600 file: created with that mode, so no reader ever sees it open."""
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def new_cluster_key(path: Path) -> ClusterIdentity:
    """Generate a cluster key into `path` (0600) unless one is there; return the identity."""
    if path.exists():
        return read_cluster_key(path)
    seed = os.urandom(SEED_BYTES)
    write_secret_file(path, base64.b64encode(seed).decode() + "\n")
    return ClusterIdentity.from_seed(seed)


def read_cluster_key(path: Path | str) -> ClusterIdentity:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise IdentityError(f"cannot read the cluster key file {path}: {exc.strerror}") from None
    return ClusterIdentity.from_seed(_decode_b64(text, f"the cluster key in {path}", SEED_BYTES))


def write_crypto_key(path: Path, identity: ClusterIdentity) -> None:
    assert identity.crypto_key is not None
    write_secret_file(path, base64.b64encode(identity.crypto_key).decode() + "\n")


def insecure_identity(cluster_name: str) -> ClusterIdentity:
    """A key anyone can compute: for clusters explicitly run with an insecure bus."""
    seed = hashlib.sha256(b"trellis insecure cluster key: " + cluster_name.encode()).digest()
    return ClusterIdentity.from_seed(seed, insecure=True)


def load_identity(settings: Settings) -> ClusterIdentity:
    """This process's identity from its settings: the key file (secrets, replication), else the
    crypto key file plus the pinned public key (crypto workers), else the pinned public key
    alone (the gateway); with none of them, the insecure key if the bus is declared insecure."""
    if settings.cluster_key_file:
        return read_cluster_key(settings.cluster_key_file)
    public: Ed25519PublicKey | None = None
    if settings.cluster_public_key:
        raw = _decode_b64(settings.cluster_public_key, "cluster_public_key", 32)
        public = Ed25519PublicKey.from_public_bytes(raw)
    if settings.crypto_key_file:
        try:
            text = Path(settings.crypto_key_file).read_text()
        except OSError as exc:
            raise IdentityError(
                f"cannot read the crypto key file {settings.crypto_key_file}: {exc.strerror}"
            ) from None
        key = _decode_b64(text, f"the crypto key in {settings.crypto_key_file}", 32)
        if public is None:
            raise IdentityError("crypto_key_file needs cluster_public_key beside it")
        return ClusterIdentity(public_key=public, crypto_key=key)
    if public is not None:
        return ClusterIdentity(public_key=public)
    if settings.insecure_bus:
        log.warning(
            "no cluster key configured: using the insecure key derived from the cluster name"
        )
        return insecure_identity(settings.cluster_name)
    raise IdentityError(
        "no secrets cluster identity: set cluster_key_file (secrets, replication), "
        "cluster_public_key (gateway) or crypto_key_file (crypto), "
        "or run with --insecure-bus on a throwaway cluster"
    )


def main(argv: list[str]) -> None:
    """`python -m shared.cluster_identity DIR`: a new cluster's key files, for a Secret."""
    if len(argv) != 1:
        raise SystemExit("usage: python -m shared.cluster_identity DIR")
    folder = Path(argv[0])
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if (folder / "cluster.key").exists():
        raise SystemExit(f"{folder / 'cluster.key'} exists: a cluster key is never overwritten")
    ident = new_cluster_key(folder / "cluster.key")
    write_crypto_key(folder / "crypto.key", ident)
    write_secret_file(folder / "public.key", ident.public_b64 + "\n")
    print(f"wrote cluster.key, crypto.key and public.key to {folder}")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])

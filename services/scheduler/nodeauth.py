"""Client nodes authenticate with their own node secret (Nomad's Node.SecretID): the scheduler
keeps only its SHA-256 in the node record (`_SecretHash`, never rendered), and every client RPC
names its nodes with their secrets. Pure: no I/O."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import Any

HASH_FIELD = "_SecretHash"
MIN_SECRET_LEN = 16  # a UUID's 128 bits, as the client generates

REGISTER_MISMATCH = "node secret ID does not match. Not registering node."
PERMISSION_DENIED = "Permission denied"


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def valid_secret(secret: Any) -> bool:
    return isinstance(secret, str) and len(secret) >= MIN_SECRET_LEN


def matches(node: Mapping[str, Any] | None, secret: str | None) -> bool:
    """Constant time on the digests: the secret must hash to what registration stored."""
    stored = (node or {}).get(HASH_FIELD)
    if not isinstance(stored, str) or not stored or not isinstance(secret, str):
        return False
    return hmac.compare_digest(secret_hash(secret).encode(), stored.encode())


def may_register(old: Mapping[str, Any] | None, new_hash: str) -> bool:
    """A node ID is the node that first registered it: a second registration must bring the
    same secret. (A record from before node secrets has none: the first to bring one owns it.)"""
    stored = (old or {}).get(HASH_FIELD)
    if not stored:
        return True
    return hmac.compare_digest(str(stored).encode(), new_hash.encode())


def refused(
    nodes: Mapping[str, Mapping[str, Any]], node_ids: Iterable[str], secrets: Mapping[str, str]
) -> list[str]:
    """The node IDs among `node_ids` whose secret is missing or wrong (or that are unknown)."""
    return [n for n in node_ids if not matches(nodes.get(n), secrets.get(n))]

"""A Merkle index over the stored entries of the secrets bucket: leaf = (key, SHA-256 of the
ciphertext), 256 buckets chosen by the key's hash, root = hash of the bucket hashes.

Two clusters holding the same keys with the same ciphertext have the same root; a diff of the 256
bucket hashes names the buckets to resynchronise (one round trip of 5 KB, then the data).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

BUCKETS = 256
DIGEST = 20  # bytes shown: 40 hex characters, the length Vault's merkle_root has


def bucket_of(key: str) -> int:
    return hashlib.sha256(key.encode()).digest()[0]


def value_digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


class MerkleIndex:
    """In memory; rebuilt from storage at start and by reindex, kept current from the WAL."""

    def __init__(self) -> None:
        self.leaves: dict[str, bytes] = {}
        self._members: list[set[str]] = [set() for _ in range(BUCKETS)]
        self._cache: list[bytes | None] = [None] * BUCKETS
        self.seq = 0  # the last WAL index applied to the index

    def __len__(self) -> int:
        return len(self.leaves)

    def clear(self) -> None:
        self.leaves.clear()
        for members in self._members:
            members.clear()
        self._cache = [None] * BUCKETS

    def put(self, key: str, value: bytes) -> None:
        self.put_digest(key, value_digest(value))

    def put_digest(self, key: str, digest: bytes) -> None:
        b = bucket_of(key)
        self.leaves[key] = digest
        self._members[b].add(key)
        self._cache[b] = None

    def delete(self, key: str) -> None:
        if self.leaves.pop(key, None) is not None:
            b = bucket_of(key)
            self._members[b].discard(key)
            self._cache[b] = None

    def bucket_hash(self, b: int) -> bytes:
        cached = self._cache[b]
        if cached is None:
            h = hashlib.sha256()
            for key in sorted(self._members[b]):
                raw = key.encode()
                # Length-prefixed, so no two different (key, digest) lists hash alike.
                h.update(len(raw).to_bytes(4, "big") + raw + self.leaves[key])
            cached = self._cache[b] = h.digest()[:DIGEST]
        return cached

    def bucket_hashes(self) -> list[bytes]:
        return [self.bucket_hash(b) for b in range(BUCKETS)]

    def root(self) -> str:
        return root_of(self.bucket_hashes())

    def keys_in(self, buckets: Iterable[int]) -> set[str]:
        out: set[str] = set()
        for b in buckets:
            out |= self._members[b]
        return out

    def diff_keys(self, other: MerkleIndex) -> tuple[list[str], list[str], list[str]]:
        """Key-level comparison: (only here, only there, different digest), each sorted."""
        mine, theirs = self.leaves, other.leaves
        only_here = sorted(k for k in mine if k not in theirs)
        only_there = sorted(k for k in theirs if k not in mine)
        changed = sorted(k for k in mine if k in theirs and mine[k] != theirs[k])
        return only_here, only_there, changed


def root_of(bucket_hashes: Sequence[bytes]) -> str:
    return hashlib.sha256(b"".join(bucket_hashes)).digest()[:DIGEST].hex()


def diff(mine: Sequence[bytes], theirs: Sequence[bytes]) -> list[int]:
    """Buckets whose hashes differ; a malformed list counts as all different."""
    if len(theirs) != BUCKETS:
        return list(range(BUCKETS))
    return [b for b in range(BUCKETS) if mine[b] != theirs[b]]

"""Transit's loaded key objects (services/secrets/engines/transit/keyobjects.py) follow the key:
after a rotation, a trim, a deletion and re-creation, or another replica's change, no request is
served by an object built from material the key no longer holds."""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import pytest
from cryptography.exceptions import InvalidSignature

from services.secrets.engines.transit import keyobjects
from services.secrets.engines.transit import symmetric as sym
from services.secrets.engines.transit.asym import private_of, public_of
from services.secrets.engines.transit.backend import TransitBackend
from services.secrets.engines.transit.paths_keys import ConfigFields, CreateFields, create_key
from services.secrets.engines.transit.policy import (
    Policy,
    TransitError,
    add_version,
    apply_config,
    new_version_material,
    trim,
)
from shared.storage import CasConflict


class MemoryStore:
    """The storage calls the backend makes, over a dict, with revisions for compare-and-set."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[bytes, int]] = {}
        self.revision = 0

    def _write(self, key: str, value: bytes) -> None:
        self.revision += 1
        self.entries[key] = (value, self.revision)

    async def get_entry(self, key: str) -> tuple[bytes, int] | None:
        return self.entries.get(key)

    async def get(self, key: str) -> bytes | None:
        got = self.entries.get(key)
        return None if got is None else got[0]

    async def get_obj(self, key: str, kind: Any) -> Any:
        return None

    async def create(self, key: str, value: bytes) -> None:
        if key in self.entries:
            raise CasConflict(key)
        self._write(key, value)

    async def update(self, key: str, value: bytes, revision: int) -> None:
        if self.entries.get(key, (b"", -1))[1] != revision:
            raise CasConflict(key)
        self._write(key, value)

    async def put(self, key: str, value: bytes) -> None:
        self._write(key, value)

    async def delete(self, key: str) -> None:
        self.entries.pop(key, None)


def backend(store: MemoryStore) -> TransitBackend:
    return TransitBackend(None, None, store)  # type: ignore[arg-type]


async def loaded(b: TransitBackend, name: str) -> Policy:
    p = await b.load(name)
    assert p is not None
    return p


def signs_for(p: Policy, ver: int, data: bytes) -> bytes:
    sig: bytes = private_of(p, ver).sign(data)
    public_of(p, ver).verify(sig, data)  # the stored public key of that version
    return sig


async def test_a_key_deleted_and_created_again_signs_with_its_new_material() -> None:
    b = backend(MemoryStore())
    name = "objects-recreated"
    await create_key(b, CreateFields(name=name, type="ed25519"))
    old = await loaded(b, name)
    old_sig = signs_for(old, 1, b"msg")
    await b.delete(name)
    assert await b.load(name) is None
    await create_key(b, CreateFields(name=name, type="ed25519"))
    new = await loaded(b, name)
    assert new.latest_version == 1  # the same version number, other material
    new_sig = signs_for(new, 1, b"msg")
    assert new_sig != old_sig
    with pytest.raises(InvalidSignature):
        public_of(new, 1).verify(old_sig, b"msg")


async def test_another_replicas_change_reaches_the_key_objects_with_its_invalidation() -> None:
    store = MemoryStore()
    here, there = backend(store), backend(store)
    name = "objects-elsewhere"
    await create_key(here, CreateFields(name=name, type="aes256-gcm96", derived=True))
    ctx = b"tenant-1"
    sealed_here = sym.encrypt(await loaded(here, name), 1, b"secret", ctx)
    # The other replica deletes and re-creates the key: version 1 is other material now.
    await there.delete(name)
    await create_key(there, CreateFields(name=name, type="aes256-gcm96", derived=True))
    sealed_there = sym.encrypt(await loaded(there, name), 1, b"secret", ctx)
    here.forget(name)  # the invalidation broadcast arrives
    fresh = await loaded(here, name)
    assert sym.decrypt(fresh, 1, sealed_there, ctx) == b"secret"
    with pytest.raises(TransitError, match="authentication failed"):
        sym.decrypt(fresh, 1, sealed_here, ctx)


async def test_rotation_and_trim_leave_no_object_of_a_removed_version() -> None:
    b = backend(MemoryStore())
    name = "objects-trimmed"
    await create_key(b, CreateFields(name=name, type="chacha20-poly1305"))
    v1 = await loaded(b, name)
    sealed_v1 = sym.encrypt(v1, 1, b"old")  # builds version 1's cipher on this copy
    rotated = await b.rotate(name)
    assert rotated is not None and rotated.latest_version == 2
    v2 = await loaded(b, name)
    assert v2 is not v1
    assert sym.decrypt(v2, 1, sealed_v1) == b"old"  # still a version of the key
    sealed_v2 = sym.encrypt(v2, 2, b"new")
    config = ConfigFields(name=name, min_decryption_version=2)
    await b.mutate(name, lambda p: apply_config(p, config, {"min_decryption_version"}))
    await b.mutate(name, lambda p: trim(p, 2))
    now = await loaded(b, name)
    assert sym.decrypt(now, 2, sealed_v2) == b"new"
    with pytest.raises(TransitError, match="no such key version"):
        sym.decrypt(now, 1, sealed_v1)


def test_objects_are_never_stored_with_the_key() -> None:
    p = Policy(name="objects-encoded", type="ed25519")
    add_version(p, new_version_material(p.kt))
    before = msgspec.json.encode(p)
    signs_for(p, 1, base64.b64encode(b"x"))
    assert msgspec.json.encode(p) == before
    copy = msgspec.json.decode(before, type=Policy)
    assert copy.__dict__ == {}  # a copy read from storage starts with nothing loaded


def test_kept_objects_stay_bounded_and_are_rebuilt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyobjects, "MAX_OBJECTS", 4)
    p = Policy(name="objects-bounded", type="aes256-gcm96", derived=True)
    add_version(p, new_version_material(p.kt))
    contexts = [f"user-{i}".encode() for i in range(10)]
    sealed = [sym.encrypt(p, 1, b"data-" + ctx, ctx) for ctx in contexts]
    assert len(p.__dict__["_objects"]) <= 4
    for ctx, raw in zip(contexts, sealed, strict=True):
        assert sym.decrypt(p, 1, raw, ctx) == b"data-" + ctx
    assert len(p.__dict__["_objects"]) <= 4

"""Scheduled rotation of identity token keys: the leader's pass rotates the keys that are due
(and only those, once), and the unauthenticated JWKS read never writes, even for a key past
its rotation time."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from services.secrets.core.barrier import Barrier
from services.secrets.core.namespaces import Namespace
from services.secrets.identity import oidc_rotation
from services.secrets.identity.oidc import OidcIssuer
from services.secrets.identity.oidc_keys import KeyVersion, key_version
from services.secrets.identity.oidc_store import KEYS, ROLES, NamedKey, OidcStore, Role
from services.secrets.keyring import Keyring
from tests.fakes.counting_storage import CountingStorage


async def local_version(self: OidcStore, algorithm: str) -> KeyVersion:
    """Key generation without a crypto worker."""
    pem = (
        ec.generate_private_key(ec.SECP256R1())
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )
    return key_version(pem, algorithm)


@pytest.fixture(autouse=True)
def no_crypto_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(OidcStore, "new_version", local_version)


async def identity_view() -> tuple[Any, CountingStorage]:
    storage = CountingStorage()
    barrier = Barrier(storage)
    barrier.unseal(Keyring.new())
    return barrier.view("logical/identity-root/"), storage


async def put_key(store: OidcStore, name: str, next_rotation: float) -> NamedKey:
    key = NamedKey(
        algorithm="ES256",
        rotation_period=60,
        verification_ttl=120,
        allowed_client_ids=["*"],
        signing=await store.new_version("ES256"),
        upcoming=await store.new_version("ES256"),
        next_rotation=next_rotation,
    )
    await store.storage.put_obj(KEYS + name, key)
    return key


async def test_the_pass_rotates_only_due_keys_once() -> None:
    view, _ = await identity_view()
    store = OidcStore(view, core=None)
    due = await put_key(store, "k-due", time.time() - 1)
    later = await put_key(store, "k-later", time.time() + 3600)
    assert await store.rotate_due() == ["k-due"]
    rotated = await store.key("k-due")
    assert rotated is not None and rotated.signing is not None and due.upcoming is not None
    assert rotated.signing.kid == due.upcoming.kid  # the published upcoming key signs now
    assert [k.kid for k in rotated.retired] == [due.signing.kid]  # type: ignore[union-attr]
    assert rotated.next_rotation > time.time() + 50
    assert await store.key("k-later") == later
    assert await store.rotate_due() == []


async def test_jwks_reads_never_write_even_for_an_overdue_key() -> None:
    view, storage = await identity_view()
    backend = SimpleNamespace(storage=view, core=SimpleNamespace())
    issuer = OidcIssuer(backend)
    key = await put_key(issuer.store, "k-jwks", time.time() - 1)
    await view.put_obj(ROLES + "r-jwks", Role(key="k-jwks", client_id="c1"))
    writes = storage.writes
    jwks = await issuer.jwks()
    assert storage.writes == writes
    assert {k["kid"] for k in jwks} == {key.signing.kid, key.upcoming.kid}  # type: ignore[union-attr]


async def test_the_leader_pass_covers_every_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    views = {}
    for ns_id in ("root", "ns1"):
        view, _ = await identity_view()
        await put_key(OidcStore(view, None), f"k-{ns_id}", time.time() - 1)
        views[ns_id] = view
    core = SimpleNamespace(
        namespaces=SimpleNamespace(
            by_id={i: Namespace(id=i, path="" if i == "root" else f"{i}/") for i in views}
        ),
        table=lambda ns: SimpleNamespace(
            backends={"identity/": SimpleNamespace(storage=views[ns.id])}
        ),
    )
    before = {i: await OidcStore(v, None).key(f"k-{i}") for i, v in views.items()}
    await oidc_rotation.rotate_due_keys(core)  # type: ignore[arg-type]
    for ns_id, view in views.items():
        after = await OidcStore(view, None).key(f"k-{ns_id}")
        old = before[ns_id]
        assert after is not None and old is not None
        assert after.signing == old.upcoming

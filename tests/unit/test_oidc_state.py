"""The sealed state of an OIDC browser login as two replicas of one mount see it: starting a
login writes nothing but the mount's key (once), the other replica opens the state, and a
state is refused once altered, expired or used."""

from __future__ import annotations

import msgspec
import pytest

from services.secrets.auth import oidc_state
from services.secrets.auth.oidc_state import OidcStates, new_state
from services.secrets.core.barrier import Barrier
from services.secrets.keyring import Keyring
from tests.fakes.counting_storage import CountingStorage


def two_replicas() -> tuple[OidcStates, OidcStates, CountingStorage]:
    storage = CountingStorage()
    barrier = Barrier(storage)
    barrier.unseal(Keyring.new())
    view = barrier.view("auth/oidc-mount/")
    return OidcStates(view), OidcStates(view), storage


async def test_starting_logins_writes_only_the_key_once() -> None:
    a, b, storage = two_replicas()
    sealed = [await a.seal(new_state("dev", "http://localhost:8250/cb", "")) for _ in range(50)]
    await b.seal(new_state("dev", "http://localhost:8250/cb", ""))
    assert storage.writes == 1  # the mount's state key
    assert len(set(sealed)) == 50
    # The secret PKCE verifier does not show in the state the browser carries.
    state = new_state("dev", "http://localhost:8250/cb", "")
    assert state.code_verifier not in await a.seal(state)


async def test_the_other_replica_opens_a_state_once() -> None:
    a, b, _ = two_replicas()
    state = new_state("dev", "http://localhost:8250/cb", "n1")
    value = await a.seal(state)
    opened = await b.open(value)
    assert opened == state
    assert await b.use(opened)
    assert await a.open(value) is None  # used
    assert not await a.use(state)


@pytest.mark.parametrize("mangle", ["flip", "truncate", "garbage", "empty", "huge"])
async def test_altered_states_are_refused(mangle: str) -> None:
    a, b, _ = two_replicas()
    value = await a.seal(new_state("dev", "http://localhost:8250/cb", ""))
    bad = {
        "flip": value[:10] + ("A" if value[10] != "A" else "B") + value[11:],
        "truncate": value[:-4],
        "garbage": "not*base64!",
        "empty": "",
        "huge": "A" * 10_000,
    }[mangle]
    assert await b.open(bad) is None


async def test_another_mounts_state_is_refused() -> None:
    a, _, _ = two_replicas()
    other, _, _ = two_replicas()
    assert await other.open(await a.seal(new_state("dev", "http://localhost:8250/cb", ""))) is None


async def test_expired_states_are_refused_and_used_ones_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b, _ = two_replicas()
    old = msgspec.structs.replace(new_state("dev", "http://localhost:8250/cb", ""), expires_at=1.0)
    assert await b.open(await a.seal(old)) is None
    # A used state's record goes at a later sweep once the state has expired anyway.
    assert await a.use(old)
    assert await a.storage.list(oidc_state.USED_PREFIX) == [old.id]
    monkeypatch.setattr(oidc_state, "SWEEP_SECONDS", 0.0)
    assert await a.use(new_state("dev", "http://localhost:8250/cb", ""))
    assert old.id not in await a.storage.list(oidc_state.USED_PREFIX)
    assert len(await a.storage.list(oidc_state.USED_PREFIX)) == 1

"""Keyring rotation (`sys/rotate`): a new barrier key term for new writes, older terms kept so
every value written before stays readable.

The keyring is stored sealed by the root key (`core/keyring`), so rotating needs the root key.
A replica that opened the keyring itself (shares, static seal, init) holds it; one that joined
by hand-off does not, so the root key is also kept under the barrier at `core/root-key-barrier`
(Vault's keyring carries its root key the same way): whoever can read it already holds the
keyring it protects. Other replicas learn the new term from a sealed invalidation ("keyring")
and re-read `core/keyring`.

`sys/rotate/config` (Vault's automatic rotation) is stored under the barrier; the expiry
leader's loop calls `maybe_auto_rotate` every 30 s.
"""

from __future__ import annotations

import hmac
import time
from typing import TYPE_CHECKING

import msgspec
import structlog

from services.secrets.core.seal import KEYRING
from services.secrets.errors import SecretsError, bad_request
from services.secrets.keyring import BarrierError, Keyring, open_with, seal_with

if TYPE_CHECKING:
    from services.secrets.core.core import Core

log = structlog.get_logger("rotation")

ROOT_KEY_COPY = "core/root-key-barrier"
ROTATE_CONFIG = "core/rotate-config"
INVALIDATION = "keyring"

# Vault's bounds for automatic rotation: 2^32 * 0.9 operations at most (the GCM nonce budget).
MAX_OPERATIONS = 3_865_470_566
MIN_OPERATIONS = 1_000_000
MIN_INTERVAL = 24 * 3600


class RotateConfig(msgspec.Struct, kw_only=True):
    max_operations: int = MAX_OPERATIONS
    interval: int = 0  # seconds; 0: no time-based rotation
    enabled: bool = True


def check_config(config: RotateConfig) -> None:
    """Vault's rules for sys/rotate/config; raises 400 naming the bad value."""
    if not MIN_OPERATIONS <= config.max_operations <= MAX_OPERATIONS:
        raise bad_request(
            f"max_operations must be in the range [{MIN_OPERATIONS},{MAX_OPERATIONS}]"
        )
    if config.interval and config.interval < MIN_INTERVAL:
        raise bad_request("interval must be greater or equal to 24h0m0s")
    if config.interval < 0:
        raise bad_request("interval cannot be negative")


async def read_config(core: Core) -> RotateConfig:
    got = await core.barrier.view("").get_obj(ROTATE_CONFIG, RotateConfig)
    return got or RotateConfig()


async def write_config(core: Core, config: RotateConfig) -> None:
    check_config(config)
    await core.barrier.view("").put_obj(ROTATE_CONFIG, config)


async def remember_root_key(core: Core) -> None:
    """Keep the root key under the barrier when this replica has it and the copy is missing
    or stale (after a root key change)."""
    root = core.seal.root_key
    # A DR secondary writes nothing: its storage is its primary's, copy included.
    if root is None or core.barrier.sealed or core.dr_mode == "secondary":
        return
    view = core.barrier.view("")
    try:
        stored = await view.get(ROOT_KEY_COPY)
    except BarrierError:
        stored = None
    if stored is None or not hmac.compare_digest(stored, root):
        await view.put(ROOT_KEY_COPY, root)


async def root_key(core: Core) -> bytes:
    if core.seal.root_key is not None:
        return core.seal.root_key
    stored = await core.barrier.view("").get(ROOT_KEY_COPY)
    if stored is None:
        raise SecretsError(500, "the root key is not available on this replica; unseal it again")
    core.seal.root_key = stored
    return stored


async def rotate(core: Core) -> Keyring:
    """Install a new term cluster-wide; returns the new keyring. Concurrent rotations on two
    replicas cannot lose a term: the stored keyring is replaced by compare-and-set."""
    root = await root_key(core)
    for _ in range(20):
        entry = await core.storage.get(KEYRING)
        if entry is None:
            raise SecretsError(500, "the stored keyring is missing")
        current = Keyring.from_bytes(open_with(root, entry.value, KEYRING.encode()))
        new = Keyring.from_bytes(current.to_bytes())
        new.rotate()
        try:
            await core.storage.update(
                KEYRING, seal_with(root, new.to_bytes(), KEYRING.encode()), entry.revision
            )
        except Exception:
            continue  # another replica rotated meanwhile: rotate on top of its term
        core.barrier.unseal(new)
        await core.broadcast_invalidate(INVALIDATION)
        log.info("keyring rotated", term=new.active_term)
        return new
    raise bad_request("the keyring is changing too fast; try again")


async def reload_keyring(core: Core) -> None:
    """Another replica rotated: read the stored keyring and use it (keeping our counter)."""
    if core.barrier.sealed:
        return
    root = await root_key(core)
    entry = await core.storage.get(KEYRING)
    if entry is None:
        return
    new = Keyring.from_bytes(open_with(root, entry.value, KEYRING.encode()))
    old = core.barrier.keyring
    if old is not None and old.active_term == new.active_term:
        new.encryptions = old.encryptions
    core.barrier.unseal(new)


_CHECK_EVERY = 30.0  # seconds between automatic-rotation checks (one storage read each)
_next_check: dict[int, float] = {}


async def maybe_auto_rotate(core: Core) -> bool:
    """Rotate when the active term is past the configured operations or interval (the
    expiry leader calls this; the operations of every live replica count)."""
    ring = core.barrier.keyring
    now = time.monotonic()
    if ring is None or now < _next_check.get(id(core), 0.0):
        return False
    _next_check[id(core)] = now + _CHECK_EVERY
    config = await read_config(core)
    if not config.enabled:
        return False
    age = time.time() - ring.installed_at(ring.active_term).timestamp()
    due = bool(config.interval) and age >= config.interval
    if due or await core.encryption_counts.total() >= config.max_operations:
        await rotate(core)
        return True
    return False

"""sys/rotate (and OpenBao's sys/rotate/keyring), sys/key-status, sys/rotate/config (and
sys/rotate/keyring/config): the barrier keyring's terms."""

from __future__ import annotations

from datetime import UTC
from typing import TYPE_CHECKING, Annotated

import msgspec

from services.secrets.core import rotation
from services.secrets.framework.fields import Duration, desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.core.core import Core


class ConfigFields(msgspec.Struct, kw_only=True):
    max_operations: Annotated[
        int, desc("encryptions under one term before it is rotated automatically")
    ] = rotation.MAX_OPERATIONS
    interval: Annotated[Duration, desc("rotate automatically after this long; 0: never")] = 0
    enabled: Annotated[bool, desc("whether automatic rotation is on")] = True


def go_duration(seconds: int) -> str:
    """24h0m0s, as Go prints a time.Duration."""
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    if h:
        return f"{h}h{m}m{s}s"
    return f"{m}m{s}s" if m else f"{s}s"


def rfc3339(dt) -> str:  # type: ignore[no-untyped-def]
    return dt.astimezone(UTC).isoformat().replace("+00:00", "Z")


def paths(core: Core) -> list[Path]:
    async def rotate(req: Request, _: NoFields) -> Response:
        await rotation.rotate(core)
        return Response()

    async def key_status(req: Request, _: NoFields) -> Response:
        ring = core.barrier.keyring
        assert ring is not None  # the dispatcher answers 503 while sealed
        term = ring.active_term
        data = {
            "term": term,
            "install_time": rfc3339(ring.installed_at(term)),
            "encryptions": await core.encryption_counts.total(),
        }
        return Response(data=data, data_at_top=True)

    async def config_read(req: Request, _: NoFields) -> Response:
        cfg = await rotation.read_config(core)
        return Response(
            data={
                "enabled": cfg.enabled,
                "interval": go_duration(cfg.interval) if cfg.interval else 0,
                "max_operations": cfg.max_operations,
            }
        )

    async def config_write(req: Request, f: ConfigFields) -> Response:
        cfg = await rotation.read_config(core)
        # Only what the request names changes, as Vault's partial update.
        given = req.data or {}
        for name in ("max_operations", "interval", "enabled"):
            if name in given:
                setattr(cfg, name, getattr(f, name))
        await rotation.write_config(core, cfg)
        return Response()

    config_ops = {
        Op.READ: Operation(config_read, "Read the automatic rotation settings"),
        **write(config_write, "Configure automatic rotation", sudo=True),
    }
    return [
        Path(
            ("rotate", "rotate/keyring"),
            write(rotate, "Rotate the barrier encryption key", sudo=True),
            synopsis="Install a new barrier key term; older terms stay to read older data.",
        ),
        Path(
            "key-status",
            {Op.READ: Operation(key_status, "The active barrier key term")},
            synopsis="The active key term, when it was installed, and its encryptions.",
        ),
        Path(
            ("rotate/config", "rotate/keyring/config"),
            config_ops,
            ConfigFields,
            synopsis="Automatic rotation of the barrier key.",
        ),
    ]

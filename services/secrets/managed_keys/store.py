"""Managed keys of a namespace, stored inside the barrier by name (so a name is unique across
every backend type), with the parameters as written so an update can merge over them."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.core.barrier import CasConflict
from services.secrets.errors import bad_request, not_found
from services.secrets.managed_keys.params import KeyConfig, validate

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView
    from services.secrets.core.namespaces import Namespace

PREFIX = "sys/managed-keys/"


class StoredKey(msgspec.Struct, kw_only=True):
    name: str
    type: str
    uuid: str
    raw: dict[str, Any] = {}


def _view(core: Any, ns: Namespace) -> BarrierView:
    return core.namespaces.view(ns).sub(PREFIX)


def libraries(core: Any) -> dict[str, str]:
    """kms_library stanzas of the server config, by lowercase name."""
    return {lib.name.lower(): lib.library for lib in core.settings.kms_library}


def config_of(core: Any, stored: StoredKey, *, for_use: bool = True) -> KeyConfig:
    """The typed key; `for_use=False` (reads) does not require its kms_library to exist."""
    libs = libraries(core) if for_use else None
    return validate(stored.type, stored.name, stored.uuid, stored.raw, libs)


async def get(core: Any, ns: Namespace, type_: str, name: str) -> StoredKey:
    stored = await _view(core, ns).get_obj(name, StoredKey)
    if stored is None or stored.type != type_:
        raise not_found(f"no {type_} managed key named {name!r}")
    return stored


async def put(core: Any, ns: Namespace, type_: str, name: str, given: dict[str, Any]) -> KeyConfig:
    """Create, or update by merging `given` over what was written before; a name taken by
    another type is refused. Validated before anything is stored."""
    view = _view(core, ns)
    found = await view.get_obj_entry(name, StoredKey)
    if found is not None and found[0].type != type_:
        raise bad_request(
            f"a managed key named {name!r} already exists with type "
            f"{found[0].type!r}; names are unique across types"
        )
    old, rev = found if found is not None else (None, 0)
    raw = {
        **(old.raw if old else {}),
        **{k: v for k, v in given.items() if v is not None and k not in ("name", "type")},
    }
    stored = StoredKey(name=name, type=type_, uuid=old.uuid if old else str(uuid.uuid4()), raw=raw)
    cfg = config_of(core, stored)
    data = msgspec.json.encode(stored)
    try:
        if rev:
            await view.update(name, data, rev)
        else:
            await view.create(name, data)
    except CasConflict:  # someone wrote the same name at the same time
        raise bad_request(f"managed key {name!r} changed concurrently; try again") from None
    return cfg


async def names(core: Any, ns: Namespace, type_: str) -> list[str]:
    view = _view(core, ns)
    out = []
    for name in await view.list():
        stored = await view.get_obj(name, StoredKey)
        if stored is not None and stored.type == type_:
            out.append(name)
    return sorted(out)


async def delete(core: Any, ns: Namespace, type_: str, name: str) -> None:
    view = _view(core, ns)
    stored = await view.get_obj(name, StoredKey)
    if stored is None:
        return
    if stored.type != type_:
        raise bad_request(f"managed key {name!r} has type {stored.type!r}, not {type_!r}")
    users = sorted(
        path
        for path, entry in core.table(ns).entries.items()
        if name in entry.config.allowed_managed_keys
    )
    if users:
        raise bad_request(
            f"managed key {name!r} is still listed in allowed_managed_keys of "
            f"{', '.join(users)}; remove it there first"
        )
    await view.delete(name)

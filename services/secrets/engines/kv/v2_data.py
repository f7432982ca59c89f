"""KV v2 `data/<path>`: read a version, write a new one (with check-and-set), merge-patch the
latest, and soft-delete the latest."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import msgspec

from services.secrets.engines.kv import inputs
from services.secrets.engines.kv.merge_patch import merge_patch
from services.secrets.engines.kv.read_render import ReadRenderer
from services.secrets.engines.kv.records import Config, KeyRecord
from services.secrets.engines.kv.store import (
    INLINE_MAX,
    Got,
    KVStore,
    Plan,
    Unset,
    key_exists,
    recall,
)
from services.secrets.engines.kv.timestamps import now_ns
from services.secrets.engines.kv.versions import (
    VERSION_INLINE_MAX,
    add_version,
    fits_inline,
    is_deleted,
    readable,
    version_metadata,
)
from services.secrets.errors import SecretsError, bad_request, not_found
from services.secrets.framework.path import Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.kv.backend import KVBackend

MERGE_PATCH = "application/merge-patch+json"


class DataPath(msgspec.Struct, kw_only=True):
    path: str


def deleted_response(key: KeyRecord, number: int, body: str) -> Response:
    """A deleted or destroyed version is a 404 that still carries its metadata (clients such
    as hvac read `data.metadata.deletion_time` from it)."""
    meta = version_metadata(key, number, key.versions[number])
    return Response(data={body: None, "metadata": meta}, status=404, extra={"errors": []})


async def read_version(
    store: KVStore, path: str, version: int, body: str = "data"
) -> tuple[KeyRecord, int, bytes] | Response:
    """The key record, version number and JSON data of a readable version, or the deleted
    answer. One storage get for the latest version; a second one for older versions."""
    key = await store.read_key(path)
    if key is None:
        raise not_found()
    number = version or key.current
    entry = key.versions.get(number)
    if entry is None:
        raise not_found()
    if not readable(entry, now_ns()):
        return deleted_response(key, number, body)
    raw = await store.version_data(key, number)
    if raw is None:  # pruned or destroyed between the two gets
        raise not_found()
    return key, number, raw


def check_cas(cas: int | None, config: Config, key: KeyRecord) -> None:
    if cas is None:
        if config.cas_required or key.cas_required:
            raise bad_request("check-and-set parameter required for this call")
    elif cas != key.current:
        raise bad_request("check-and-set parameter did not match the current version")


async def add_data(
    store: KVStore, key: KeyRecord, config: Config, now: int, raw: bytes, blob: str = ""
) -> tuple[int, list[str], list[str]]:
    """Add `raw` as the key's new version: in `blob` when given, else in the record when it
    fits, else in a blob created here. Returns (version number, blobs no longer referenced,
    blobs created here)."""
    created = []
    if not blob and not fits_inline(key, len(raw)):
        blob = await store.create_blob(raw)
        created.append(blob)
    inline = raw if len(raw) <= INLINE_MAX else None
    number, dropped = add_version(key, config, now, blob, inline)
    return number, dropped, created


def require_merge_patch(req: Request) -> None:
    ctype = req.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != MERGE_PATCH:
        raise SecretsError(
            415, f"PATCH requires Content-Type {MERGE_PATCH}, got {ctype or 'none'!r}"
        )


def written(key: KeyRecord, number: int) -> Response:
    """A write's answer: the new version's metadata."""
    return Response(data=version_metadata(key, number, key.versions[number]))


def paths(backend: KVBackend) -> list[Path]:
    store = backend.store

    async def exists(req: Request, f: DataPath) -> bool:
        return await key_exists(store, req, f.path)

    rendered = ReadRenderer()

    async def read(req: Request, f: DataPath) -> Response:
        found = await read_version(store, f.path, inputs.version_param(req.data.get("version")))
        if isinstance(found, Response):
            return found
        # The data goes out as the stored JSON bytes: no decode and re-encode per read.
        return Response(data=rendered.render(*found))

    async def put(req: Request, f: DataPath) -> Response:
        if f.path.endswith("/"):
            raise bad_request("a key cannot end in '/'")
        data = inputs.json_object("data", req.data.get("data"), required=True)
        cas = inputs.cas_option(req.data)
        raw = msgspec.json.encode(data)
        got = recall(req, f.path)

        async def current() -> Got:
            return await store.get_key(f.path) if isinstance(got, Unset) else got

        async def large_blob() -> str:
            # Data too large for the record is stored (durably) before any record names it.
            return "" if len(raw) <= VERSION_INLINE_MAX else await store.create_blob(raw)

        # The blob, the config and (unless prefetched) the record are fetched in parallel.
        blob, config, record = await asyncio.gather(
            large_blob(), store.get_config(), current(), return_exceptions=True
        )
        if (
            isinstance(blob, BaseException)
            or isinstance(config, BaseException)
            or isinstance(record, BaseException)
        ):
            if isinstance(blob, str) and blob:
                await store.delete_blobs([blob])
            raise next(r for r in (blob, config, record) if isinstance(r, BaseException))

        async def change(key: KeyRecord | None) -> Plan:
            now = now_ns()
            key = key or KeyRecord(created=now, updated=now)
            check_cas(cas, config, key)
            number, dropped, created = await add_data(store, key, config, now, raw, blob)
            return Plan(key, written(key, number), drop=dropped, undo=created)

        try:
            return await store.mutate(f.path, change, record)
        except SecretsError:
            # Refused, so no record names the blob (any other error may have written it).
            if blob:
                await store.delete_blobs([blob])
            raise

    async def patch(req: Request, f: DataPath) -> Response:
        require_merge_patch(req)
        delta = inputs.json_object("data", req.data.get("data"), required=True)
        cas = inputs.cas_option(req.data)
        config = await store.get_config()

        async def change(key: KeyRecord | None) -> Plan:
            if key is None:
                raise not_found()
            check_cas(cas, config, key)
            entry = key.versions.get(key.current)
            if entry is None or not readable(entry, now_ns()):
                raise not_found()
            current = await store.version_data(key, key.current)
            if current is None:
                raise not_found()
            try:
                raw = msgspec.json.encode(merge_patch(msgspec.json.decode(current), delta))
            except RecursionError:
                raise bad_request("data is nested too deeply") from None
            number, dropped, created = await add_data(store, key, config, now_ns(), raw)
            return Plan(key, written(key, number), drop=dropped, undo=created)

        return await store.mutate(f.path, change)

    async def delete_latest(_req: Request, f: DataPath) -> Response:
        async def change(key: KeyRecord | None) -> Plan:
            if key is None:
                return Plan(None)
            entry = key.versions.get(key.current)
            now = now_ns()
            if entry is None or entry.destroyed or is_deleted(entry, now):
                return Plan(None)
            entry.deleted = now
            return Plan(key)

        await store.mutate(f.path, change)
        return Response()

    return [
        Path(
            "data/{path*}",
            {
                Op.READ: Operation(read, "Read a version (the latest unless ?version=n)"),
                **write(put, "Write a new version"),
                Op.PATCH: Operation(patch, "Merge-patch the latest version into a new one"),
                Op.DELETE: Operation(delete_latest, "Soft-delete the latest version"),
            },
            DataPath,
            exists=exists,
            arbitrary_input=True,
            synopsis="Versioned secret data.",
            description='Write `{"data": {...}, "options": {"cas": n}}`; read with '
            "`?version=n`. PATCH takes a JSON merge patch "
            "(Content-Type application/merge-patch+json).",
        ),
        # `data/` names no secret: every method is unsupported there (405, as OpenBao), so a
        # LIST sent to data/ instead of metadata/ is told its method is wrong, not its path.
        Path("data/", {}, synopsis="No secret: list keys under metadata/ instead."),
    ]

"""KV v2 `metadata/<path>`: read a key's metadata and versions, set its max_versions /
cas_required / delete_version_after / custom_metadata (POST replaces, PATCH merges), delete the
key with every version, and LIST keys below a folder."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from services.secrets.engines.kv import inputs
from services.secrets.engines.kv.merge_patch import merge_patch
from services.secrets.engines.kv.records import KeyRecord
from services.secrets.engines.kv.store import Plan, key_exists, recall
from services.secrets.engines.kv.timestamps import now_ns
from services.secrets.engines.kv.v2_data import require_merge_patch
from services.secrets.engines.kv.versions import key_metadata
from services.secrets.errors import bad_request, not_found
from services.secrets.framework.fields import Duration, desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.engines.kv.backend import KVBackend

MAX_CUSTOM_KEYS = 64
MAX_CUSTOM_KEY_LEN = 128
MAX_CUSTOM_VALUE_LEN = 512
CAS_WARNING = (
    '"cas_required" set to false, but is mandated by backend config. This value will be ignored.'
)
METADATA_CAS_WARNING = (
    '"metadata_cas_required" set to false, but is mandated by backend config. '
    "This value will be ignored."
)


class MetadataFields(msgspec.Struct, kw_only=True):
    # None = not given: only the settings a request names are changed.
    path: str
    max_versions: Annotated[int, desc("versions to keep; 0 = the mount's")] | None = None
    cas_required: Annotated[bool, desc("require options.cas on writes")] | None = None
    delete_version_after: (
        Annotated[Duration, desc("new versions read as deleted after this")] | None
    ) = None
    custom_metadata: (
        Annotated[dict[str, Any], desc("string pairs describing the secret")] | None
    ) = None
    metadata_cas_required: (
        Annotated[bool, desc("require metadata_cas on metadata writes")] | None
    ) = None
    metadata_cas: (
        Annotated[int, desc("write only if the metadata version is this (0: new key)")] | None
    ) = None


def custom_metadata(raw: dict[str, Any], *, drop_nulls: bool = False) -> dict[str, str]:
    """Validated custom metadata: at most 64 keys, keys up to 128 and values up to 512
    printable characters. Scalars are taken as strings (Vault's weak decoding)."""
    out: dict[str, str] = {}
    for k, v in raw.items():
        if v is None and drop_nulls:
            continue
        if isinstance(v, bool):
            v = "1" if v else "0"
        elif isinstance(v, (int, float)):
            v = str(v)
        elif v is None:
            v = ""
        if not isinstance(v, str):
            raise bad_request(
                f"custom_metadata validation failed: the value of {k!r} must be a string"
            )
        out[str(k)] = v
    if len(out) > MAX_CUSTOM_KEYS:
        raise bad_request(
            f"custom_metadata validation failed: payload must contain at most "
            f"{MAX_CUSTOM_KEYS} keys, provided {len(out)}"
        )
    errors = []
    for k, v in out.items():
        if not 0 < len(k) <= MAX_CUSTOM_KEY_LEN:
            errors.append(
                f"length of key {k!r} is {len(k)} but must be 0 < len(key) <= {MAX_CUSTOM_KEY_LEN}"
            )
        if not 0 < len(v) <= MAX_CUSTOM_VALUE_LEN:
            errors.append(
                f"length of value for key {k!r} is {len(v)} but must be "
                f"0 < len(value) <= {MAX_CUSTOM_VALUE_LEN}"
            )
        if not (k.isprintable() and v.isprintable()):
            errors.append(f"key {k!r} or its value contains unprintable characters")
    if errors:
        raise bad_request("custom_metadata validation failed: " + "; ".join(errors))
    return out


def validate(f: MetadataFields) -> None:
    inputs.check_settings(f.max_versions, f.delete_version_after, negative_delete_after=False)


def apply(key: KeyRecord, f: MetadataFields, custom: dict[str, str] | None) -> None:
    if f.max_versions is not None:
        key.max_versions = f.max_versions
    if f.cas_required is not None:
        key.cas_required = f.cas_required
    if f.delete_version_after is not None:
        key.delete_after = f.delete_version_after
    if custom is not None:
        key.custom = custom or None
    if f.metadata_cas_required is not None:
        key.metadata_cas_required = f.metadata_cas_required
    key.metadata_version += 1


def check_metadata_cas(key: KeyRecord | None, f: MetadataFields, mount_requires: bool) -> None:
    """OpenBao's metadata check-and-set: required by the key or the mount, and checked
    whenever given (0 names a key that has no metadata writes yet)."""
    current = key.metadata_version if key is not None else 0
    required = mount_requires or (key is not None and key.metadata_cas_required)
    if f.metadata_cas is None:
        if required:
            raise bad_request("metadata check-and-set parameter required for this call")
        return
    if f.metadata_cas != current:
        raise bad_request("metadata check-and-set parameter does not match the current version")


def given(f: MetadataFields) -> bool:
    return any(
        v is not None
        for v in (
            f.max_versions,
            f.cas_required,
            f.delete_version_after,
            f.custom_metadata,
            f.metadata_cas_required,
        )
    )


def paths(backend: KVBackend) -> list[Path]:
    store = backend.store

    async def exists(req: Request, f: MetadataFields) -> bool:
        return await key_exists(store, req, f.path)

    async def read(_req: Request, f: MetadataFields) -> Response:
        got = await store.get_key(f.path)
        if got is None:
            raise not_found()
        return Response(data=key_metadata(got[0]))

    async def warnings(f: MetadataFields) -> list[str]:
        config = await store.get_config()
        out = []
        if f.cas_required is False and config.cas_required:
            out.append(CAS_WARNING)
        if f.metadata_cas_required is False and config.metadata_cas_required:
            out.append(METADATA_CAS_WARNING)
        return out

    async def put(req: Request, f: MetadataFields) -> Response:
        validate(f)
        custom = None if f.custom_metadata is None else custom_metadata(f.custom_metadata)
        if not given(f):
            return Response()
        mount_requires = (await store.get_config()).metadata_cas_required

        async def change(key: KeyRecord | None) -> Plan:
            check_metadata_cas(key, f, mount_requires)
            if key is None:
                now = now_ns()
                key = KeyRecord(created=now, updated=now)
            apply(key, f, custom)
            return Plan(key)

        await store.mutate(f.path, change, recall(req, f.path))
        return Response(warnings=await warnings(f))

    async def patch(req: Request, f: MetadataFields) -> Response:
        require_merge_patch(req)
        validate(f)
        if f.custom_metadata is not None:
            custom_metadata(f.custom_metadata, drop_nulls=True)  # fail before any write
        mount_requires = (await store.get_config()).metadata_cas_required

        async def change(key: KeyRecord | None) -> Plan:
            if key is None:
                raise not_found()
            check_metadata_cas(key, f, mount_requires)
            custom = None
            if f.custom_metadata is not None:
                custom = custom_metadata(merge_patch(key.custom or {}, f.custom_metadata))
            apply(key, f, custom)
            return Plan(key)

        await store.mutate(f.path, change)
        return Response(warnings=await warnings(f))

    async def delete(req: Request, f: MetadataFields) -> Response:
        await store.delete_key(f.path)
        return Response()

    async def listing(_req: Request, f: MetadataFields) -> Response:
        folder = f.path if f.path.endswith("/") else f.path + "/"
        keys = await store.list_keys(folder)
        if not keys:
            raise not_found()
        return Response(data={"keys": keys})

    async def list_root(_req: Request, _: NoFields) -> Response:
        keys = await store.list_keys("")
        if not keys:
            raise not_found()
        return Response(data={"keys": keys})

    return [
        Path(
            ("metadata", "metadata/"),
            {Op.LIST: Operation(list_root, "List the top keys")},
            synopsis="List the keys at the root of the mount.",
        ),
        Path(
            "metadata/{path*}",
            {
                Op.READ: Operation(read, "Read a key's metadata and versions"),
                **write(put, "Set a key's settings and custom metadata"),
                Op.PATCH: Operation(patch, "Merge-patch a key's settings"),
                Op.DELETE: Operation(delete, "Delete a key and all its versions"),
                Op.LIST: Operation(listing, "List the keys below a folder"),
            },
            MetadataFields,
            exists=exists,
            synopsis="Key metadata: settings, custom metadata and versions.",
        ),
    ]

"""sys/plugins/catalog: list, register, read and remove plugins (register, read and remove
need sudo)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from services.secrets.errors import bad_request, not_found
from services.secrets.framework.fields import desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response
from services.secrets.plugins import catalog as cat

if TYPE_CHECKING:
    from services.secrets.core.core import Core


class TypeOnly(msgspec.Struct, kw_only=True):
    type: str


class RegisterFields(msgspec.Struct, kw_only=True):
    type: str
    name: str
    sha256: Annotated[str, desc("hex SHA-256 sum of the plugin binary")] = ""
    command: Annotated[str, desc("the binary, relative to the plugin directory")] = ""
    args: Annotated[list[str], desc("arguments passed to the binary")] = []
    env: Annotated[list[str], desc("key=value environment entries for the plugin")] = []
    version: str = ""


def _builtin_json(type_: str, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "type": type_,
        "builtin": True,
        "command": "",
        "args": [],
        "sha256": "",
        "version": cat.BUILTIN_VERSION,
        "deprecation_status": "supported",
    }


def paths(core: Core) -> list[Path]:
    def store() -> cat.Catalog:
        return cat.catalog(core)

    async def list_all(req: Request, _: NoFields) -> Response:
        data: dict[str, Any] = {}
        detailed: list[dict[str, Any]] = []
        for type_ in cat.TYPES:
            builtin = cat.builtins(type_)
            external = await store().names(type_)
            data[type_] = sorted(set(builtin) | set(external))
            detailed += [
                {
                    "name": n,
                    "type": type_,
                    "builtin": True,
                    "version": cat.BUILTIN_VERSION,
                    "deprecation_status": "supported",
                }
                for n in builtin
            ]
            for n in external:
                entry = await store().get(type_, n)
                detailed.append(
                    {
                        "name": n,
                        "type": type_,
                        "builtin": False,
                        "version": entry.version if entry else "",
                    }
                )
        data["detailed"] = sorted(detailed, key=lambda d: (d["type"], d["name"]))
        return Response(data=data)

    async def list_type(req: Request, f: TypeOnly) -> Response:
        type_ = cat.check_type(f.type)
        keys = sorted(set(cat.builtins(type_)) | set(await store().names(type_)))
        if not keys:
            raise not_found()
        return Response(data={"keys": keys})

    async def register(req: Request, f: RegisterFields) -> Response:
        type_ = cat.check_type(f.type)
        name = cat.check_name(f.name)
        if name in cat.builtins(type_):
            raise bad_request(f"{name!r} is a builtin {type_} plugin and cannot be replaced")
        if not f.sha256:
            raise bad_request("missing field 'sha256'")
        sha = cat.check_sha256(f.sha256)
        command = await asyncio.to_thread(cat.locate, core.settings.plugin_directory, f.command)
        entry = cat.CatalogEntry(
            name=name,
            type=type_,
            command=command,
            sha256=sha,
            args=list(f.args),
            env=cat.check_env(list(f.env)),
            version=f.version,
        )
        await store().put(entry)
        return Response()

    async def read(req: Request, f: RegisterFields) -> Response:
        type_ = cat.check_type(f.type)
        if f.name in cat.builtins(type_):
            return Response(data=_builtin_json(type_, f.name))
        entry = await store().get(type_, f.name)
        if entry is None:
            raise not_found(f"no {type_} plugin named {f.name!r} in the catalog")
        return Response(
            data={
                "name": entry.name,
                "type": entry.type,
                "builtin": False,
                "command": store().full_command(entry),
                "args": entry.args,
                "env": entry.env,
                "sha256": entry.sha256,
                "version": entry.version,
            }
        )

    async def delete(req: Request, f: RegisterFields) -> Response:
        type_ = cat.check_type(f.type)
        if f.name in cat.builtins(type_):
            raise bad_request(f"{f.name!r} is a builtin plugin and cannot be removed")
        await store().delete(type_, f.name)
        return Response()

    return [
        Path(
            "plugins/catalog",
            {Op.READ: Operation(list_all, "List all plugins")},
            synopsis="List the plugins in the catalog, by type.",
        ),
        Path(
            ("plugins/catalog/{type}", "plugins/catalog/{type}/"),
            {Op.LIST: Operation(list_type, "List plugins of a type")},
            TypeOnly,
            synopsis="List the plugins of one type (auth, database, secret).",
        ),
        Path(
            "plugins/catalog/{type}/{name}",
            {
                Op.READ: Operation(read, "Read a plugin", sudo=True),
                **write(register, "Register or update a plugin", sudo=True),
                Op.DELETE: Operation(delete, "Remove a plugin", sudo=True),
            },
            RegisterFields,
            synopsis="Register, read or remove a plugin; the command is relative to the "
            "plugin directory and its SHA-256 is checked before it runs.",
        ),
    ]

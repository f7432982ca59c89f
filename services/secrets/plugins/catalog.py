"""The plugin catalog: registered external plugins (global, in the root barrier) plus the
builtin engines and auth methods, which are listed with `builtin: true`."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

import msgspec

from services.secrets import registry
from services.secrets.errors import bad_request

if TYPE_CHECKING:
    from services.secrets.core.barrier import BarrierView

TYPES = ("auth", "database", "secret")
PREFIX = "core/plugin-catalog/"
BUILTIN_VERSION = "v0.1.0+builtin"
# Mounted by the core itself, never by name, so not offered in the catalog.
_INTERNAL = {"system", "cubbyhole", "identity"}
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class CatalogEntry(msgspec.Struct, kw_only=True):
    name: str
    type: str
    command: str  # relative to the plugin directory
    sha256: str  # lowercase hex
    args: list[str] = []
    env: list[str] = []
    version: str = ""


def builtins(type_: str) -> list[str]:
    if type_ == "secret":
        names = set(registry.SECRET_ENGINES) - _INTERNAL
    elif type_ == "auth":
        names = set(registry.AUTH_METHODS)
    else:
        names = set()
    return sorted(names)


def check_type(type_: str) -> str:
    if type_ not in TYPES:
        raise bad_request(f"unknown plugin type {type_!r}: use one of {', '.join(TYPES)}")
    return type_


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise bad_request(f"invalid plugin name {name!r}")
    return name


def check_sha256(value: str) -> str:
    if not _SHA256.match(value):
        raise bad_request("sha256 must be the hex-encoded SHA-256 sum of the plugin binary")
    return value.lower()


def check_env(env: list[str]) -> list[str]:
    for item in env:
        key, sep, _ = item.partition("=")
        if not sep or not key:
            raise bad_request(f"env entries must be of the form key=value, got {item!r}")
    return env


def plugin_dir(configured: str) -> str:
    if not configured:
        raise bad_request(
            "no plugin directory is configured: set plugin_directory in the "
            "server config (trellis dev --plugin-directory DIR)"
        )
    return os.path.realpath(configured)


def resolve_command(directory: str, command: str) -> str:
    """The full path of `command` inside the plugin directory. Absolute paths, `..` and
    symlinks leading outside the directory are refused: only what an operator put in the
    directory may run."""
    base = plugin_dir(directory)
    if not command.strip():
        raise bad_request("missing field 'command'")
    if os.path.isabs(command) or "\x00" in command:
        raise bad_request("command must be relative to the plugin directory")
    full = os.path.realpath(os.path.join(base, command))
    if os.path.commonpath([base, full]) != base or full == base:
        raise bad_request("command must name a file inside the plugin directory")
    return full


def check_command_file(full: str) -> None:
    if not os.path.isfile(full):
        raise bad_request(
            f"plugin command not found in the plugin directory: {os.path.basename(full)}"
        )


def locate(directory: str, command: str) -> str:
    """`command` checked (inside the directory, an existing file) and made relative to the
    directory. Touches the filesystem: call it off the event loop."""
    full = resolve_command(directory, command)
    check_command_file(full)
    return os.path.relpath(full, plugin_dir(directory))


class Catalog:
    def __init__(self, view: BarrierView, directory: str) -> None:
        self.view = view
        self.directory = directory

    async def get(self, type_: str, name: str) -> CatalogEntry | None:
        return await self.view.get_obj(f"{type_}/{name}", CatalogEntry)

    async def put(self, entry: CatalogEntry) -> None:
        await self.view.put_obj(f"{entry.type}/{entry.name}", entry)

    async def delete(self, type_: str, name: str) -> None:
        await self.view.delete(f"{type_}/{name}")

    async def names(self, type_: str) -> list[str]:
        return sorted(k for k in await self.view.list(f"{type_}/") if not k.endswith("/"))

    def full_command(self, entry: CatalogEntry) -> str:
        return os.path.join(plugin_dir(self.directory), entry.command)


def catalog(core: object) -> Catalog:
    return Catalog(
        core.barrier.view(PREFIX),  # type: ignore[attr-defined]
        core.settings.plugin_directory,
    )  # type: ignore[attr-defined]

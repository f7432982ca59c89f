"""sys/mounts, sys/auth (enable, disable, read, tune, list) and sys/remount."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from services.secrets.core.mounts import MountConfig, MountEntry
from services.secrets.errors import bad_request
from services.secrets.framework.durations import parse_duration
from services.secrets.framework.fields import desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response
from services.secrets.system import remount_status_paths

if TYPE_CHECKING:
    from services.secrets.core.core import Core


class MountFields(msgspec.Struct, kw_only=True):
    path: str
    type: Annotated[str, desc("backend type, e.g. kv, ssh, pki, userpass")] = ""
    description: str = ""
    config: dict[str, Any] = {}
    options: dict[str, Any] = {}
    local: bool = False
    seal_wrap: bool = False
    external_entropy_access: bool = False
    plugin_name: str = ""
    plugin_version: str = ""


class TuneFields(msgspec.Struct, kw_only=True):
    path: str
    default_lease_ttl: str = ""
    max_lease_ttl: str = ""
    description: str | None = None
    audit_non_hmac_request_keys: list[str] | None = None
    audit_non_hmac_response_keys: list[str] | None = None
    listing_visibility: str | None = None
    passthrough_request_headers: list[str] | None = None
    allowed_response_headers: list[str] | None = None
    allowed_managed_keys: list[str] | None = None
    token_type: str | None = None
    options: dict[str, Any] | None = None
    plugin_version: str | None = None


class PathOnly(msgspec.Struct, kw_only=True):
    path: str


class RemountFields(msgspec.Struct, kw_only=True):
    # hvac sends "from"/"to"; "from" is a Python keyword, hence the renames.
    from_: Annotated[str, desc("current mount path")] = msgspec.field(default="", name="from")
    to: Annotated[str, desc("new mount path")] = ""


def _ttl(value: Any, name: str) -> int:
    if value in (None, "", "system"):
        return 0
    try:
        return parse_duration(value)
    except ValueError:
        raise bad_request(f"invalid {name}: {value!r}") from None


_CORE_TYPES = {"cubbyhole", "system", "identity", "token", "ns_system", "ns_token"}


def entry_json(e: MountEntry) -> dict[str, Any]:
    cfg = {
        "default_lease_ttl": e.config.default_lease_ttl,
        "max_lease_ttl": e.config.max_lease_ttl,
        "force_no_cache": e.config.force_no_cache,
    }
    if e.config.allowed_managed_keys:
        cfg["allowed_managed_keys"] = e.config.allowed_managed_keys
    if e.config.listing_visibility:
        cfg["listing_visibility"] = e.config.listing_visibility
    if e.config.passthrough_request_headers:
        cfg["passthrough_request_headers"] = e.config.passthrough_request_headers
    if e.config.token_type:
        cfg["token_type"] = e.config.token_type
    return {
        "accessor": e.accessor,
        "config": cfg,
        "description": e.description,
        "external_entropy_access": e.external_entropy_access,
        "local": e.local,
        "options": e.options or None,
        "plugin_version": e.plugin_version,
        "running_plugin_version": e.plugin_version or "v0.1.0+builtin",
        "running_sha256": e.running_sha256,
        "seal_wrap": e.seal_wrap,
        "type": e.type,
        "uuid": e.uuid,
        # Vault reports it for plugins of the catalog; the core's own mounts have none.
        **({} if e.type in _CORE_TYPES else {"deprecation_status": "supported"}),
    }


def _config(raw: dict[str, Any]) -> MountConfig:
    return MountConfig(
        default_lease_ttl=_ttl(raw.get("default_lease_ttl"), "default_lease_ttl"),
        max_lease_ttl=_ttl(raw.get("max_lease_ttl"), "max_lease_ttl"),
        force_no_cache=bool(raw.get("force_no_cache", False)),
        listing_visibility=str(raw.get("listing_visibility", "") or ""),
        passthrough_request_headers=list(raw.get("passthrough_request_headers") or []),
        allowed_response_headers=list(raw.get("allowed_response_headers") or []),
        allowed_managed_keys=_str_list(raw.get("allowed_managed_keys")),
        token_type=str(raw.get("token_type", "") or ""),
    )


def _str_list(v: Any) -> list[str]:
    if not v:
        return []
    if isinstance(v, str):
        return [p.strip() for p in v.split(",") if p.strip()]
    return [str(x) for x in v]


def paths(core: Core) -> list[Path]:
    def listing(auth: bool):  # type: ignore[no-untyped-def]
        async def handler(req: Request, _: NoFields) -> Response:
            table = core.table(req.namespace)
            data = {p: entry_json(e) for p, e in sorted(table.entries.items()) if e.is_auth == auth}
            if auth:
                data = {p[len("auth/") :]: v for p, v in data.items()}
            else:
                data = {p: v for p, v in data.items() if not p.startswith("auth/")}
            return Response(data=data, data_at_top=True)

        return handler

    def enable(auth: bool):  # type: ignore[no-untyped-def]
        async def handler(req: Request, f: MountFields) -> Response:
            type_ = f.type or f.plugin_name
            if not type_:
                raise bad_request("the type of the backend is required")
            options = {k: str(v) for k, v in f.options.items()}
            if type_ in ("kv-v2", "kv-v1"):
                options["version"] = type_[-1]
                type_ = "kv"
            # A kv mount without a version is version 1 and keeps no options, as in OpenBao
            # (its CLI and UI read a missing version as 1).
            await core.mount(
                req.namespace,
                f.path,
                type_,
                auth=auth,
                description=f.description,
                config=_config(f.config),
                options=options,
                local=f.local,
                seal_wrap=f.seal_wrap,
                external_entropy_access=f.external_entropy_access,
                plugin_version=f.plugin_version,
            )
            return Response()

        return handler

    def read(auth: bool):  # type: ignore[no-untyped-def]
        async def handler(req: Request, f: PathOnly) -> Response:
            entry = _find(core, req, f.path, auth)
            return Response(data=entry_json(entry))

        return handler

    def disable(auth: bool):  # type: ignore[no-untyped-def]
        async def handler(req: Request, f: PathOnly) -> Response:
            await core.unmount(req.namespace, f.path, auth=auth)
            return Response()

        return handler

    def tune_read(auth: bool):  # type: ignore[no-untyped-def]
        async def handler(req: Request, f: PathOnly) -> Response:
            e = _find(core, req, f.path, auth)
            defaults = core.tokens.ttl_limits(e.config.default_lease_ttl, e.config.max_lease_ttl)
            data: dict[str, Any] = {
                "default_lease_ttl": defaults[0],
                "max_lease_ttl": defaults[1],
                "force_no_cache": e.config.force_no_cache,
                "description": e.description,
            }
            if e.options:  # OpenBao leaves the key out for a mount without options
                data["options"] = e.options
            if auth:
                data["token_type"] = e.config.token_type or "default-service"
            if e.config.allowed_managed_keys:
                data["allowed_managed_keys"] = e.config.allowed_managed_keys
            return Response(data=data, data_at_top=True)

        return handler

    def tune_write(auth: bool):  # type: ignore[no-untyped-def]
        async def handler(req: Request, f: TuneFields) -> Response:
            e = _find(core, req, f.path, auth)
            cfg = e.config
            changes: dict[str, Any] = {}
            if f.default_lease_ttl:
                changes["default_lease_ttl"] = _ttl(f.default_lease_ttl, "default_lease_ttl")
            if f.max_lease_ttl:
                changes["max_lease_ttl"] = _ttl(f.max_lease_ttl, "max_lease_ttl")
            for name in (
                "audit_non_hmac_request_keys",
                "audit_non_hmac_response_keys",
                "passthrough_request_headers",
                "allowed_response_headers",
                "listing_visibility",
                "token_type",
            ):
                v = getattr(f, name)
                if v is not None:
                    changes[name] = v
            if f.allowed_managed_keys is not None:
                changes["allowed_managed_keys"] = _str_list(f.allowed_managed_keys)
            cfg = msgspec.structs.replace(cfg, **changes)
            dflt = cfg.default_lease_ttl
            mx = cfg.max_lease_ttl
            if dflt and mx and dflt > mx:
                raise bad_request("default_lease_ttl cannot be larger than max_lease_ttl")
            options = dict(e.options)
            if f.options:
                if (
                    e.type == "kv"
                    and "version" in f.options
                    and str(f.options["version"]) < options.get("version", "1")
                ):
                    raise bad_request("cannot downgrade a KV mount's version")
                options.update({k: str(v) for k, v in f.options.items()})
            updated = msgspec.structs.replace(
                e,
                config=cfg,
                options=options,
                description=e.description if f.description is None else f.description,
            )
            await core.update_mount(req.namespace, updated)
            backend = core.table(req.namespace).backends.get(updated.path)
            if backend is not None and f.options:
                await backend.initialize()
            return Response()

        return handler

    async def remount(req: Request, f: RemountFields) -> Response:
        if not f.from_ or not f.to:
            raise bad_request("both 'from' and 'to' are required")
        await core.remount(req.namespace, f.from_, f.to)
        # The CLI polls sys/remount/status/<migration_id> after a move (issue 11).
        return await remount_status_paths.record(core, req, f.from_, f.to)

    out: list[Path] = []
    for auth, base in ((False, "mounts"), (True, "auth")):
        out += [
            Path(
                base,
                {Op.READ: Operation(listing(auth), f"List {base}")},
                synopsis=f"List the {'auth methods' if auth else 'secrets engines'}.",
            ),
            Path(
                f"{base}/{{path*}}/tune",
                {
                    Op.READ: Operation(tune_read(auth), "Read tuning"),
                    **write(tune_write(auth), "Tune the mount"),
                },
                TuneFields,
                synopsis="Tune a mount's configuration.",
            ),
            Path(
                f"{base}/{{path*}}",
                {
                    Op.READ: Operation(read(auth), "Read the mount"),
                    **write(enable(auth), "Enable a backend", sudo=auth),
                    Op.DELETE: Operation(disable(auth), "Disable", sudo=auth),
                },
                MountFields,
                synopsis=f"Enable or disable {'an auth method' if auth else 'a secrets engine'}.",
            ),
        ]
    out.append(
        Path(
            "remount",
            write(remount, "Move a mount", sudo=True),
            RemountFields,
            synopsis="Move a mount to a new path.",
        )
    )
    return out


def _find(core: Core, req: Request, path: str, auth: bool) -> MountEntry:
    full = ("auth/" if auth else "") + path.strip("/") + "/"
    entry = core.table(req.namespace).entries.get(full)
    if entry is None:  # 400, as OpenBao answers for a mount that does not exist
        raise bad_request(f"no mount at {full!r}")
    return entry

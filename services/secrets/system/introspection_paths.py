"""sys/capabilities(-self|-accessor), sys/internal/specs/openapi and sys/internal/ui/mounts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from services.secrets.core.namespaces import ROOT
from services.secrets.errors import SecretsError, bad_request, permission_denied
from services.secrets.framework.fields import CommaList, desc
from services.secrets.framework.openapi import document
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import RawResponse, Request, Response

if TYPE_CHECKING:
    from services.secrets.core.core import Core
    from services.secrets.core.mounts import MountEntry


class CapabilitiesFields(msgspec.Struct, kw_only=True):
    token: str = ""
    accessor: str = ""
    path: CommaList = []
    paths: CommaList = []


class UIMountFields(msgspec.Struct, kw_only=True):
    path: Annotated[str, desc("a path inside the mount")] = ""


def _brief(e: MountEntry) -> dict[str, Any]:
    """What an unauthenticated caller learns of a mount listed as `unauth`."""
    return {"type": e.type, "description": e.description, "options": e.options or None}


def paths(core: Core) -> list[Path]:
    async def _caps(
        req: Request, token_id: str | None, accessor: str | None, paths: list[str]
    ) -> Response:
        if accessor:
            entry = await core.tokens.lookup_accessor(accessor, req.namespace.id)
        else:
            entry = await core.tokens.lookup(token_id or "")
        if entry is None:
            raise bad_request("invalid token")
        if not paths:
            raise bad_request("'paths' is required")
        acl = await core.policies.acl(req.namespace, entry.policies)
        data: dict[str, Any] = {}
        for p in paths:
            caps = sorted(acl.capabilities(p)) or ["deny"]
            if "root" in entry.policies:
                caps = ["root"]
            data[p] = caps
        if len(paths) == 1:
            data["capabilities"] = data[paths[0]]
        return Response(data=data, data_at_top=True)

    async def capabilities(req: Request, f: CapabilitiesFields) -> Response:
        return await _caps(req, f.token, None, f.paths or f.path)

    async def capabilities_self(req: Request, f: CapabilitiesFields) -> Response:
        return await _caps(req, req.client_token, None, f.paths or f.path)

    async def capabilities_accessor(req: Request, f: CapabilitiesFields) -> Response:
        return await _caps(req, None, f.accessor, f.paths or f.path)

    async def openapi(req: Request, _: NoFields) -> Response:
        entries = []
        table = core.table(req.namespace)
        for mount_path, backend in sorted(table.backends.items()):
            entries.append((mount_path, backend, backend.paths))
        if not entries:  # sealed: document sys only
            from services.secrets.system.backend import SystemBackend

            sysb = SystemBackend(core, None, core.barrier.view(""))
            entries.append(("sys/", sysb, sysb.paths))
        doc = document(entries, "Trellis secrets service")
        return Response(raw=RawResponse(200, msgspec.json.encode(doc)))

    async def _token_acl(req: Request) -> tuple[Any, str] | None:
        """The caller's ACL and its namespace path, or None without a valid token."""
        entry = req.token
        if entry is None:
            return None
        tns = core.namespaces.by_id.get(entry.namespace_id, ROOT)
        return await core.policies.acl(tns, entry.policies), tns.path

    def _visible(acl_ns: tuple[Any, str] | None, ns_path: str, e: MountEntry) -> bool:
        if e.config.listing_visibility == "unauth":
            return True
        if acl_ns is None:
            return False
        acl, token_ns = acl_ns
        full = ns_path + e.path
        return full.startswith(token_ns) and acl.grants_under(full[len(token_ns) :])

    async def ui_mounts(req: Request, _: NoFields) -> Response:
        """Mounts the caller can use; without a token only those listed as `unauth`."""
        from services.secrets.system.mount_paths import entry_json

        acl_ns = await _token_acl(req)
        if acl_ns is None and req.client_token:
            # As OpenBao: no token lists the `unauth` mounts, a token it does not know is refused.
            raise permission_denied()
        table = core.table(req.namespace)
        secret: dict[str, Any] = {}
        auth: dict[str, Any] = {}
        for p, e in table.entries.items():
            if not _visible(acl_ns, req.namespace.path, e):
                continue
            info = entry_json(e) if acl_ns is not None else _brief(e)
            if e.is_auth:
                auth[p[5:]] = info
            else:
                secret[p] = info
        return Response(data={"secret": secret, "auth": auth})

    async def ui_mount(req: Request, f: UIMountFields) -> Response:
        """The mount holding a path, if the caller may use it: the CLI's KV helper asks this to
        learn a path's mount and KV version."""
        from services.secrets.system.mount_paths import entry_json

        path = f.path.lstrip("/")
        path = path if path.endswith("/") else path + "/"
        denied = SecretsError(
            403,
            "preflight capability check returned 403, please ensure client's policies "
            f"grant access to path {path!r}",
        )
        acl_ns = await _token_acl(req)
        if acl_ns is None:
            raise permission_denied()
        try:
            ns, rel = core.namespaces.resolve(req.namespace.path, path)
        except SecretsError:
            raise denied from None
        entry = core.table(ns).match(rel)
        if entry is None or not _visible(acl_ns, ns.path, entry):
            raise denied  # the same answer for "no mount" and "no access": no mount probing
        data = entry_json(entry)
        data["path"] = ns.path[len(req.namespace.path) :] + entry.path
        return Response(data=data)

    return [
        Path(
            "capabilities",
            write(capabilities, "Capabilities of a token on paths"),
            CapabilitiesFields,
            synopsis="The capabilities a token has on paths.",
        ),
        Path(
            "capabilities-self",
            write(capabilities_self, "Capabilities of the caller"),
            CapabilitiesFields,
            synopsis="The capabilities of the calling token on paths.",
        ),
        Path(
            "capabilities-accessor",
            write(capabilities_accessor, "Capabilities by accessor"),
            CapabilitiesFields,
            synopsis="The capabilities of a token, by accessor.",
        ),
        Path(
            "internal/specs/openapi",
            {Op.READ: Operation(openapi, "OpenAPI document", unauthenticated=True)},
            synopsis="The OpenAPI document of every mounted path.",
        ),
        Path(
            "internal/ui/mounts",
            {Op.READ: Operation(ui_mounts, "Mounts visible to the caller", unauthenticated=True)},
            synopsis="Mounts, for user interfaces.",
        ),
        Path(
            "internal/ui/mounts/{path*}",
            {Op.READ: Operation(ui_mount, "The mount of a path", unauthenticated=True)},
            UIMountFields,
            synopsis="The mount that holds a path, and its options (the KV version).",
        ),
    ]

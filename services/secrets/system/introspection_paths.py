"""sys/capabilities(-self|-accessor), sys/internal/specs/openapi and sys/internal/ui/mounts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.errors import bad_request
from services.secrets.framework.fields import CommaList
from services.secrets.framework.openapi import document
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import RawResponse, Request, Response

if TYPE_CHECKING:
    from services.secrets.core.core import Core


class CapabilitiesFields(msgspec.Struct, kw_only=True):
    token: str = ""
    accessor: str = ""
    path: CommaList = []
    paths: CommaList = []


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

    async def ui_mounts(req: Request, _: NoFields) -> Response:
        from services.secrets.system.mount_paths import entry_json

        table = core.table(req.namespace)
        secret = {p: entry_json(e) for p, e in table.entries.items() if not e.is_auth}
        auth = {p[5:]: entry_json(e) for p, e in table.entries.items() if e.is_auth}
        return Response(data={"secret": secret, "auth": auth})

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
            {Op.READ: Operation(ui_mounts, "Mounts visible to the UI")},
            synopsis="Mounts, for user interfaces.",
        ),
    ]

"""sys/audit, sys/audit/{path} and sys/audit-hash/{path} as OpenBao answers them, whose audit
devices are declared in its configuration only. Trellis has no audit devices (its request log
is structlog with secrets redacted at the source), so the list is empty, enabling one through
the API is refused in OpenBao's words, disabling one that is not there succeeds, and a hash
names a device that does not exist."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from services.secrets.errors import bad_request
from services.secrets.framework.fields import desc
from services.secrets.framework.path import NoFields, Op, Operation, Path, write
from services.secrets.framework.request import Request, Response, no_content

if TYPE_CHECKING:
    from services.secrets.core.core import Core


class DeviceFields(msgspec.Struct, kw_only=True):
    path: Annotated[str, desc("where the device would be mounted, in the URL")] = ""
    type: Annotated[str, desc("the device type (file, socket, syslog)")] = ""
    description: str = ""
    options: dict[str, Any] = {}
    local: bool = False


class HashFields(msgspec.Struct, kw_only=True):
    path: Annotated[str, desc("the audit device, in the URL")] = ""
    input: Annotated[str, desc("the value to hash as the device would")] = ""


def paths(core: Core) -> list[Path]:
    async def list_devices(req: Request, f: NoFields) -> Response:
        return Response(data={})

    async def enable(req: Request, f: DeviceFields) -> Response:
        raise bad_request(
            "cannot enable audit device via API; use declarative, config-based audit device "
            "management instead"
        )

    async def disable(req: Request, f: DeviceFields) -> Response:
        return no_content()  # nothing is enabled, so nothing is left enabled

    async def audit_hash(req: Request, f: HashFields) -> Response:
        raise bad_request(f"unknown audit backend {f.path}")

    return [
        Path(
            "audit",
            {Op.READ: Operation(list_devices, "List the enabled audit devices", sudo=True)},
            synopsis="The enabled audit devices (none: Trellis has no audit devices).",
        ),
        Path(
            "audit/{path*}",
            {
                **write(enable, "Enable an audit device", sudo=True),
                Op.DELETE: Operation(disable, "Disable an audit device", sudo=True),
            },
            DeviceFields,
            synopsis="Enable or disable an audit device.",
        ),
        Path(
            "audit-hash/{path*}",
            write(audit_hash, "Hash a value as an audit device would"),
            HashFields,
            synopsis="Hash a value with an audit device's salt.",
        ),
    ]

"""`ping`: a worker that answers it is up and holds the cluster's crypto key (the request and
its answer are sealed like any op). What the secrets listener's readiness asks through the
secrets service (services/secrets/system/readiness_paths.py)."""

from __future__ import annotations

import msgspec

from services.crypto.ops import operation


class PingArgs(msgspec.Struct, kw_only=True):
    pass


@operation("ping", PingArgs)
def ping(_: PingArgs) -> str:
    return "pong"

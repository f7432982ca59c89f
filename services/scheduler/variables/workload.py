"""What a task's templates read with `nomadVar "<path>"`: Nomad's implicit workload policy
lets a task read its own job's variables (nomad/jobs/<job>, .../<group>, .../<group>/<task>)
and nothing else. The values are unsealed here, in the scheduler, and travel to the node only
inside the reply sealed to the node's one-time key (tasksecrets.py)."""

from __future__ import annotations

import json
from typing import Any

from services.scheduler.state.tables import Tables
from services.scheduler.variables.acl import workload_paths
from services.scheduler.variables.model import vkey
from shared.errors import ServiceError
from shared.sealing import Keys, KeyUnavailable, unseal

# How a template's nomadVar path is told apart from a secrets path in one request.
VAR_PREFIX = "nomadvar:"
DATA_KEY = "scheduler/variables"


def aad(namespace: str, path: str) -> str:
    return f"scheduler/variables\x00{namespace}\x00{path}"


async def read_for_task(
    t: Tables, keys: Keys | None, alloc: dict[str, Any], task: str, wanted: list[str]
) -> dict[str, dict[str, str] | None]:
    """{VAR_PREFIX + path: items, or None when the variable does not exist}."""
    out: dict[str, dict[str, str] | None] = {}
    if not wanted:
        return out
    allowed = set(workload_paths(alloc["JobID"], alloc["TaskGroup"], task))
    key: bytes | None = None
    for ref in wanted:
        path = ref[len(VAR_PREFIX) :].strip("/")
        if path not in allowed:
            raise ServiceError(403, f"nomadVar {path!r}: a task reads only its job's variables")
        rec = t.variables.get(vkey(alloc["Namespace"], path))
        if rec is None or not rec.get("_Sealed"):
            out[ref] = None if rec is None else {}
            continue
        if key is None:
            if keys is None:
                raise ServiceError(503, "the scheduler has no access to the variables key")
            try:
                key = await keys.get(DATA_KEY)
            except KeyUnavailable as exc:
                raise ServiceError(503, f"variables key unavailable: {exc.reason}") from None
        try:
            out[ref] = json.loads(unseal(key, rec["_Sealed"], aad(alloc["Namespace"], path)))
        except ValueError:
            raise ServiceError(500, f"variable {path!r} does not decrypt") from None
    return out

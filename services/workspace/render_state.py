"""State versions and their outputs as JSON:API resources. Output values arrive already
unsealed (or withheld) from the handler: this module never sees a key."""

from __future__ import annotations

from typing import Any

import msgspec

from services.workspace.jsonapi import iso
from services.workspace.model import StateOutput, StateVersion
from services.workspace.render import API, ref

_dec = msgspec.json.Decoder()


def download_path(sv: StateVersion) -> str:
    return f"{API}/state-versions/{sv.id}/download"


def _modules_and_providers(
    resources: list[dict[str, Any]],
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    modules: dict[str, dict[str, int]] = {}
    providers: dict[str, dict[str, int]] = {}
    for r in resources:
        kind = r["type"].replace("_", "-")
        m = modules.setdefault(r["module"], {})
        m[kind] = m.get(kind, 0) + r["count"]
        p = providers.setdefault(r["provider"], {})
        p[kind] = p.get(kind, 0) + r["count"]
    return modules, providers


def state_version(sv: StateVersion, base: str, upload_url: str | None = None) -> dict[str, Any]:
    """`base`: the address clients reach this API at; hosted URLs are absolute, as on HCP
    Terraform (clients PUT to the upload URL as given)."""
    resources = _dec.decode(sv.resources_json)
    modules, providers = _modules_and_providers(resources)
    finalized = sv.status == "finalized"
    created_by = (
        {
            "data": {"id": sv.created_by[1], "type": sv.created_by[0]},
            "links": {"self": f"{API}/{sv.created_by[0]}/{sv.created_by[1]}"},
        }
        if sv.created_by
        else {"data": None}
    )
    return {
        "id": sv.id,
        "type": "state-versions",
        "attributes": {
            "created-at": iso(sv.created_at),
            "size": sv.size,
            "status": sv.status,
            "intermediate": False,
            "hosted-state-download-url": base + download_path(sv) if finalized else None,
            "hosted-json-state-download-url": None,
            "hosted-state-upload-url": upload_url,
            "hosted-json-state-upload-url": None,
            "modules": modules,
            "providers": providers,
            "resources": resources,
            "resources-processed": sv.resources_processed,
            "serial": sv.serial,
            "state-version": sv.state_format,
            "terraform-version": sv.terraform_version,
            "vcs-commit-sha": None,
            "vcs-commit-url": None,
        },
        "relationships": {
            "run": ref("runs", sv.run_id),
            "created-by": created_by,
            "workspace": ref("workspaces", sv.workspace_id),
            "outputs": {
                "data": [{"id": o.id, "type": "state-version-outputs"} for o in sv.outputs]
            },
        },
        "links": {"self": f"{API}/state-versions/{sv.id}"},
    }


_KINDS = {"bool": "boolean", "number": "number", "string": "string"}


def _json_kind(typ: object) -> str:
    """The coarse `type` HCP Terraform shows beside the exact `detailed-type`: the JSON kind
    of the value (a tuple, list or set is an array; a map or object an object)."""
    if isinstance(typ, str):
        return _KINDS.get(typ, "dynamic")
    if isinstance(typ, list) and typ and typ[0] in ("list", "tuple", "set"):
        return "array"
    if isinstance(typ, list) and typ and typ[0] in ("map", "object"):
        return "object"
    return "dynamic"


def output(o: StateOutput, value_json: bytes | None) -> dict[str, Any]:
    """`value_json` None: withheld (a sensitive value the caller may not read)."""
    typ = _dec.decode(o.type_json)
    return {
        "id": o.id,
        "type": "state-version-outputs",
        "attributes": {
            "name": o.name,
            "sensitive": o.sensitive,
            "type": _json_kind(typ),
            "value": None if value_json is None else _dec.decode(value_json),
            "detailed-type": typ,
        },
        "links": {"self": f"{API}/state-version-outputs/{o.id}"},
    }

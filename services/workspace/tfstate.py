"""What the service reads from a Terraform state file: format version, serial, lineage,
the Terraform version, resource counts and outputs. Pure; every problem is a 422 that says what
is wrong with the state (never its contents: states hold secrets)."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any

import msgspec

from services.workspace.jsonapi import ApiError

# What fits the log's integers, and what a lineage (a UUID) can reasonably be.
MAX_SERIAL = 2**63 - 1
MAX_LINEAGE = 256

_dec = msgspec.json.Decoder()
_enc = msgspec.json.Encoder()


@dataclass
class Output:
    name: str
    value_json: bytes
    type_json: bytes
    sensitive: bool


@dataclass
class ParsedState:
    version: int
    serial: int
    lineage: str
    terraform_version: str
    resources: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[Output] = field(default_factory=list)


def _infer_type(value: Any) -> Any:
    """Terraform's type expression for a JSON value (older states carry no type)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return ["tuple", [_infer_type(v) for v in value]]
    if isinstance(value, dict):
        return ["object", {k: _infer_type(v) for k, v in value.items()}]
    return "dynamic"


def parse(raw: bytes) -> ParsedState:
    try:
        doc = _dec.decode(raw)
    except msgspec.DecodeError:
        raise ApiError(422, "the state is not valid JSON") from None
    if not isinstance(doc, dict):
        raise ApiError(422, "the state must be a JSON object")
    version = doc.get("version")
    serial = doc.get("serial")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ApiError(422, "the state has no valid format version")
    if not isinstance(serial, int) or isinstance(serial, bool) or not 0 <= serial <= MAX_SERIAL:
        raise ApiError(422, "the state has no valid serial")
    if version > 1000:
        raise ApiError(422, "the state has no valid format version")
    lineage = doc.get("lineage", "")
    tf_version = doc.get("terraform_version", "")
    if not isinstance(lineage, str) or not isinstance(tf_version, str):
        raise ApiError(422, "the state's lineage and terraform_version must be strings")
    if len(lineage) > MAX_LINEAGE or len(tf_version) > 64:
        raise ApiError(422, "the state's lineage or terraform_version is too long")
    outputs: list[Output] = []
    raw_outputs = doc.get("outputs")
    raw_outputs = {} if raw_outputs is None else raw_outputs
    if not isinstance(raw_outputs, dict):
        raise ApiError(422, "the state's outputs must be an object")
    for name, out in raw_outputs.items():
        if not isinstance(out, dict) or "value" not in out:
            raise ApiError(422, f"output {name!r} of the state has no value")
        typ = out.get("type", _infer_type(out["value"]))
        outputs.append(
            Output(
                name=name,
                value_json=_enc.encode(out["value"]),
                type_json=_enc.encode(typ),
                sensitive=out.get("sensitive") is True,
            )
        )
    resources = doc.get("resources")
    resources = [] if resources is None else resources
    if not isinstance(resources, list):
        raise ApiError(422, "the state's resources must be an array")
    return ParsedState(
        version=version,
        serial=serial,
        lineage=lineage,
        terraform_version=tf_version,
        resources=[r for r in resources if isinstance(r, dict)],
        outputs=outputs,
    )


def check_md5(raw: bytes, md5: str) -> None:
    digest = hashlib.md5(raw, usedforsecurity=False).hexdigest()
    if not hmac.compare_digest(digest.encode(), md5.lower().encode()):
        raise ApiError(422, "md5 does not match the state's MD5 digest", "/data/attributes/md5")


def resource_summary(resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The state version's `resources` attribute: one entry per resource block."""
    out = []
    for r in resources:
        mode = "data." if r.get("mode") == "data" else ""
        instances = r.get("instances")
        out.append(
            {
                "name": str(r.get("name", "")),
                "type": mode + str(r.get("type", "")),
                "count": len(instances) if isinstance(instances, list) else 0,
                "module": str(r.get("module") or "root"),
                "provider": str(r.get("provider", "")),
            }
        )
    return out

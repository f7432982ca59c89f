"""Decode python-hcl2 block bodies into Nomad's JSON shape, following `schema.SCHEMAS`."""

from __future__ import annotations

from typing import Any

from services.scheduler.durations import DurationError, to_nanos
from services.scheduler.jobspec.hclexpr import Evaluator, HclError
from services.scheduler.jobspec.schema import CONSTRAINT_SHORTHANDS, SCHEMAS


def is_block_list(value: Any) -> bool:
    """Blocks come back as lists of dicts marked `__is_block__` (possibly under a label)."""
    if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
        return False
    first = value[0]
    if first.get("__is_block__"):
        return True
    inner = [v for k, v in first.items() if not k.startswith("__")]
    return len(inner) == 1 and isinstance(inner[0], dict) and bool(inner[0].get("__is_block__"))


def blocks(value: Any, ev: Evaluator) -> list[tuple[list[str], dict[str, Any]]]:
    """(labels, body) for each block in an hcl2 block list."""
    out: list[tuple[list[str], dict[str, Any]]] = []
    for item in value:
        labels: list[str] = []
        body = item
        while not body.get("__is_block__"):
            keys = [k for k in body if not k.startswith("__")]
            if len(keys) != 1 or not isinstance(body[keys[0]], dict):
                break
            labels.append(ev.key(keys[0]))
            body = body[keys[0]]
        out.append((labels, body))
    return out


def attrs(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if not (k.startswith("__") and k.endswith("__"))}


def _string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if value is None:
        return ""
    return str(value)


def _smap(value: Any, ev: Evaluator, where: str) -> dict[str, str]:
    if is_block_list(value):
        merged: dict[str, str] = {}
        for _, body in blocks(value, ev):
            merged.update({ev.key(k): _string(ev.value(v)) for k, v in attrs(body).items()})
        return merged
    got = ev.value(value)
    if not isinstance(got, dict):
        raise HclError(
            f"Incorrect attribute value type; Inappropriate value for attribute "
            f'"{where}": map of string required.'
        )
    return {k: _string(v) for k, v in got.items()}


def raw_value(value: Any, ev: Evaluator) -> Any:
    """Task config and other free-form maps: nested blocks become lists of maps."""
    if is_block_list(value):
        out: list[Any] = []
        for labels, body in blocks(value, ev):
            decoded = {ev.key(k): raw_value(v, ev) for k, v in attrs(body).items()}
            for label in reversed(labels):
                decoded = {label: decoded}
            out.append(decoded)
        return out
    return ev.value(value)


def _raw_block(value: Any, ev: Evaluator) -> Any:
    got = raw_value(value, ev)
    if is_block_list(value) and isinstance(got, list) and len(got) == 1:
        return got[0]
    return got


def decode(schema: str, body: dict[str, Any], ev: Evaluator) -> dict[str, Any]:
    spec = SCHEMAS[schema]
    out: dict[str, Any] = {}
    for key, value in attrs(body).items():
        name = ev.key(key)
        if schema == "Constraint" and name in CONSTRAINT_SHORTHANDS:
            _constraint_shorthand(out, name, ev.value(value))
            continue
        field = spec.get(name)
        if field is None:
            if is_block_list(value):
                raise HclError(
                    f'Unsupported block type; Blocks of type "{name}" are not expected here.'
                )
            raise HclError(
                f'Unsupported argument; An argument named "{name}" is not expected here.'
            )
        go, _, kind = field.partition(":")
        out[go] = _decode_field(go, kind, value, ev, name)
    return _post(schema, out)


def _decode_field(go: str, kind: str, value: Any, ev: Evaluator, name: str) -> Any:
    if kind == "":
        if is_block_list(value):
            raise HclError(
                f'Unsupported block type; Blocks of type "{name}" are not expected '
                'here. Did you mean to define argument "' + name + '"?'
            )
        return ev.value(value)
    if kind == "dur":
        got = ev.value(value)
        try:
            return to_nanos(got)
        except DurationError as exc:
            raise HclError(f"Unsuitable duration value; {exc}") from None
    if kind == "smap":
        return _smap(value, ev, name)
    if kind == "raw":
        return _raw_block(value, ev)
    repeated = kind.startswith("[") or kind.startswith("{")
    inner = kind.strip("[]{}")
    sub, _, label_field = inner.partition("@")
    if not is_block_list(value):
        # Attribute syntax for a block (`update = {...}`) is accepted like jobspec2's dynamic
        # blocks: decode the object as a body.
        got = ev.value(value)
        items = got if isinstance(got, list) else [got]
        decoded = [
            decode(sub, {k: _quote(v) for k, v in i.items()}, ev)
            for i in items
            if isinstance(i, dict)
        ]
        return decoded if repeated else (decoded[0] if decoded else None)
    results: list[dict[str, Any]] = []
    for labels, body in blocks(value, ev):
        item = decode(sub, body, ev)
        if label_field:
            if not labels:
                raise HclError(f"Missing name for {name}; All {name} blocks must have 1 labels.")
            item = {label_field: labels[0], **item}
        results.append(item)
    if kind.startswith("{"):
        return {r[label_field]: r for r in results}
    if repeated:
        return results
    if len(results) > 1:
        raise HclError(f"Duplicate {name} block; Only one {name} block is allowed.")
    return results[0]


def _quote(v: Any) -> Any:
    """Re-wrap already-evaluated values so `decode` can evaluate them again harmlessly."""
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("${", "$${") + '"'
    if isinstance(v, list):
        return [_quote(x) for x in v]
    if isinstance(v, dict):
        return {k: _quote(x) for k, x in v.items()}
    return v


def _constraint_shorthand(out: dict[str, Any], name: str, value: Any) -> None:
    out["Operand"] = CONSTRAINT_SHORTHANDS[name]
    if name == "distinct_hosts":
        if value is not True and value != "true":
            out.pop("Operand")
        return
    if name == "distinct_property":
        out["LTarget"] = _string(value)
        return
    out["RTarget"] = _string(value)


def _post(schema: str, out: dict[str, Any]) -> dict[str, Any]:
    if schema in ("Constraint", "Affinity"):
        for k in ("LTarget", "RTarget"):
            out[k] = _string(out.get(k, ""))
        out.setdefault("Operand", "=")
        if not out["Operand"]:
            out["Operand"] = "="
    elif schema == "Network":
        ports = out.pop("Ports", [])
        reserved = [p for p in ports if p.get("Value")]
        dynamic = [p for p in ports if not p.get("Value")]
        for p in ports:
            p.setdefault("Value", 0)
            p.setdefault("To", 0)
            p.setdefault("HostNetwork", "default")
        out["ReservedPorts"] = reserved or None
        out["DynamicPorts"] = dynamic or None
    elif schema == "Periodic":
        if "Spec" in out or "Specs" in out:
            out.setdefault("SpecType", "cron")
        if isinstance(out.get("Specs"), list) and "Spec" not in out and out["Specs"]:
            out["Spec"] = out["Specs"][0]
    return out

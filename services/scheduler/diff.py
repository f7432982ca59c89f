"""Job diffs in Nomad's shape (structs/diff.go): JobDiff -> TaskGroupDiff -> TaskDiff, each with
flattened primitive FieldDiffs and nested ObjectDiffs. `contextual` keeps unchanged fields as
Type "None", as the versions endpoint shows them."""

from __future__ import annotations

from typing import Any

NONE, ADDED, DELETED, EDITED = "None", "Added", "Deleted", "Edited"

JOB_EXCLUDED = {
    "ID",
    "Status",
    "StatusDescription",
    "Version",
    "Stable",
    "CreateIndex",
    "ModifyIndex",
    "JobModifyIndex",
    "Update",
    "SubmitTime",
    "SchedTokenID",
    "SvcToken",
    "MeshToken",
    "TaskGroups",
    "Dispatched",
}
GROUP_EXCLUDED = {"Name", "Tasks"}
TASK_EXCLUDED = {"Name"}
# Lists of structs get one ObjectDiff per element, named in the singular as Nomad does.
SINGULAR = {
    "Constraints": "Constraint",
    "Affinities": "Affinity",
    "Spreads": "Spread",
    "Networks": "Network",
    "Services": "Service",
    "Checks": "Check",
    "Templates": "Template",
    "Artifacts": "Artifact",
    "VolumeMounts": "VolumeMount",
    "ReservedPorts": "Static Port",
    "DynamicPorts": "Dynamic Port",
    "SpreadTarget": "SpreadTarget",
    "Devices": "Device",
}
# Maps of strings flatten into fields named `Meta[key]`.
STRING_MAPS = {"Meta", "Env", "GetterOptions", "GetterHeaders"}


def _prim(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool)


def _s(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _field(name: str, old: Any, new: Any, contextual: bool) -> dict[str, Any] | None:
    o, n = _s(old), _s(new)
    if old is None and new is None:
        return None
    if old is None:
        kind = ADDED
    elif new is None:
        kind = DELETED
    elif o != n:
        kind = EDITED
    else:
        kind = NONE
    if kind == NONE and not contextual:
        return None
    return {
        "Annotations": None,
        "Name": name,
        "New": n if new is not None else "",
        "Old": o if old is not None else "",
        "Type": kind,
    }


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    """Config-style flattening: `args[0]`, `mount[0][source]`."""
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}[{k}]" if prefix else k, v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _flatten(f"{prefix}[{i}]", v, out)
    else:
        out[prefix] = value


def _kind(old: Any, new: Any, parts: list[dict[str, Any]]) -> str:
    if old is None and new is not None:
        return ADDED
    if new is None and old is not None:
        return DELETED
    return EDITED if any(p["Type"] != NONE for p in parts) else NONE


def _fields_and_objects(
    old: dict[str, Any] | None, new: dict[str, Any] | None, contextual: bool, excluded: set[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    o, n = old or {}, new or {}
    # Added/deleted objects list all their fields, whatever `contextual` says.
    ctx = contextual or old is None or new is None
    fields: list[dict[str, Any]] = []
    objects: list[dict[str, Any]] = []
    for key in sorted(set(o) | set(n)):
        if key in excluded:
            continue
        a, b = o.get(key), n.get(key)
        if key in STRING_MAPS:
            for mk in sorted(set(a or {}) | set(b or {})):
                f = _field(f"{key}[{mk}]", (a or {}).get(mk), (b or {}).get(mk), ctx)
                if f:
                    fields.append(f)
        elif key == "Config" or (
            (isinstance(a, dict) or isinstance(b, dict))
            and key in ("Config", "UI", "Multiregion", "Svc", "Consul", "Policy", "Identity")
        ):
            fa: dict[str, Any] = {}
            fb: dict[str, Any] = {}
            _flatten("", a or {}, fa)
            _flatten("", b or {}, fb)
            sub = [
                f for k in sorted(set(fa) | set(fb)) if (f := _field(k, fa.get(k), fb.get(k), ctx))
            ]
            obj = _object(key, a, b, sub, [], contextual)
            if obj:
                objects.append(obj)
        elif isinstance(a, dict) or isinstance(b, dict):
            if key == "Volumes":
                a_list = list((a or {}).values())
                b_list = list((b or {}).values())
                objects += _list_objects("Volume", a_list, b_list, contextual)
                continue
            sf, so = _fields_and_objects(a, b, contextual, set())
            obj = _object(key, a, b, sf, so, contextual)
            if obj:
                objects.append(obj)
        elif isinstance(a, list) or isinstance(b, list):
            items = (a or []) + (b or [])
            if all(_prim(x) for x in items):
                sub = _primitive_set(key, a or [], b or [], ctx)
                obj = _object(key, a, b, sub, [], contextual)
                if obj:
                    objects.append(obj)
            else:
                objects += _list_objects(SINGULAR.get(key, key), a or [], b or [], contextual)
        else:
            f = _field(key, a, b, ctx)
            if f:
                fields.append(f)
    return fields, sorted(objects, key=lambda d: d["Name"])


def _primitive_set(name: str, a: list[Any], b: list[Any], contextual: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    sa, sb = [_s(x) for x in a], [_s(x) for x in b]
    for v in sorted(set(sa) | set(sb)):
        f = _field(name, v if v in sa else None, v if v in sb else None, contextual)
        if f:
            out.append(f)
    return out


def _object(
    name: str,
    old: Any,
    new: Any,
    fields: list[dict[str, Any]],
    objects: list[dict[str, Any]],
    contextual: bool,
) -> dict[str, Any] | None:
    if old is None and new is None:
        return None
    kind = _kind(old, new, fields + objects)
    if kind == NONE and not contextual:
        return None
    return {"Fields": fields or None, "Name": name, "Objects": objects or None, "Type": kind}


def _key_of(item: Any) -> Any:
    if isinstance(item, dict):
        for k in ("Name", "Label"):
            if item.get(k):
                return (k, item[k])
    return None


def _list_objects(name: str, a: list[Any], b: list[Any], contextual: bool) -> list[dict[str, Any]]:
    """Elements matched by Name/Label when they have one, else by equality (a set diff)."""
    out: list[dict[str, Any]] = []
    rest_b = list(b)
    for item in a:
        key = _key_of(item)
        match = None
        for cand in rest_b:
            if (key is not None and _key_of(cand) == key) or (key is None and cand == item):
                match = cand
                break
        if match is not None:
            rest_b.remove(match)
        pair = (item, match)
        out += _pair(name, *pair, contextual)
    for item in rest_b:
        out += _pair(name, None, item, contextual)
    return out


def _pair(name: str, a: Any, b: Any, contextual: bool) -> list[dict[str, Any]]:
    if not (isinstance(a, dict) or isinstance(b, dict)):
        return []
    sf, so = _fields_and_objects(a, b, contextual, set())
    obj = _object(name, a, b, sf, so, contextual)
    return [obj] if obj else []


def task_diff(
    old: dict[str, Any] | None, new: dict[str, Any] | None, contextual: bool
) -> dict[str, Any] | None:
    fields, objects = _fields_and_objects(old, new, contextual, TASK_EXCLUDED)
    kind = _kind(old, new, fields + objects)
    if kind == NONE and not contextual:
        return None
    name = (new or old or {}).get("Name", "")
    return {
        "Annotations": None,
        "Fields": fields or None,
        "Name": name,
        "Objects": objects or None,
        "Type": kind,
    }


def group_diff(
    old: dict[str, Any] | None, new: dict[str, Any] | None, contextual: bool
) -> dict[str, Any] | None:
    fields, objects = _fields_and_objects(old, new, contextual, GROUP_EXCLUDED)
    ot = {t["Name"]: t for t in (old or {}).get("Tasks") or []}
    nt = {t["Name"]: t for t in (new or {}).get("Tasks") or []}
    tasks = [
        d
        for name in sorted(set(ot) | set(nt))
        if (d := task_diff(ot.get(name), nt.get(name), contextual or old is None or new is None))
    ]
    kind = _kind(old, new, fields + objects + tasks)
    if kind == NONE and not contextual:
        return None
    return {
        "Fields": fields or None,
        "Name": (new or old or {}).get("Name", ""),
        "Objects": objects or None,
        "Tasks": tasks or None,
        "Type": kind,
        "Updates": None,
    }


def job_diff(
    old: dict[str, Any] | None, new: dict[str, Any] | None, *, contextual: bool = False
) -> dict[str, Any]:
    """Nomad's `old.Diff(new, contextual)`."""
    fields, objects = _fields_and_objects(old, new, contextual, JOB_EXCLUDED)
    og = {g["Name"]: g for g in (old or {}).get("TaskGroups") or []}
    ng = {g["Name"]: g for g in (new or {}).get("TaskGroups") or []}
    groups = [
        d
        for name in sorted(set(og) | set(ng))
        if (d := group_diff(og.get(name), ng.get(name), contextual))
    ]
    kind = _kind(old, new, fields + objects + groups)
    return {
        "Fields": fields or None,
        "ID": (new or old or {}).get("ID", ""),
        "Objects": objects or None,
        "TaskGroups": groups or None,
        "Type": kind,
    }

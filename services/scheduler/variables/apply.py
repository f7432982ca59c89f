"""Deterministic apply of variable writes (log entries `var.apply`): check-and-set and lock
rules decided against the entry's time, so every replica agrees. Values arrive and stay
sealed (`_Sealed`); apply never sees them in the clear.

A refused write is not an error: it returns `{"conflict": <record>}` (Nomad answers 409 with
the variable that won), or `{"error": ...}` for a lock operation that cannot apply."""

from __future__ import annotations

from typing import Any

from services.scheduler.state.tables import Tables
from services.scheduler.variables.model import lock_delayed, lock_held, vkey
from shared.replog import ApplyError, LogEntry

TABLE = "variables"


def apply_variable(t: Tables, index: int, entry: LogEntry, p: dict[str, Any]) -> dict[str, Any]:
    now = int(entry.time * 1e9)
    ns, path, op = p["namespace"], p["path"], p["op"]
    if ns != "default" and ns not in t.namespaces:
        raise ApplyError(400, f'namespace "{ns}" does not exist')
    key = vkey(ns, path)
    rec = t.variables.get(key)
    cas = p.get("cas")
    if cas is not None and (rec["ModifyIndex"] if rec else 0) != cas:
        return {"conflict": rec} if rec else {"conflict_missing": True}
    held = lock_held(rec, now)
    holder = held and p.get("lock_id", "") == rec["_Lock"]["ID"]  # type: ignore[index]
    if op == "delete":
        if rec is None:
            return {"index": index}
        if held and not holder:
            return {"conflict": rec}
        del t.variables[key]
        t.index[TABLE] = index
        return {"index": index}
    if op in ("lock-renew", "lock-release"):
        if rec is None or not rec.get("_Lock") or p.get("lock_id", "") != rec["_Lock"]["ID"]:
            return {"conflict": rec} if rec else {"error": "variable not found"}
        if op == "lock-renew" and not held:
            return {"conflict": rec}
        new = dict(rec)
        if op == "lock-renew":
            new["_Lock"] = {**rec["_Lock"], "Expires": now + rec["_Lock"]["TTL"]}
        else:
            new["_Lock"] = None
        new["ModifyIndex"] = index
        t.variables[key] = new
        t.index[TABLE] = index
        return {"record": new}
    if op == "lock-acquire":
        if held or lock_delayed(rec, now):
            return {"conflict": rec}
    elif held and not holder:
        return {"conflict": rec}
    new = {
        "Namespace": ns,
        "Path": path,
        "CreateIndex": rec["CreateIndex"] if rec else index,
        "CreateTime": rec["CreateTime"] if rec else now,
        "ModifyIndex": index,
        "ModifyTime": now,
        "_Sealed": p["sealed"] if p.get("sealed") is not None else (rec or {}).get("_Sealed"),
        "_Lock": (rec or {}).get("_Lock") if held else None,
    }
    if op == "lock-acquire":
        new["_Lock"] = {
            "ID": p["new_lock_id"],
            "TTL": p["ttl"],
            "LockDelay": p["lock_delay"],
            "Expires": now + p["ttl"],
        }
    t.variables[key] = new
    t.index[TABLE] = index
    return {"record": new}


def apply_namespace(t: Tables, index: int, entry: LogEntry, p: dict[str, Any]) -> dict[str, Any]:
    if p["op"] == "delete":
        for name in p["names"]:
            if name == "default":
                raise ApplyError(400, "default namespace can not be deleted")
            if name not in t.namespaces:
                continue
            if any(j.get("Namespace") == name and not j.get("Stop") for j in t.jobs.values()):
                raise ApplyError(
                    400, f'namespace "{name}" has non-terminal jobs in regions: [global]'
                )
            if any(v["Namespace"] == name for v in t.variables.values()):
                raise ApplyError(400, f'namespace "{name}" has variables in regions: [global]')
            del t.namespaces[name]
        t.index["namespaces"] = index
        return {"index": index}
    for ns in p["namespaces"]:
        old = t.namespaces.get(ns["Name"])
        t.namespaces[ns["Name"]] = {
            **ns,
            "CreateIndex": old["CreateIndex"] if old else index,
            "ModifyIndex": index,
        }
    t.index["namespaces"] = index
    return {"index": index}

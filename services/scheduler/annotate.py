"""Plan annotations (Nomad's scheduler/annotate.go): what each task change forces, what a count
change forces, and the per-group update counts. Pure."""

from __future__ import annotations

from typing import Any

FORCES_CREATE = "forces create"
FORCES_DESTROY = "forces destroy"
FORCES_INPLACE = "forces in-place update"
FORCES_DESTRUCTIVE = "forces create/destroy update"

COUNTS = (
    "Ignore",
    "Place",
    "Migrate",
    "Stop",
    "InPlaceUpdate",
    "DestructiveUpdate",
    "Canary",
    "Preemptions",
)
UPDATE_KEYS = {
    "Ignore": "ignore",
    "Place": "create",
    "Stop": "destroy",
    "Migrate": "migrate",
    "Canary": "canary",
    "InPlaceUpdate": "in-place update",
    "DestructiveUpdate": "create/destroy update",
}


def _task_annotation(task: dict[str, Any]) -> str | None:
    kind = task.get("Type")
    if kind == "Added":
        return FORCES_CREATE
    if kind == "Deleted":
        return FORCES_DESTROY
    if kind != "Edited":
        return None
    # Any change but the kill timeout replaces the allocation (Nomad's tasksUpdated).
    names = {f["Name"] for f in task.get("Fields") or [] if f.get("Type") != "None"}
    names |= {o["Name"] for o in task.get("Objects") or [] if o.get("Type") != "None"}
    return FORCES_INPLACE if names <= {"KillTimeout"} else FORCES_DESTRUCTIVE


def annotate(diff: dict[str, Any], desired: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Annotate `diff` (a job_diff) in place with the group updates `desired` counts."""
    for group in diff.get("TaskGroups") or []:
        counts = desired.get(group["Name"]) or {}
        updates = {UPDATE_KEYS[k]: v for k, v in counts.items() if v and k in UPDATE_KEYS}
        group["Updates"] = updates or None
        for f in group.get("Fields") or []:
            if f["Name"] == "Count" and f.get("Type") == "Edited":
                old, new = int(f.get("Old") or 0), int(f.get("New") or 0)
                f["Annotations"] = [FORCES_CREATE if new > old else FORCES_DESTROY]
        for task in group.get("Tasks") or []:
            note = _task_annotation(task)
            task["Annotations"] = [note] if note else None
    return diff


def desired_updates(
    plan_place: list[dict[str, Any]],
    plan_stop: list[dict[str, Any]],
    plan_update: list[dict[str, Any]],
    live: list[dict[str, Any]],
    groups: list[str],
) -> dict[str, dict[str, int]]:
    """Nomad's DesiredTGUpdates from a computed plan: replaced allocations count as destructive
    updates, migrations as Migrate, fresh placements as Place, the rest of the live ones as
    Ignore."""
    by_id = {a["ID"]: a for a in live}
    out = {g: dict.fromkeys(COUNTS, 0) for g in groups}
    replaced = {a.get("PreviousAllocation") for a in plan_place if a.get("PreviousAllocation")}
    touched: set[str] = set()
    for a in plan_place:
        g = out.setdefault(a["TaskGroup"], dict.fromkeys(COUNTS, 0))
        prev = by_id.get(a.get("PreviousAllocation") or "")
        if (a.get("DeploymentStatus") or {}).get("Canary"):
            g["Canary"] += 1
        elif prev is not None and (prev.get("DesiredTransition") or {}).get("Migrate"):
            g["Migrate"] += 1
        elif prev is not None:
            g["DestructiveUpdate"] += 1
        else:
            g["Place"] += 1
    for st in plan_stop:
        touched.add(st["ID"])
        a = by_id.get(st["ID"])
        if a is not None and st["ID"] not in replaced and a["TaskGroup"] in out:
            out[a["TaskGroup"]]["Stop"] += 1
    for up in plan_update:
        a = by_id.get(up["ID"])
        if a is not None and "JobVersion" in up and a["TaskGroup"] in out:
            touched.add(up["ID"])
            out[a["TaskGroup"]]["InPlaceUpdate"] += 1
    for a in live:
        if a["ID"] not in touched and a["TaskGroup"] in out:
            out[a["TaskGroup"]]["Ignore"] += 1
    return out

"""Job diffs in Nomad's shape."""

from __future__ import annotations

from typing import Any

from services.scheduler.admit import admit
from services.scheduler.diff import job_diff


def _job(**over: Any) -> dict[str, Any]:
    tg = {
        "Name": "g",
        "Count": over.pop("count", 1),
        "Tasks": [
            {
                "Name": "t",
                "Driver": "mock",
                "Config": {"run_for": over.pop("run", "1s")},
                "Env": over.pop("env", None),
            }
        ],
    }
    return admit({"ID": "x", "Datacenters": over.pop("dcs", ["dc1"]), "TaskGroups": [tg], **over})


def test_no_change_is_none() -> None:
    d = job_diff(_job(), _job())
    assert d == {"Fields": None, "ID": "x", "Objects": None, "TaskGroups": None, "Type": "None"}


def test_edited_fields_objects_and_groups() -> None:
    d = job_diff(_job(), _job(Priority=70, dcs=["dc1", "dc2"], count=3, run="2s", Meta={"a": "b"}))
    assert d["Type"] == "Edited"
    fields = {f["Name"]: f for f in d["Fields"]}
    assert fields["Priority"] == {
        "Annotations": None,
        "Name": "Priority",
        "New": "70",
        "Old": "50",
        "Type": "Edited",
    }
    assert fields["Meta[a]"]["Type"] == "Added" and fields["Meta[a]"]["Old"] == ""
    dcs = next(o for o in d["Objects"] if o["Name"] == "Datacenters")
    assert dcs["Type"] == "Edited"
    assert dcs["Fields"] == [
        {"Annotations": None, "Name": "Datacenters", "New": "dc2", "Old": "", "Type": "Added"}
    ]
    tg = d["TaskGroups"][0]
    assert tg["Type"] == "Edited" and tg["Updates"] is None
    assert {"Annotations": None, "Name": "Count", "New": "3", "Old": "1", "Type": "Edited"} in tg[
        "Fields"
    ]
    task = tg["Tasks"][0]
    assert task["Name"] == "t" and task["Type"] == "Edited"
    config = next(o for o in task["Objects"] if o["Name"] == "Config")
    assert config["Fields"][0] == {
        "Annotations": None,
        "Name": "run_for",
        "New": "2s",
        "Old": "1s",
        "Type": "Edited",
    }


def test_contextual_lists_unchanged_fields_as_none() -> None:
    d = job_diff(_job(), _job(Priority=70), contextual=True)
    names = {f["Name"]: f["Type"] for f in d["Fields"]}
    assert names["Priority"] == "Edited" and names["Type"] == "None"
    assert d["TaskGroups"][0]["Type"] == "None"


def test_added_group_and_task_env() -> None:
    a = _job()
    b = _job(env={"K": "v"})
    b["TaskGroups"].append({**b["TaskGroups"][0], "Name": "h"})
    d = job_diff(a, b)
    groups = {g["Name"]: g for g in d["TaskGroups"]}
    assert groups["h"]["Type"] == "Added"
    env = {f["Name"]: f for f in groups["g"]["Tasks"][0]["Fields"]}
    assert env["Env[K]"]["Type"] == "Added" and env["Env[K]"]["New"] == "v"

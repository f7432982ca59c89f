"""A job whose resources are not integers is refused at registration (found by the byte-level
fuzzer: `"CPU": "x"` was admitted and then failed every evaluation in placement)."""

from __future__ import annotations

from typing import Any

import pytest

from services.scheduler.admit import ValidationError, admit


def _job(resources: Any = None, disk: Any = None) -> dict[str, Any]:
    task: dict[str, Any] = {"Name": "t", "Driver": "mock"}
    if resources is not None:
        task["Resources"] = resources
    group: dict[str, Any] = {"Name": "g", "Count": 1, "Tasks": [task]}
    if disk is not None:
        group["EphemeralDisk"] = disk
    return {"ID": "j", "Type": "batch", "Region": "global", "Datacenters": ["dc1"],
            "TaskGroups": [group]}  # fmt: skip


@pytest.mark.parametrize(
    ("resources", "disk", "words"),
    [
        ({"CPU": "x"}, None, "Resources.CPU must be an integer"),
        ({"MemoryMB": 1.5}, None, "Resources.MemoryMB must be an integer"),
        ({"Cores": True}, None, "Resources.Cores must be an integer"),
        ({"DiskMB": [1]}, None, "Resources.DiskMB must be an integer"),
        (None, {"SizeMB": "big"}, "EphemeralDisk.SizeMB must be an integer"),
    ],
)
def test_non_integer_resources_are_refused(resources: Any, disk: Any, words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        admit(_job(resources, disk))


def test_integer_resources_are_admitted() -> None:
    job = admit(_job({"CPU": 200, "MemoryMB": 64}, {"SizeMB": 100}))
    assert job["TaskGroups"][0]["Tasks"][0]["Resources"]["CPU"] == 200

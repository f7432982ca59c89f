"""Server-side admission: defaults, validation messages, spec change detection."""

from __future__ import annotations

from typing import Any

import pytest

from services.scheduler.admit import ValidationError, admit, multierror, spec_changed


def job(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "ID": "web",
        "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "mock", "Config": {}}]}],
    }
    base.update(over)
    return base


def test_server_defaults() -> None:
    j = admit(job())
    assert j["Datacenters"] == ["*"] and j["NodePool"] == "default" and j["Priority"] == 50
    # The job-level update block keeps only Stagger and MaxParallel.
    assert j["Update"]["MaxParallel"] == 1 and j["Update"]["HealthCheck"] == ""
    assert j["TaskGroups"][0]["Update"]["HealthCheck"] == "checks"


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"ID": ""}, "Missing job ID"),
        ({"ID": "a b"}, "Job ID contains a space"),
        ({"Type": "cron"}, 'Invalid job type: "cron"'),
        ({"Priority": 101}, "Job priority must be between [1, 100]"),
        ({"Priority": -1}, "Job priority must be between [1, 100]"),
        ({"TaskGroups": []}, "Missing job task groups"),
    ],
)
def test_validation_messages(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        admit(job(**over))
    assert message in err.value.errors
    assert "occurred:\n\t* " in str(err.value)


def test_multierror_format() -> None:
    assert multierror(["a"]) == "1 error occurred:\n\t* a\n\n"
    assert multierror(["a", "b"]) == "2 errors occurred:\n\t* a\n\t* b\n\n"


def test_group_errors_nest() -> None:
    bad = job(TaskGroups=[{"Name": "g", "Count": -1, "Tasks": []}])
    with pytest.raises(ValidationError) as err:
        admit(bad)
    text = str(err.value)
    assert "Task group g validation failed" in text
    assert "Task group count can't be negative" in text
    assert "Missing tasks for task group" in text


def test_auto_promote_needs_canaries() -> None:
    bad = job(Update={"AutoPromote": True, "MaxParallel": 1})
    with pytest.raises(ValidationError, match="Auto Promote requires a Canary count"):
        admit(bad)


def test_spec_changed_ignores_bookkeeping() -> None:
    a = admit(job())
    b = {**a, "Version": 3, "Stable": True, "ModifyIndex": 9, "SubmitTime": 1}
    assert not spec_changed(a, b)
    assert spec_changed(a, admit(job(Priority=70)))


@pytest.mark.parametrize("name", ["..", ".", "a\\b", "a\x00b"])
def test_a_task_name_must_be_a_directory_of_its_own(name: str) -> None:
    """The client names the task's directory after the task: '..' would be every allocation's."""
    tasks = [{"Name": name, "Driver": "mock", "Config": {}}]
    with pytest.raises(ValidationError) as err:
        admit(job(TaskGroups=[{"Name": "g", "Tasks": tasks}]))
    assert f"Task name '{name}' is not a valid directory name" in str(err.value)

"""HCL2 job parsing, variables and Canonicalize defaults."""

from __future__ import annotations

import pytest

from services.scheduler.jobspec.canonicalize import canonicalize
from services.scheduler.jobspec.parse import JobParseError, parse_job

JOB = """
variable "greeting" {
  type = string
}
variable "replicas" {
  type    = number
  default = 2
}
locals {
  cmd = "/bin/${var.greeting}"
}
job "example" {
  datacenters = ["dc1", "dc*"]
  meta {
    owner = "bob"
  }
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }
  constraint {
    distinct_hosts = true
  }
  group "cache" {
    count = var.replicas
    network {
      port "db" { to = 6379 }
      port "http" { static = 8080 }
    }
    restart {
      attempts = 3
      delay    = "10s"
    }
    task "redis" {
      driver = "raw_exec"
      config {
        command = local.cmd
        args    = ["${NOMAD_ALLOC_ID}", upper("x")]
      }
      env {
        PORT = 6379
      }
      resources {
        cpu    = 200
        memory = 64
      }
      kill_timeout = "20s"
    }
  }
}
"""


def test_variables_locals_and_mapping() -> None:
    parsed = parse_job(JOB, 'greeting = "sleep"\n')
    job = parsed.job
    assert job["ID"] == job["Name"] == "example"
    assert job["Datacenters"] == ["dc1", "dc*"]
    assert job["Meta"] == {"owner": "bob"}
    assert job["Constraints"] == [
        {"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="},
        {"LTarget": "", "RTarget": "", "Operand": "distinct_hosts"},
    ]
    tg = job["TaskGroups"][0]
    assert tg["Name"] == "cache" and tg["Count"] == 2
    assert tg["RestartPolicy"] == {"Attempts": 3, "Delay": 10_000_000_000}
    net = tg["Networks"][0]
    assert net["ReservedPorts"][0]["Label"] == "http" and net["ReservedPorts"][0]["Value"] == 8080
    assert net["DynamicPorts"][0] == {
        "Label": "db",
        "To": 6379,
        "Value": 0,
        "HostNetwork": "default",
    }
    task = tg["Tasks"][0]
    # Runtime interpolations stay for the client; var/local/functions are evaluated.
    assert task["Config"] == {"command": "/bin/sleep", "args": ["${NOMAD_ALLOC_ID}", "X"]}
    assert task["Env"] == {"PORT": "6379"}
    assert task["Resources"] == {"CPU": 200, "MemoryMB": 64}
    assert task["KillTimeout"] == 20_000_000_000
    # Unset api.Job pointers are null before Canonicalize.
    assert job["Priority"] is None and job["Type"] is None and job["Region"] is None


def test_variable_flags_override_var_file_and_convert_types() -> None:
    parsed = parse_job(JOB, 'greeting = "sleep"', {"greeting": "true", "replicas": "5"})
    assert parsed.job["TaskGroups"][0]["Count"] == 5
    assert parsed.job["TaskGroups"][0]["Tasks"][0]["Config"]["command"] == "/bin/true"


def test_undeclared_var_file_value_is_a_warning() -> None:
    parsed = parse_job(JOB, 'greeting = "sleep"\nunknown = 1\n')
    assert len(parsed.warnings) == 1 and '"unknown"' in parsed.warnings[0]
    with pytest.raises(JobParseError, match="Undefined variable"):
        parse_job(JOB, 'greeting = "sleep"\nunknown = 1\n', strict=True)


def test_unset_variable() -> None:
    with pytest.raises(JobParseError) as err:
        parse_job(JOB)
    assert 'Unset variable "greeting"; A used variable must be set or have a default value' in str(
        err.value
    )


def test_undeclared_variable_reference() -> None:
    src = 'job "x" {\n group "g" {\n task "t" {\n driver = var.nope\n }\n }\n}\n'
    with pytest.raises(JobParseError, match="Reference to undeclared input variable"):
        parse_job(src)


@pytest.mark.parametrize("src", ['job "x" {', 'job "x" { foo = }', "nothing = 1"])
def test_syntax_errors(src: str) -> None:
    with pytest.raises(JobParseError):
        parse_job(src)


def test_unknown_argument() -> None:
    with pytest.raises(JobParseError, match='An argument named "bogus" is not expected here'):
        parse_job('job "x" {\n bogus = 1\n}\n')


def test_variable_validation() -> None:
    src = (
        'variable "n" {\n type = number\n default = 0\n validation {\n'
        ' condition = var.n > 0\n error_message = "n must be positive."\n }\n}\n'
        'job "x" {\n group "g" {\n count = var.n\n task "t" {\n driver = "mock"\n }\n }\n}\n'
    )
    with pytest.raises(JobParseError, match="n must be positive"):
        parse_job(src)
    assert parse_job(src, "n = 3").job["TaskGroups"][0]["Count"] == 3


def test_canonicalize_defaults_service() -> None:
    job = canonicalize(parse_job(JOB, 'greeting = "sleep"').job)
    assert job["Namespace"] == "default" and job["Region"] == "global"
    assert job["Priority"] == 50 and job["Type"] == "service" and job["NodePool"] == ""
    assert job["Datacenters"] == ["dc1", "dc*"]
    assert job["Update"] == {
        "Stagger": 30_000_000_000,
        "MaxParallel": 1,
        "HealthCheck": "checks",
        "MinHealthyTime": 10_000_000_000,
        "HealthyDeadline": 300_000_000_000,
        "ProgressDeadline": 600_000_000_000,
        "AutoRevert": False,
        "AutoPromote": False,
        "Canary": 0,
    }
    tg = job["TaskGroups"][0]
    assert tg["EphemeralDisk"] == {"Sticky": False, "Migrate": False, "SizeMB": 300}
    assert tg["ReschedulePolicy"] == {
        "Attempts": 0,
        "Interval": 0,
        "Delay": 30_000_000_000,
        "DelayFunction": "exponential",
        "MaxDelay": 3_600_000_000_000,
        "Unlimited": True,
    }
    assert tg["RestartPolicy"] == {
        "Attempts": 3,
        "Delay": 10_000_000_000,
        "Interval": 1_800_000_000_000,
        "Mode": "fail",
        "RenderTemplates": False,
    }
    assert tg["Migrate"]["MaxParallel"] == 1
    task = tg["Tasks"][0]
    assert task["LogConfig"] == {"MaxFiles": 10, "MaxFileSizeMB": 10, "Disabled": False}
    assert task["RestartPolicy"] == tg["RestartPolicy"]


def test_canonicalize_batch_and_no_datacenters() -> None:
    src = 'job "b" {\n type = "batch"\n group "g" {\n task "t" {\n driver = "mock"\n }\n }\n}\n'
    job = canonicalize(parse_job(src).job)
    assert job["Datacenters"] is None  # the server, not the api package, fills ["*"]
    assert job["Update"] is None
    tg = job["TaskGroups"][0]
    assert tg["Count"] == 1
    assert tg["ReschedulePolicy"]["Attempts"] == 1
    assert tg["ReschedulePolicy"]["DelayFunction"] == "constant"
    assert tg["RestartPolicy"]["Interval"] == 86_400_000_000_000
    assert "Migrate" not in tg or tg["Migrate"] is None
    assert tg["Tasks"][0]["Resources"] == {"CPU": 100, "Cores": 0, "MemoryMB": 300}


def test_parser_runtime_errors_become_parse_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """python-hcl2 reports some semantic errors (a repeated attribute) as RuntimeError."""
    import services.scheduler.jobspec.parse as parse_mod

    def boom(text: str) -> dict[str, object]:
        raise RuntimeError("Attribute x is already defined.")

    monkeypatch.setattr(parse_mod.hcl2, "loads", boom)
    with pytest.raises(parse_mod.JobParseError, match="already defined"):
        parse_mod.parse_job('job "x" {}')

"""A task's environment, built from nothing (pure): the job's `env` block, Nomad's NOMAD_*
variables and a plain PATH/HOME/TMPDIR. The client agent's own environment (its NATS URL and
credentials, any token it was started with) never reaches a task."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

# What a login shell on a Debian host gets; tasks that need more set PATH in their `env` block.
PLAIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Nomad cleans keys with these prefixes (meta keys and port labels come from users).
_CLEANED_PREFIXES = ("NOMAD_ADDR_", "NOMAD_IP_", "NOMAD_PORT_", "NOMAD_HOST_PORT_", "NOMAD_META_")

_VAR = re.compile(r"\$\{([^}]+)\}")
_UNCLEAN = re.compile(r"[^A-Za-z0-9_.]")


@dataclass(frozen=True)
class TaskDirs:
    """Where a task's directories are on the host (raw_exec has no chroot: host paths)."""

    alloc_dir: str  # <data_dir>/alloc/<alloc id>
    task: str  # <alloc_dir>/<task name>: the task's working directory

    @property
    def shared(self) -> str:
        return os.path.join(self.alloc_dir, "alloc")

    @property
    def local(self) -> str:
        return os.path.join(self.task, "local")

    @property
    def secrets(self) -> str:
        return os.path.join(self.task, "secrets")

    @property
    def tmp(self) -> str:
        return os.path.join(self.task, "tmp")


@dataclass(frozen=True)
class JobInfo:
    """What the client knows of the allocation's job (the scheduler sends it with the group)."""

    id: str
    name: str = ""
    parent_id: str = ""
    region: str = "global"
    meta: dict[str, str] | None = None
    payload: bytes = b""  # a dispatched job's payload, for each task's dispatch_payload file


def clean_env_key(key: str) -> str:
    """Nomad's CleanEnvVar: anything but letters, `_`, `.` (and digits after the first
    character) becomes `_`."""
    out = _UNCLEAN.sub("_", key)
    return "_" + out[1:] if out[:1].isdigit() else out


def interpolate(value: Any, env: dict[str, str], node: dict[str, Any]) -> Any:
    """Runtime interpolation the job parser left for the client: NOMAD_*, env, node, attr,
    meta. Unknown references stay as they are, as Nomad leaves them."""
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            key = m.group(1).strip()
            if key in env:
                return env[key]
            if key.startswith("env."):
                return env.get(key[4:], "")
            if key == "node.unique.id":
                return str(node.get("ID", ""))
            if key == "node.unique.name":
                return str(node.get("Name", ""))
            if key == "node.datacenter":
                return str(node.get("Datacenter", ""))
            if key == "node.class":
                return str(node.get("NodeClass", ""))
            if key.startswith("attr."):
                return str((node.get("Attributes") or {}).get(key[5:], ""))
            if key.startswith("meta."):
                return str((node.get("Meta") or {}).get(key[5:], ""))
            return m.group(0)

        return _VAR.sub(sub, value)
    if isinstance(value, list):
        return [interpolate(v, env, node) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, env, node) for k, v in value.items()}
    return value


def alloc_index(name: str) -> str:
    """`example.cache[3]` -> "3" (Nomad's Allocation.Index)."""
    if name.endswith("]") and "[" in name:
        idx = name[name.rfind("[") + 1 : -1]
        if idx.isdigit():
            return idx
    return "0"


def combined_meta(job: JobInfo, group: dict[str, Any], task: dict[str, Any]) -> dict[str, str]:
    """Job meta, overridden by the group's, overridden by the task's (CombinedTaskMeta)."""
    out: dict[str, str] = {}
    for layer in (job.meta, group.get("Meta"), task.get("Meta")):
        for k, v in (layer or {}).items():
            out[str(k)] = "" if v is None else str(v)
    return out


def build_task_env(
    *,
    alloc: dict[str, Any],
    job: JobInfo,
    group: dict[str, Any],
    task: dict[str, Any],
    node: dict[str, Any],
    dirs: TaskDirs,
) -> dict[str, str]:
    """The complete environment of one task: nothing from the agent's process."""
    env: dict[str, str] = {
        "NOMAD_ALLOC_DIR": dirs.shared,
        "NOMAD_TASK_DIR": dirs.local,
        "NOMAD_SECRETS_DIR": dirs.secrets,
    }
    res = task.get("Resources") or {}
    for key, field in (
        ("NOMAD_MEMORY_LIMIT", "MemoryMB"),
        ("NOMAD_MEMORY_MAX_LIMIT", "MemoryMaxMB"),
        ("NOMAD_CPU_LIMIT", "CPU"),
    ):
        if res.get(field):  # Nomad omits zero limits
            env[key] = str(int(res[field]))
    alloc_id = str(alloc.get("ID", ""))
    if alloc_id:
        env["NOMAD_ALLOC_ID"] = alloc_id
        env["NOMAD_SHORT_ALLOC_ID"] = alloc_id[:8]
    name = str(alloc.get("Name", ""))
    optional = {
        "NOMAD_ALLOC_NAME": name,
        "NOMAD_GROUP_NAME": str(alloc.get("TaskGroup", "")),
        "NOMAD_TASK_NAME": str(task.get("Name", "")),
        "NOMAD_JOB_ID": job.id,
        "NOMAD_JOB_NAME": job.name or job.id,
        "NOMAD_JOB_PARENT_ID": job.parent_id,
        "NOMAD_DC": str(node.get("Datacenter", "")),
        "NOMAD_NAMESPACE": str(alloc.get("Namespace", "")),
        "NOMAD_REGION": job.region,
    }
    env["NOMAD_ALLOC_INDEX"] = alloc_index(name)
    env.update({k: v for k, v in optional.items() if v})  # Nomad sets these only when known
    for k, v in combined_meta(job, group, task).items():
        value = str(interpolate(v, env, node))
        env[f"NOMAD_META_{k.upper()}"] = value
        env[f"NOMAD_META_{k}"] = value
    # The plain base a host environment would give, without the host's values.
    env.setdefault("PATH", PLAIN_PATH)
    env.setdefault("HOME", dirs.task)
    env.setdefault("TMPDIR", dirs.tmp)
    # The job's own variables come last and win, as in Nomad.
    for k, v in (task.get("Env") or {}).items():
        env[str(k)] = str(interpolate("" if v is None else v, env, node))
    return {(clean_env_key(k) if k.startswith(_CLEANED_PREFIXES) else k): v for k, v in env.items()}

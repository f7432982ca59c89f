"""Real resource figures of the node and of a task's processes, read from /proc (no extra
dependency), in Nomad's HostStats and ResourceUsage shapes. Parsing is pure and separate from
the reads so it is unit-tested on fixed text."""

from __future__ import annotations

import os
import time
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def parse_meminfo(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[name.strip()] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


def parse_cpu_lines(text: str) -> dict[str, list[int]]:
    """`cpuN` -> jiffies (user nice system idle iowait irq softirq steal)."""
    return {
        f[0]: [int(x) for x in f[1:9]]
        for f in (line.split() for line in text.splitlines())
        if f and f[0].startswith("cpu") and f[0] != "cpu"
    }


def cpu_percentages(before: list[int], after: list[int]) -> dict[str, float]:
    d = [max(a - b, 0) for a, b in zip(after, before, strict=False)]
    total = sum(d) or 1
    user = 100.0 * (d[0] + d[1]) / total
    system = 100.0 * (d[2] + d[5] + d[6]) / total
    idle = 100.0 * (d[3] + d[4]) / total
    return {"User": user, "System": system, "Idle": idle, "Total": 100.0 - idle}


def parse_proc_stat(text: str) -> tuple[int, int, int]:
    """(utime, stime, starttime) in clock ticks from /proc/<pid>/stat (the command may hold
    spaces and parentheses, so fields are counted from the last ')')."""
    rest = text[text.rindex(")") + 2 :].split()
    return int(rest[11]), int(rest[12]), int(rest[19])


def parse_status_rss(text: str) -> int:
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _uptime() -> int:
    try:
        return int(float(_read("/proc/uptime").split()[0]))
    except (OSError, ValueError, IndexError):
        return 0


def host_stats(data_dir: str, sample: float = 0.1) -> dict[str, Any]:
    """Blocking (samples CPU over `sample` seconds): call it in a thread."""
    mem = parse_meminfo(_read("/proc/meminfo"))
    first = parse_cpu_lines(_read("/proc/stat"))
    time.sleep(sample)  # two samples of the jiffy counters, as gopsutil measures CPU use
    second = parse_cpu_lines(_read("/proc/stat"))
    cpus = []
    ticks = 0.0
    for name in sorted(second, key=lambda n: int(n[3:] or 0)):
        pct = cpu_percentages(first.get(name, second[name]), second[name])
        cpus.append({"CPU": name, **pct})
        ticks += pct["Total"]
    disk = os.statvfs(data_dir if os.path.isdir(data_dir) else "/")
    size = disk.f_blocks * disk.f_frsize
    avail = disk.f_bavail * disk.f_frsize
    used = size - disk.f_bfree * disk.f_frsize
    disk_stats = {
        "Device": "",
        "Mountpoint": data_dir or "/",
        "Size": size,
        "Used": used,
        "Available": avail,
        "UsedPercent": 100.0 * used / size if size else 0.0,
        "InodesUsedPercent": (
            100.0 * (disk.f_files - disk.f_ffree) / disk.f_files if disk.f_files else 0.0
        ),
    }
    total, available = mem.get("MemTotal", 0), mem.get("MemAvailable", 0)
    return {
        "Memory": {
            "Total": total,
            "Available": available,
            "Used": total - available,
            "Free": mem.get("MemFree", 0),
        },
        "CPU": cpus,
        "DiskStats": [disk_stats],
        "AllocDirStats": disk_stats,
        "DeviceStats": [],
        "Uptime": _uptime(),
        "Timestamp": time.time_ns(),
        "CPUTicksConsumed": ticks,
    }


def _empty_usage() -> dict[str, Any]:
    return {
        "MemoryStats": {
            "RSS": 0,
            "Cache": 0,
            "Swap": 0,
            "MappedFile": 0,
            "Usage": 0,
            "MaxUsage": 0,
            "KernelUsage": 0,
            "KernelMaxUsage": 0,
            "Measured": ["RSS"],
        },
        "CpuStats": {
            "SystemMode": 0.0,
            "UserMode": 0.0,
            "TotalTicks": 0.0,
            "ThrottledPeriods": 0,
            "ThrottledTime": 0,
            "Percent": 0.0,
            "Measured": ["System Mode", "User Mode", "Percent"],
        },
        "DeviceStats": None,
    }


def _children(pid: int) -> list[int]:
    try:
        kids = _read(f"/proc/{pid}/task/{pid}/children").split()
    except OSError:
        return []
    out = [int(k) for k in kids]
    for k in list(out):
        out += _children(k)
    return out


def _uptime_exact() -> float:
    try:
        return float(_read("/proc/uptime").split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def task_usage(pid: int | None) -> tuple[dict[str, Any], list[int]]:
    """A task's ResourceUsage over its process tree: RSS now, CPU use averaged since the
    task's process started."""
    usage = _empty_usage()
    if not pid:
        return usage, []
    pids = [pid, *_children(pid)]
    rss = utime = stime = 0
    start = 0
    alive = []
    for p in pids:
        try:
            u, s, st = parse_proc_stat(_read(f"/proc/{p}/stat"))
            rss += parse_status_rss(_read(f"/proc/{p}/status"))
        except (OSError, ValueError, IndexError):
            continue
        utime, stime = utime + u, stime + s
        start = st if p == pid else start
        alive.append(p)
    elapsed = max(_uptime_exact() - start / CLK_TCK, 1e-3)
    user_s, sys_s = utime / CLK_TCK, stime / CLK_TCK
    usage["MemoryStats"]["RSS"] = usage["MemoryStats"]["Usage"] = rss
    usage["CpuStats"].update(
        UserMode=100.0 * user_s / elapsed,
        SystemMode=100.0 * sys_s / elapsed,
        Percent=100.0 * (user_s + sys_s) / elapsed,
        TotalTicks=(user_s + sys_s) * 1000.0,
    )
    return usage, alive


def add_usage(total: dict[str, Any], part: dict[str, Any]) -> None:
    for k in ("RSS", "Usage"):
        total["MemoryStats"][k] += part["MemoryStats"][k]
    for k in ("UserMode", "SystemMode", "Percent", "TotalTicks"):
        total["CpuStats"][k] += part["CpuStats"][k]


def alloc_usage(tasks: dict[str, int | None]) -> dict[str, Any]:
    """AllocResourceUsage for {task name: pid of its process, None if none runs}."""
    now = time.time_ns()
    total = _empty_usage()
    out_tasks = {}
    for name, pid in tasks.items():
        usage, pids = task_usage(pid)
        add_usage(total, usage)
        out_tasks[name] = {
            "ResourceUsage": usage,
            "Timestamp": now,
            "Pids": {str(p): {"MemoryStats": None, "CpuStats": None} for p in pids} or None,
        }
    return {"ResourceUsage": total, "Tasks": out_tasks, "Timestamp": now}

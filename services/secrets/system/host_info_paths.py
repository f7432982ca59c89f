"""sys/host-info: the host of the secrets replica that answers (CPU, CPU times, disks, host,
memory), in the shape Vault's gopsutil-based answer has, read from /proc and statvfs. Needs sudo,
as Vault's. A part that cannot be read (not Linux, a hidden /proc) is left out with a warning, as
Vault does."""

from __future__ import annotations

import asyncio
import os
import platform
import socket
import time
from collections.abc import Callable
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any

from services.secrets.framework.path import NoFields, Op, Operation, Path
from services.secrets.framework.request import Request, Response

if TYPE_CHECKING:
    from services.secrets.core.core import Core

PROC = FsPath("/proc")
# /proc/stat counts in clock ticks.
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _pairs(text: str) -> dict[str, str]:
    """`key: value` lines (/proc/cpuinfo blocks, /proc/meminfo, /etc/os-release with '=')."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":") if ":" in line else line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip('"')
    return out


def cpu() -> list[dict[str, Any]]:
    out = []
    for block in (PROC / "cpuinfo").read_text().split("\n\n"):
        f = _pairs(block)
        if "processor" not in f:
            continue
        out.append(
            {
                "cpu": int(f["processor"]),
                "vendorId": f.get("vendor_id", ""),
                "family": f.get("cpu family", ""),
                "model": f.get("model", ""),
                "stepping": int(f.get("stepping", "0") or 0),
                "physicalId": f.get("physical id", ""),
                "coreId": f.get("core id", ""),
                "cores": 1,  # one logical CPU per entry, as gopsutil counts
                "modelName": f.get("model name", ""),
                "mhz": float(f.get("cpu MHz", "0") or 0),
                "cacheSize": int((f.get("cache size", "0").split() or ["0"])[0]),
                "flags": f.get("flags", "").split(),
                "microcode": f.get("microcode", ""),
            }
        )
    return out


_TIMES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest")


def cpu_times() -> list[dict[str, Any]]:
    out = []
    for line in (PROC / "stat").read_text().splitlines():
        name, *ticks = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        times: dict[str, Any] = {"cpu": name}
        for field, value in zip((*_TIMES, "guestNice"), ticks, strict=False):
            times[field] = int(value) / _TICK
        out.append(times)
    return out


def disk() -> list[dict[str, Any]]:
    """The file systems mounted from a device, as gopsutil lists them."""
    out = []
    seen = set()
    for line in (PROC / "mounts").read_text().splitlines():
        device, path, fstype = line.split()[:3]
        if not device.startswith("/dev/") or device in seen:
            continue  # a device once, at its first mount (bind mounts repeat it)
        seen.add(device)
        try:
            st = os.statvfs(path)
        except OSError:
            continue
        total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        used = total - st.f_bfree * st.f_frsize
        inodes_used = st.f_files - st.f_ffree
        out.append(
            {
                "path": path,
                "fstype": fstype,
                "total": total,
                "free": free,
                "used": used,
                "usedPercent": 100 * used / (used + free) if used + free else 0.0,
                "inodesTotal": st.f_files,
                "inodesUsed": inodes_used,
                "inodesFree": st.f_ffree,
                "inodesUsedPercent": 100 * inodes_used / st.f_files if st.f_files else 0.0,
            }
        )
    return out


def host() -> dict[str, Any]:
    uptime = int(float((PROC / "uptime").read_text().split()[0]))
    release: dict[str, str] = {}
    os_release = FsPath("/etc/os-release")
    if os_release.exists():
        release = _pairs(os_release.read_text())
    procs = sum(1 for p in PROC.iterdir() if p.name.isdigit())
    machine_id = FsPath("/etc/machine-id")
    family = (release.get("ID_LIKE") or release.get("ID", "")).split()
    return {
        "hostname": socket.gethostname(),
        "uptime": uptime,
        "bootTime": int(time.time()) - uptime,
        "procs": procs,
        "os": platform.system().lower(),
        "platform": release.get("ID", ""),
        "platformFamily": family[0] if family else "",
        "platformVersion": release.get("VERSION_ID", ""),
        "kernelVersion": platform.release(),
        "kernelArch": platform.machine(),
        "virtualizationSystem": "",
        "virtualizationRole": "",
        "hostid": machine_id.read_text().strip() if machine_id.exists() else "",
    }


_MEMINFO = {
    "total": "MemTotal",
    "available": "MemAvailable",
    "free": "MemFree",
    "active": "Active",
    "inactive": "Inactive",
    "buffers": "Buffers",
    "cached": "Cached",
    "writeback": "Writeback",
    "dirty": "Dirty",
    "shared": "Shmem",
    "slab": "Slab",
    "sreclaimable": "SReclaimable",
    "sunreclaim": "SUnreclaim",
    "pagetables": "PageTables",
    "swapcached": "SwapCached",
    "commitlimit": "CommitLimit",
    "committedas": "Committed_AS",
    "swaptotal": "SwapTotal",
    "swapfree": "SwapFree",
    "mapped": "Mapped",
    "writebacktmp": "WritebackTmp",
    "hightotal": "HighTotal",
    "highfree": "HighFree",
    "lowtotal": "LowTotal",
    "lowfree": "LowFree",
    "hugepagesize": "Hugepagesize",
    "vmalloctotal": "VmallocTotal",
    "vmallocused": "VmallocUsed",
    "vmallocchunk": "VmallocChunk",
}
# Counts, not sizes in KiB.
_MEMINFO_COUNTS = {"hugepagestotal": "HugePages_Total", "hugepagesfree": "HugePages_Free"}


def memory() -> dict[str, Any]:
    info = _pairs((PROC / "meminfo").read_text())

    def kib(name: str) -> int:
        return int((info.get(name, "0").split() or ["0"])[0]) * 1024

    out: dict[str, Any] = {field: kib(name) for field, name in _MEMINFO.items()}
    for field, name in _MEMINFO_COUNTS.items():
        out[field] = kib(name) // 1024
    out["wired"] = out["laundry"] = 0  # BSD and macOS figures
    out["used"] = out["total"] - out["available"]
    out["usedPercent"] = 100 * out["used"] / out["total"] if out["total"] else 0.0
    return out


PARTS: dict[str, Callable[[], Any]] = {
    "cpu": cpu,
    "cpu_times": cpu_times,
    "disk": disk,
    "host": host,
    "memory": memory,
}


def collect() -> tuple[dict[str, Any], list[str]]:
    data: dict[str, Any] = {}
    warnings = []
    for name, read in PARTS.items():
        try:
            data[name] = read()
        except (OSError, ValueError, IndexError) as exc:
            warnings.append(f"failed to collect {name} information: {type(exc).__name__}")
    data["timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return data, warnings


def paths(core: Core) -> list[Path]:
    async def host_info(req: Request, _: NoFields) -> Response:
        data, warnings = await asyncio.to_thread(collect)  # file reads: off the event loop
        return Response(data=data, warnings=warnings)

    return [
        Path(
            "host-info",
            {Op.READ: Operation(host_info, "Information about the host", sudo=True)},
            synopsis="CPU, disk, host and memory information of the answering replica's host.",
        )
    ]

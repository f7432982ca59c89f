"""Which CPUs each kind of process of `trellis dev` may run on (`--cpu-affinity`).

A request crosses several processes that wake one another over loopback sockets (gateway,
nats-server, secrets replica). On a 2-CPU host Linux tends to wake the woken process on the CPU
of the one that woke it (wake-affine placement), so the stages take turns on one core while the
other idles: bench/idle.py showed 0.45 of 2 cores idle under a transit load that kept every
stage's clients waiting, and OpenBao's one process leaves none. Pinning the gateways to one CPU
and the secrets replicas with nats-server to the other keeps both busy
(docs/performance.md). Other kinds (workspace, scheduler, crypto workers...) stay unpinned.

Spec: `kind=cpus` pairs separated by `;`, cpus as Linux writes them (`0`, `0-3`, `0,2`), e.g.
`gateway=0;secrets=1;nats=1`. `auto`: that layout on a host with exactly two usable CPUs (the
only size it was measured on), nothing elsewhere. `off`: nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

KINDS = frozenset(
    {"gateway", "secrets", "nats", "crypto", "workspace", "scheduler", "replication", "client"}
)
Layout = dict[str, frozenset[int]]


def parse_cpus(text: str) -> frozenset[int]:
    """`0-2,5` -> {0, 1, 2, 5}."""
    cpus: set[int] = set()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"not a CPU list: {text!r} (write it as 0, 0-3 or 0,2)")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"not a CPU list: {text!r} (a range runs upwards)")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def parse(spec: str, usable: frozenset[int]) -> Layout:
    """The layout `spec` asks for, checked against the CPUs this process may use."""
    spec = spec.strip()
    if spec in ("", "off"):
        return {}
    if spec == "auto":
        return auto(usable)
    layout: Layout = {}
    for pair in spec.split(";"):
        kind, sep, cpus_text = pair.partition("=")
        kind = kind.strip()
        if not sep or kind not in KINDS:
            raise ValueError(f"not a kind=cpus pair: {pair!r} (kinds: {', '.join(sorted(KINDS))})")
        cpus = parse_cpus(cpus_text)
        if not cpus <= usable:
            raise ValueError(
                f"{kind}: CPUs {sorted(cpus - usable)} are not usable here "
                f"(usable: {sorted(usable)})"
            )
        layout[kind] = cpus
    return layout


def auto(usable: frozenset[int]) -> Layout:
    if len(usable) != 2:
        return {}
    first, second = (frozenset({cpu}) for cpu in sorted(usable))
    return {"gateway": first, "secrets": second, "nats": second}


def usable_cpus() -> frozenset[int]:
    """The CPUs this process may run on; none where the platform cannot pin (macOS), so that
    only `off` and `auto` (which then pins nothing) are accepted there."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    return frozenset(getaffinity(0)) if getaffinity is not None else frozenset()


def pin(pid: int, cpus: frozenset[int]) -> None:
    """Pin every thread of `pid`. Threads started later inherit their creator's mask; a second
    pass catches one started during the first (nats-server's runtime starts its own at once)."""
    tasks = Path(f"/proc/{pid}/task")
    done: set[int] = set()
    for _ in range(2):
        try:
            tids = {int(t.name) for t in tasks.iterdir()}
        except FileNotFoundError:
            return  # it has exited already: its restart is pinned in turn
        for tid in tids - done:
            try:
                os.sched_setaffinity(tid, cpus)
            except (ProcessLookupError, PermissionError):
                continue
            done.add(tid)

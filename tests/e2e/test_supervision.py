"""Supervision (issue 20 items 3-5): under `trellis dev` and under `trellis server`, `kill -9`
of each service and of nats-server, and the APIs come back with their data within 30 s; a child
that keeps crashing is restarted with growing delays until the supervisor gives up (exit 1);
SIGTERM to `trellis server` and to `trellis dev` (also as PID 1 of a PID namespace) stops
intake, drains, exits 0 and leaves no process behind; the dev root token works at the first 200
of sys/health. The `trellis server` test also sends hostile bytes and holds 1,000 blocking
queries (items 1-2, which test_hostile_bytes.py and test_sched_blocking.py cover in depth
through `trellis dev`)."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest
import requests

from services.dev_launch import dev_argv, popen_dev, stop_process
from services.restarts import RestartPolicy
from services.supervisor import child_role, direct_children
from tests.conftest import free_port, start_nats
from tests.held_queries import Held
from tests.job_helpers import one_task_job
from tests.procs import (
    ROOT,
    alive,
    descendants,
    dev,
    proc_state,
    server_config,
    start_server,
    until,
    wait_http,
)

pytestmark = pytest.mark.e2e

RECOVERY_SECONDS = 30.0


def _children(parent: int, role: str) -> list[int]:
    return sorted(p for p in direct_children(parent) if child_role(p) == role)


def _child(parent: int, role: str) -> int:
    pids = _children(parent, role)
    assert len(pids) == 1, f"expected one {role} under {parent}, found {pids}"
    return pids[0]


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return ""


def _until(what: str, check: Callable[[], bool], timeout: float) -> float:
    """Poll `check` (exceptions count as not yet); the seconds it took."""
    start = time.monotonic()
    last = ""
    while time.monotonic() - start < timeout:
        try:
            if check():
                print(f"{what}: {time.monotonic() - start:.1f}s")
                return time.monotonic() - start
        except (requests.RequestException, AssertionError, ValueError, KeyError, OSError) as exc:
            last = f"{type(exc).__name__}: {exc}"[:300]
        time.sleep(0.2)
    raise AssertionError(f"{what} not back within {timeout:.0f}s; last: {last}")


def _job(name: str) -> dict[str, object]:
    # The mock driver runs in the client agent itself: what is tested is that the restarted
    # client fetches and finishes work, whatever user raw_exec would run a task as.
    task = {"Name": "t", "Driver": "mock", "Config": {"run_for": "0.1s"}}
    return {"Job": one_task_job(name, task)}


class Apis(Protocol):
    """The three listeners and a token that may use them (`trellis dev` or `trellis server`)."""

    secrets: str
    workspace: str
    scheduler: str
    root_token: str


class Data:
    """A KV secret, a workspace, a job and a crypto-backed operation written before the kills,
    and the checks that they are all served again."""

    def __init__(self, d: Apis) -> None:
        self.d = d
        self.vault = {"X-Vault-Token": d.root_token}
        self.tfc = {
            "Authorization": f"Bearer {d.root_token}",
            "Content-Type": "application/vnd.api+json",
        }
        self.secret = uuid.uuid4().hex
        self.org = f"org-{uuid.uuid4().hex[:8]}"
        self.job = f"job-{uuid.uuid4().hex[:8]}"

    def write(self) -> None:
        d = self.d
        r = requests.post(
            f"{d.secrets}/v1/secret/data/supervised",
            headers=self.vault,
            json={"data": {"value": self.secret}},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        r = requests.post(
            f"{d.secrets}/v1/sys/mounts/pki",
            headers=self.vault,
            json={"type": "pki"},
            timeout=30,
        )
        assert r.status_code in (200, 204), r.text
        assert self.crypto_works()
        r = requests.post(
            f"{d.workspace}/api/v2/organizations",
            headers=self.tfc,
            json={
                "data": {
                    "type": "organizations",
                    "attributes": {"name": self.org, "email": "ops@example.test"},
                }
            },
            timeout=30,
        )
        assert r.status_code == 201, r.text
        r = requests.post(
            f"{d.workspace}/api/v2/organizations/{self.org}/workspaces",
            headers=self.tfc,
            json={"data": {"type": "workspaces", "attributes": {"name": "kept"}}},
            timeout=30,
        )
        assert r.status_code == 201, r.text
        job = _job(self.job)
        r = requests.post(f"{d.scheduler}/v1/jobs", headers=self.vault, json=job, timeout=30)
        assert r.status_code == 200, r.text

    def kv_back(self) -> bool:
        r = requests.get(
            f"{self.d.secrets}/v1/secret/data/supervised", headers=self.vault, timeout=5
        )
        assert r.status_code == 200, r.text
        return r.json()["data"]["data"]["value"] == self.secret

    def workspace_back(self) -> bool:
        r = requests.get(
            f"{self.d.workspace}/api/v2/organizations/{self.org}/workspaces/kept",
            headers=self.tfc,
            timeout=5,
        )
        assert r.status_code == 200, r.text
        return r.json()["data"]["attributes"]["name"] == "kept"

    def job_back(self) -> bool:
        r = requests.get(f"{self.d.scheduler}/v1/job/{self.job}", headers=self.vault, timeout=5)
        assert r.status_code == 200, r.text
        return r.json()["ID"] == self.job

    def crypto_works(self) -> bool:
        r = requests.post(
            f"{self.d.secrets}/v1/pki/keys/generate/internal",
            headers=self.vault,
            json={"key_type": "ec"},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        return True

    def client_back(self) -> bool:
        r = requests.get(f"{self.d.scheduler}/v1/nodes", headers=self.vault, timeout=5)
        assert r.status_code == 200, r.text
        return any(n["Status"] == "ready" for n in r.json())

    def job_runs(self, name: str) -> Callable[[], bool]:
        """Register a batch job now; the check is true once its allocation completed (a client
        node that heartbeats, fetches and runs work)."""
        job = _job(name)
        r = requests.post(f"{self.d.scheduler}/v1/jobs", headers=self.vault, json=job, timeout=30)
        assert r.status_code == 200, r.text

        def complete() -> bool:
            r = requests.get(
                f"{self.d.scheduler}/v1/job/{name}/allocations", headers=self.vault, timeout=5
            )
            assert r.status_code == 200, r.text
            allocs = r.json()
            return bool(allocs) and all(a["ClientStatus"] == "complete" for a in allocs)

        return complete

    def writes_work(self) -> bool:
        """New writes to each API are acknowledged and read back (storage, log appends and the
        replicas' apply loops all work again)."""
        value = uuid.uuid4().hex
        r = requests.post(
            f"{self.d.secrets}/v1/secret/data/after",
            headers=self.vault,
            json={"data": {"value": value}},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        r = requests.get(f"{self.d.secrets}/v1/secret/data/after", headers=self.vault, timeout=5)
        assert r.json()["data"]["data"]["value"] == value, r.text
        name = f"ws-{value[:8]}"
        r = requests.post(
            f"{self.d.workspace}/api/v2/organizations/{self.org}/workspaces",
            headers=self.tfc,
            json={"data": {"type": "workspaces", "attributes": {"name": name}}},
            timeout=10,
        )
        assert r.status_code == 201, r.text
        return True

    def all_back(self) -> bool:
        return self.kv_back() and self.workspace_back() and self.job_back()


def test_kill_9_of_each_child_and_the_apis_come_back(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with dev("--data-dir", str(data_dir), "--root-token", "supervised-root") as d:
        data = Data(d)
        _until("a ready client node", data.client_back, 60)
        data.write()
        took: dict[str, float] = {}
        for victim in (
            *("secrets", "workspace", "scheduler", "crypto", "replication", "gateway", "client"),
            "nats",
        ):
            # Several gateway processes on a machine with 2 CPUs or more: kill one of them.
            before = _children(d.proc.pid, victim)
            assert before, f"no {victim} under {d.proc.pid}"
            pid = before[0]
            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            deadline = killed + RECOVERY_SECONDS

            def replaced(pid: int = pid, victim: str = victim, n: int = len(before)) -> bool:
                now = _children(d.proc.pid, victim)
                return len(now) == n and pid not in now

            # The supervisor started a new process in its place...
            _until(f"a new {victim} process", replaced, deadline - time.monotonic())
            # ...and every API serves what was written before, within the deadline.
            _until(
                f"the APIs after kill -9 of {victim}", data.all_back, deadline - time.monotonic()
            )
            _until(
                f"writes after kill -9 of {victim}", data.writes_work, deadline - time.monotonic()
            )
            if victim in ("crypto", "nats"):
                _until("crypto work", data.crypto_works, deadline - time.monotonic())
            if victim in ("client", "scheduler", "nats"):
                runs = data.job_runs(f"after-{victim}-{uuid.uuid4().hex[:6]}")
                _until("a job on the restarted client", runs, deadline - time.monotonic())
            took[victim] = round(time.monotonic() - killed, 1)
        assert d.proc.poll() is None, "trellis dev exited"
        said = (data_dir / "logs" / "supervisor.log").read_text()
        for victim in took:
            assert re.search(rf"{victim}(#\d+)? exited with", said), said
            assert re.search(rf"{victim}(#\d+)? restarted", said), said
        print("recovery seconds:", took)
        family = set(descendants(d.proc.pid))
    # SIGINT (Ctrl-C): every child stopped, exit 0, nothing left behind.
    assert d.proc.returncode == 0
    assert not [(p, child_role(p)) for p in family if alive(p)]


def _kill_all(proc: subprocess.Popen[bytes], family: set[int]) -> None:
    """Whatever is left (on failure) must not outlive the test."""
    for p in family | set(descendants(proc.pid)):
        if alive(p):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _in_flight(supervisor: int) -> float:
    """Scheduler requests the gateway processes under `supervisor` are forwarding now: each
    one's Prometheus gauge on its own health address (a listener's /metrics would count itself,
    and only the one process that took the connection)."""
    total = 0.0
    for pid in _children(supervisor, "gateway"):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        health = argv[argv.index("--health-addr") + 1]
        text = requests.get(f"http://{health}/metrics", timeout=5).text
        total += sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith('trellis_gateway_in_flight{api="scheduler"}')
        )
    return total


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _pid_one(pid: int) -> None:
    """`pid` is PID 1 of its own PID namespace."""
    nspid = next(
        line
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("NSpid:")
    )
    assert nspid.split()[-1] == "1", nspid


def _sigterm_drains_and_leaves_nothing(
    proc: subprocess.Popen[bytes], target: int, ports: list[int]
) -> None:
    """SIGTERM to `target` (the supervisor; `proc` itself or under a wrapper) while a request
    is in flight: intake stops (the secrets listener refuses connections while that request
    still waits), the request is drained (answered), not cut off; `proc` exits 0 within the
    stop timeout; no process of the family is left and no listener port is held."""
    family = set(descendants(target))
    assert len(family) >= 4, family
    # A blocking query that waits 5 s.
    scheduler = f"http://127.0.0.1:{ports[2]}"
    drained: dict[str, object] = {}

    def blocking_query() -> None:
        try:
            r = requests.get(
                f"{scheduler}/v1/jobs", params={"index": 10**9, "wait": "5s"}, timeout=30
            )
            drained["status"] = r.status_code
        except requests.RequestException as exc:
            drained["error"] = repr(exc)

    query = threading.Thread(target=blocking_query)
    query.start()
    try:
        _until("the blocking query in flight", lambda: _in_flight(target) >= 1, 10)
        started = time.monotonic()
        os.kill(target, signal.SIGTERM)
        _until("intake stopped", lambda: not _listening(ports[0]), 10)
        assert query.is_alive(), "the blocking query ended before intake stopped"
        assert proc.wait(40) == 0
        assert time.monotonic() - started < 30
    finally:
        query.join(30)
        _kill_all(proc, family)
    assert drained.get("status") == 200, drained
    left = {p for p in family if alive(p)}
    assert not left, f"left behind: {[(p, child_role(p)) for p in left]}"
    assert not any(_listening(p) for p in ports)


def _sigterm_leaves_nothing(argv: list[str], cfg: Path, ports: list[int], pid_one: bool) -> None:
    proc = start_server(cfg, *argv)
    try:
        wait_http(f"http://127.0.0.1:{ports[0]}/v1/sys/health", ok=(501,))
        wait_http(f"http://127.0.0.1:{ports[1]}/api/v2/ping", ok=(200, 204))
        # Under `unshare --fork` the server is unshare's child (PID 1 of the new namespace).
        server = _child(proc.pid, "server") if pid_one else proc.pid
        if pid_one:
            _pid_one(server)
        assert len(descendants(server)) >= 6
        _sigterm_drains_and_leaves_nothing(proc, server, ports)
    finally:
        _kill_all(proc, set())


def test_sigterm_to_server_stops_every_child_and_exits_0(nats_url: str, tmp_path: Path) -> None:
    cfg, ports = server_config(nats_url, tmp_path)
    _sigterm_leaves_nothing([], cfg, ports, pid_one=False)


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root")
def test_sigterm_to_server_as_pid_1(nats_url: str, tmp_path: Path) -> None:
    """The kernel drops a signal to PID 1 that has no handler: without explicit handlers the
    server would ignore SIGTERM in a container."""
    cfg, ports = server_config(nats_url, tmp_path)
    _sigterm_leaves_nothing(
        ["unshare", "--pid", "--fork", "--mount-proc"], cfg, ports, pid_one=True
    )


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root")
def test_sigterm_to_dev_as_pid_1(tmp_path: Path) -> None:
    """`trellis dev` as PID 1 of a PID namespace (as in a container): SIGTERM drains, stops
    nats-server and every service, exits 0. (SIGINT to it: the kill -9 test's end.)"""
    ports = [free_port() for _ in range(3)]
    out = tmp_path / "dev.out"
    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            [
                *("unshare", "--pid", "--fork", "--mount-proc"),
                *dev_argv(ports, "--services", "scheduler"),
            ],
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        until(lambda: b"Press Ctrl-C" in out.read_bytes() or proc.poll() is not None, 120, "dev")
        assert proc.poll() is None, out.read_text()
        dev_pid = _child(proc.pid, "dev")
        _pid_one(dev_pid)
        _sigterm_drains_and_leaves_nothing(proc, dev_pid, ports)
    finally:
        _kill_all(proc, set())


def _gives_up_after_repeated_crashes(
    proc: subprocess.Popen[bytes], supervisor: int, said: Path
) -> None:
    """kill -9 the crypto service each time it is back: restarted with a growing delay, and at
    the fifth crash within the minute the supervisor gives up: every child stopped, exit 1,
    said on stderr."""
    family = set(descendants(supervisor))
    limit = RestartPolicy().limit
    for crash in range(limit):
        pid = until(lambda: _children(supervisor, "crypto"), 60, "a crypto process")[0]
        os.kill(pid, signal.SIGKILL)
        if crash < limit - 1:
            until(
                lambda pid=pid: [p for p in _children(supervisor, "crypto") if p != pid],
                30,
                "the new crypto",
            )
    assert proc.wait(40) == 1
    text = said.read_text(errors="replace")
    assert text.count("crypto exited with -9; restarting it in") == limit - 1, text[-3000:]
    delays = [
        float(d) for d in re.findall(r"crypto exited with -9; restarting it in ([0-9.]+)s", text)
    ]
    assert delays == sorted(delays) and delays[-1] > delays[0], delays  # exponential backoff
    assert re.search(rf"crypto exited with -9 {limit} times within \d+s; giving up", text), text
    assert not [(p, child_role(p)) for p in family | set(descendants(supervisor)) if alive(p)]


def test_dev_gives_up_after_repeated_crashes(tmp_path: Path) -> None:
    ports = [free_port() for _ in range(3)]
    out = tmp_path / "dev.out"
    with open(out, "wb") as sink:
        proc = popen_dev(ports, "--services", "crypto", stdout=sink, stderr=subprocess.STDOUT)
    try:
        until(lambda: b"Press Ctrl-C" in out.read_bytes() or proc.poll() is not None, 120, "dev")
        assert proc.poll() is None, out.read_text()
        _gives_up_after_repeated_crashes(proc, proc.pid, out)
    finally:
        _kill_all(proc, set())


def test_server_gives_up_after_repeated_crashes(nats_url: str, tmp_path: Path) -> None:
    cfg, ports = server_config(nats_url, tmp_path)
    err = tmp_path / "server.err"
    with open(err, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "server", "--config", str(cfg)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    try:
        wait_http(f"http://127.0.0.1:{ports[0]}/v1/sys/health", ok=(501,))
        _gives_up_after_repeated_crashes(proc, proc.pid, err)
    finally:
        _kill_all(proc, set())


@dataclass
class Server:
    secrets: str
    workspace: str
    scheduler: str
    root_token: str


def _init_server(s: Server) -> None:
    """Initialize (with the static seal every restarted secrets replica unseals itself) and
    make `s.root_token`, which the workspace service takes as its admin token, a root token."""
    r = requests.post(f"{s.secrets}/v1/sys/init", json={}, timeout=30)
    assert r.status_code == 200, r.text
    root = r.json()["root_token"]
    _until("unsealed", lambda: requests.get(f"{s.secrets}/v1/sys/health", timeout=5).ok, 30)
    r = requests.post(
        f"{s.secrets}/v1/auth/token/create",
        headers={"X-Vault-Token": root},
        json={"id": s.root_token, "policies": ["root"]},
        timeout=30,
    )
    assert r.status_code == 200, r.text


def _hostile_bytes_refused(s: Server) -> None:
    """A few of test_hostile_bytes.py's bodies and request lines, on this server's listeners."""
    deep = b"[" * 10_000 + b"]" * 10_000
    cases = [
        (s.secrets, "/v1/auth/token/create", b'{"ttl": Infinity}', b"failed to decode JSON"),
        (s.secrets, "/v1/auth/token/create", b'{"ttl": 1e999}', b"failed to decode JSON"),
        (s.secrets, "/v1/auth/token/create", deep, b"refused JSON input due to high complexity"),
        (s.workspace, "/api/v2/organizations", b'{"data": "\xff"}', b"malformed JSON"),
        (s.workspace, "/api/v2/organizations", deep, b"nested deeper than"),
        (s.scheduler, "/v1/jobs", b'{"Job": {"ID": "\xff\xfe"}}', b"invalid UTF-8"),
        (s.scheduler, "/v1/jobs", deep, b"nested deeper than"),
    ]
    for base, path, body, words in cases:
        r = requests.post(
            base + path,
            data=body,
            headers={
                "X-Vault-Token": s.root_token,
                "Authorization": f"Bearer {s.root_token}",
                "Content-Type": "application/json",
            },
            timeout=30,
        )
        assert 400 <= r.status_code < 500 and words in r.content, (path, r.status_code, r.text)
    for base in (s.secrets, s.workspace, s.scheduler):
        host, port = base.removeprefix("http://").split(":")
        for line in (b"OPTIONS * HTTP/1.1", b"CONNECT 127.0.0.1:22 HTTP/1.1"):
            with socket.create_connection((host, int(port)), timeout=30) as conn:
                conn.sendall(line + b"\r\nHost: x\r\nConnection: close\r\n\r\n")
                status = int(conn.recv(65536).split(b" ", 2)[1])
            assert status < 500, (base, line, status)


def _expired_wait_answers_200(s: Server, job: str) -> None:
    """A blocking query with `wait=3s` on an index the log has not reached answers 200 with the
    current index and the current list (holding `job`) once its wait (and at most Nomad's
    wait/16 jitter) has run out."""
    headers = {"X-Nomad-Token": s.root_token}
    now = requests.get(f"{s.scheduler}/v1/jobs", headers=headers, timeout=10)
    index = int(now.headers["X-Sched-Index"])
    started = time.monotonic()
    r = requests.get(
        f"{s.scheduler}/v1/jobs",
        params={"index": index + 10**6, "wait": "3s"},
        headers=headers,
        timeout=30,
    )
    took = time.monotonic() - started
    assert r.status_code == 200, r.text
    assert 2.9 <= took <= 3 * 17 / 16 + 1.5, took
    assert index <= int(r.headers["X-Sched-Index"]) < index + 10**6
    assert any(j["ID"] == job for j in r.json()), r.text


def _fast_while_1000_wait(s: Server, supervisor: int, job: str) -> None:
    """While 1,000 blocking queries wait, job register, job list and node list answer in
    under 2 s each, and an expiring wait still answers 200 on time."""
    vault = {"X-Vault-Token": s.root_token}
    with Held(s.scheduler, 1000) as held:
        _until("1,000 queries held", lambda: _in_flight(supervisor) >= 1000, 120)
        # Once the scheduler has taken them all in (five quick answers in a row), what is
        # measured is the cost of holding them, not of their arrival.
        streak, deadline = 0, time.monotonic() + 60
        while streak < 5:
            assert time.monotonic() < deadline, "the scheduler never caught up"
            started = time.monotonic()
            requests.get(f"{s.scheduler}/v1/status/leader", timeout=30)
            streak = streak + 1 if time.monotonic() - started < 0.5 else 0
        for i in range(3):
            for method, path, body in (
                ("POST", "/v1/jobs", _job(f"fast-{i}-{uuid.uuid4().hex[:6]}")),
                ("GET", "/v1/jobs", None),
                ("GET", "/v1/nodes", None),
            ):
                started = time.monotonic()
                r = requests.request(
                    method, s.scheduler + path, json=body, headers=vault, timeout=30
                )
                took = time.monotonic() - started
                assert r.status_code == 200 and took < 2.0, (method, path, took, r.text)
        _expired_wait_answers_200(s, job)
        assert not held.answered, held.answered[:5]
        assert _in_flight(supervisor) >= 1000
    # Their clients went away: the gateway stops waiting for them.
    _until("the held queries let go", lambda: _in_flight(supervisor) == 0, 30)


def test_kill_9_under_server_and_of_its_nats(tmp_path: Path) -> None:
    """`trellis server` restarts each of its services killed with kill -9, and its services
    resume once their NATS (the orchestrator's to restart) comes back with its store; each
    within 30 s, with the data written before. Then hostile bytes, 1,000 blocking queries and
    SIGTERM: exit 0, nothing left behind."""
    store = tmp_path / "nats"
    store.mkdir()
    nats, url, _ = start_nats(str(store))
    port = int(url.rsplit(":", 1)[1])
    cfg, ports = server_config(url, tmp_path)
    key = base64.b64encode(os.urandom(32)).decode()
    cfg.write_text(cfg.read_text() + f"seal:\n  type: static\n  key: {key}\n")
    stderr = tmp_path / "server.err"
    token = f"admin-{uuid.uuid4().hex}"
    with open(stderr, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "server", "--config", str(cfg)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=sink,
            env={**os.environ, "TRELLIS_WORKSPACE_ADMIN_TOKEN": token},
        )
    try:
        s = Server(*(f"http://127.0.0.1:{p}" for p in ports), root_token=token)
        wait_http(f"{s.secrets}/v1/sys/health", ok=(501,))
        _init_server(s)
        data = Data(s)
        data.write()
        took: dict[str, float] = {}
        # nats-server is not the server's child: kill -9 it, and restart it on the same port
        # and store, as the orchestrator would. First, so that each service killed below
        # starts again from what the restarted NATS kept on disk.
        nats.kill()
        nats.wait()
        killed = time.monotonic()
        nats, _, _ = start_nats(str(store), port=port)
        deadline = killed + RECOVERY_SECONDS
        _until("the APIs after kill -9 of nats", data.all_back, deadline - time.monotonic())
        _until("writes after kill -9 of nats", data.writes_work, deadline - time.monotonic())
        _until("crypto work", data.crypto_works, deadline - time.monotonic())
        took["nats"] = round(time.monotonic() - killed, 1)
        victims = ("secrets", "crypto", "replication", "workspace", "scheduler", "gateway")
        for victim in victims:
            pid = _child(proc.pid, victim)
            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            deadline = killed + RECOVERY_SECONDS

            def replaced(pid: int = pid, victim: str = victim) -> bool:
                return [p for p in _children(proc.pid, victim) if p != pid] != []

            _until(f"a new {victim} process", replaced, deadline - time.monotonic())
            _until(
                f"the APIs after kill -9 of {victim}", data.all_back, deadline - time.monotonic()
            )
            _until(
                f"writes after kill -9 of {victim}", data.writes_work, deadline - time.monotonic()
            )
            if victim == "crypto":
                _until("crypto work", data.crypto_works, deadline - time.monotonic())
            took[victim] = round(time.monotonic() - killed, 1)
        print("recovery seconds:", took)
        said = stderr.read_text(errors="replace")
        for victim in victims:
            assert re.search(rf"{victim}(#\d+)? exited with", said), said[-3000:]
            assert re.search(rf"{victim}(#\d+)? restarted", said), said[-3000:]
        _hostile_bytes_refused(s)
        _fast_while_1000_wait(s, proc.pid, data.job)
        _sigterm_drains_and_leaves_nothing(proc, proc.pid, ports)
    finally:
        _kill_all(proc, set())
        stop_process(nats, signal.SIGTERM, 10)


@pytest.mark.skipif(shutil.which("nsenter") is None or os.geteuid() != 0, reason="needs root")
def test_run_as_pid_1_reaps_orphans_and_stops_on_sigterm(nats_url: str) -> None:
    """`trellis run` is PID 1 of its container in k8s/: orphans of the namespace become its
    children and must be reaped, and SIGTERM must stop it (exit 0)."""
    health = free_port()
    proc = subprocess.Popen(
        [
            *("unshare", "--pid", "--fork", "--mount-proc"),
            *(sys.executable, "-m", "services.cli", "run", "secrets"),
            *("--nats-url", nats_url, "--insecure-bus", "--health-addr", f"127.0.0.1:{health}"),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    family: set[int] = set()
    try:
        wait_http(f"http://127.0.0.1:{health}/readyz")
        pid_one = _child(proc.pid, "secrets")
        family = set(descendants(pid_one)) | {pid_one}
        # An orphan inside the namespace: its parent exits at once, it exits 0.3 s later.
        subprocess.run(
            ["nsenter", "-t", str(pid_one), "-p", "--", "sh", "-c", "sleep 0.3 & exit 0"],
            check=True,
            timeout=10,
        )
        orphans = until(
            lambda: [p for p in direct_children(pid_one) if child_role(p) == "sleep"],
            5,
            "the orphaned sleep",
            interval=0.02,
        )
        deadline = time.monotonic() + 10
        while any(proc_state(p) for p in orphans) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(proc_state(p) for p in orphans), {p: proc_state(p) for p in orphans}
        os.kill(pid_one, signal.SIGTERM)
        assert proc.wait(30) == 0
        assert not [p for p in family if alive(p)]
    finally:
        _kill_all(proc, family)


def test_root_token_works_at_the_first_200_of_health(tmp_path: Path) -> None:
    ports = [free_port() for _ in range(3)]
    token = f"first-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "dev.out"
    with open(out, "wb") as sink:
        proc = popen_dev(
            ports,
            "--root-token",
            token,
            "--services",
            "crypto",
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{ports[0]}"
    try:
        deadline = time.monotonic() + 120
        status = 0
        # Poll as fast as a script would, from the moment the process starts.
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(requests.RequestException):
                status = requests.get(base + "/v1/sys/health", timeout=2).status_code
                if status == 200:
                    break
            time.sleep(0.01)
        assert status == 200, out.read_text()
        r = requests.get(
            base + "/v1/auth/token/lookup-self", headers={"X-Vault-Token": token}, timeout=10
        )
        assert r.status_code == 200, r.text
        assert r.json()["data"]["policies"] == ["root"]
        # Each listener's /readyz covers the service behind it: secrets runs, workspace and
        # scheduler were not started (--services crypto).
        ready = {
            api: requests.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
            for api, port in zip(("secrets", "workspace", "scheduler"), ports, strict=True)
        }
        assert ready["secrets"].status_code == 200, ready["secrets"].text
        assert ready["secrets"].json()["service"]["behind"] == [{"name": "crypto", "ready": True}]
        for api in ("workspace", "scheduler"):
            assert ready[api].status_code == 503, ready[api].text
            assert ready[api].json()["gateway"] is True
            assert ready[api].json()["service"]["ready"] is False
        # ...and the services behind that one: with every crypto worker stopped (alive, so
        # the supervisor does not restart them), the secrets listener is unready, naming them.
        workers = [p for p in descendants(proc.pid) if "crypto" in _cmdline(p)]
        assert workers, descendants(proc.pid)
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        try:

            def crypto_down() -> bool:
                got = requests.get(f"{base}/readyz", timeout=10)
                behind = got.json()["service"].get("behind") or [{}]
                return got.status_code == 503 and behind[0].get("name") == "crypto"

            _until("secrets listener unready while crypto is stopped", crypto_down, 30)
        finally:
            for pid in workers:
                os.kill(pid, signal.SIGCONT)
        _until(
            "secrets listener ready again",
            lambda: requests.get(f"{base}/readyz", timeout=10).status_code == 200,
            30,
        )
    finally:
        assert stop_process(proc, signal.SIGINT, 40) == 0

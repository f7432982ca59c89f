"""Supervision (issue 20 items 3-5): under `trellis dev`, `kill -9` of each service and of
nats-server, and the APIs come back with their data within 30 s; SIGTERM to `trellis server`
(also as PID 1 of a PID namespace) exits 0 and leaves no process behind; and the dev root token
works at the first 200 of sys/health."""

from __future__ import annotations

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
from pathlib import Path

import pytest
import requests

from services.dev_launch import popen_dev, stop_process
from services.supervisor import child_role, direct_children
from tests.conftest import free_port
from tests.job_helpers import one_task_job, raw_exec_task
from tests.procs import (
    ROOT,
    DevProcess,
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


def _until(what: str, check: Callable[[], bool], timeout: float) -> float:
    """Poll `check` (exceptions count as not yet); the seconds it took."""
    start = time.monotonic()
    last = ""
    while time.monotonic() - start < timeout:
        try:
            if check():
                print(f"{what}: {time.monotonic() - start:.1f}s")
                return time.monotonic() - start
        except (requests.RequestException, AssertionError, ValueError, KeyError) as exc:
            last = f"{type(exc).__name__}: {exc}"[:300]
        time.sleep(0.2)
    raise AssertionError(f"{what} not back within {timeout:.0f}s; last: {last}")


def _job(name: str) -> dict[str, object]:
    return {"Job": one_task_job(name, raw_exec_task("t", "/bin/true"))}


class Data:
    """A KV secret, a workspace, a job and a crypto-backed operation written before the kills,
    and the checks that they are all served again."""

    def __init__(self, d: DevProcess) -> None:
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
        for victim in ("secrets", "workspace", "scheduler", "crypto", "gateway", "client", "nats"):
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


def _in_flight(base: str) -> float:
    """Requests the gateway behind `base` is forwarding now (its Prometheus gauge)."""
    text = requests.get(f"{base}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('trellis_gateway_in_flight{api="scheduler"}')
    )


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _sigterm_leaves_nothing(argv: list[str], cfg: Path, ports: list[int], pid_one: bool) -> None:
    proc = start_server(cfg, *argv)
    family: set[int] = set()
    try:
        wait_http(f"http://127.0.0.1:{ports[0]}/v1/sys/health", ok=(501,))
        wait_http(f"http://127.0.0.1:{ports[1]}/api/v2/ping", ok=(200, 204))
        # Under `unshare --fork` the server is unshare's child (PID 1 of the new namespace).
        server = _child(proc.pid, "server") if pid_one else proc.pid
        if pid_one:
            nspid = next(
                line
                for line in Path(f"/proc/{server}/status").read_text().splitlines()
                if line.startswith("NSpid:")
            )
            assert nspid.split()[-1] == "1", nspid
        family = set(descendants(server))
        assert len(family) >= 6, family
        # A request in flight when SIGTERM arrives is drained (answered), not cut off: a
        # blocking query that waits 3 s.
        scheduler = f"http://127.0.0.1:{ports[2]}"
        drained: dict[str, object] = {}

        def blocking_query() -> None:
            try:
                r = requests.get(
                    f"{scheduler}/v1/jobs", params={"index": 10**9, "wait": "3s"}, timeout=30
                )
                drained["status"] = r.status_code
            except requests.RequestException as exc:
                drained["error"] = repr(exc)

        query = threading.Thread(target=blocking_query)
        query.start()
        _until("the blocking query in flight", lambda: _in_flight(scheduler) >= 1, 10)
        started = time.monotonic()
        os.kill(server, signal.SIGTERM)
        assert proc.wait(40) == 0
        assert time.monotonic() - started < 30
        query.join(30)
        assert drained.get("status") == 200, drained
        left = {p for p in family if alive(p)}
        assert not left, f"left behind: {[(p, child_role(p)) for p in left]}"
        assert not any(_listening(p) for p in ports)
    finally:
        _kill_all(proc, family)


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
        for api in ("workspace", "scheduler"):
            assert ready[api].status_code == 503, ready[api].text
            assert ready[api].json()["gateway"] is True
            assert ready[api].json()["service"]["ready"] is False
    finally:
        assert stop_process(proc, signal.SIGINT, 40) == 0

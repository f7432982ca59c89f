"""`trellis dev --gateways 2` and `trellis server` with `gateway_processes: 2`: two gateway
processes share each listener port (SO_REUSEPORT), both take connections, the APIs keep
answering while the supervisor restarts one killed with kill -9, a second `trellis dev` cannot
join the ports, and SIGTERM stops both and frees them. The server also runs the
`secrets_processes` it is given, each replica with its own instance id, and the
`crypto_processes`."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import uuid
from pathlib import Path

import pytest
import requests

from services.dev_launch import popen_dev
from services.supervisor import child_role, direct_children
from tests.procs import (
    alive,
    descendants,
    proc_state,
    server_config,
    start_dev,
    start_server,
    until,
    wait_http,
)

pytestmark = pytest.mark.e2e


def _answered(health: str) -> int:
    """Secrets API requests the gateway process with this health address answered (its own
    /metrics); -1 while nothing listens there."""
    try:
        text = requests.get(f"http://{health}/metrics", timeout=5).text
    except requests.ConnectionError:
        return -1
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith('trellis_gateway_requests_total{api="secrets"')
    )


def _health_addr(pid: int) -> str:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return argv[argv.index("--health-addr") + 1]


def _gateways(parent: int) -> dict[str, int]:
    """Each live gateway child by its health address (the same across its restarts)."""
    out = {}
    for pid in direct_children(parent):
        if child_role(pid) == "gateway" and proc_state(pid) not in ("", "Z"):
            out[_health_addr(pid)] = pid
    return out


def _instance_id(pid: int) -> str:
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(e.decode().split("=", 1)[1] for e in env if e.startswith(b"TRELLIS_INSTANCE_ID="))


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_two_gateways_share_the_ports_and_survive_kill_9(tmp_path: Path) -> None:
    d = start_dev("--services", "", "--gateways", "2")
    family: set[int] = set()
    try:
        line = next(x for x in d.output if x.startswith("Gateways:"))
        metrics = re.findall(r"http://(\S+)/metrics", line)
        assert len(metrics) == 2, line
        vault = {"X-Vault-Token": d.root_token}
        path = f"{d.secrets}/v1/secret/data/gw-{uuid.uuid4().hex[:8]}"
        value = uuid.uuid4().hex
        r = requests.post(path, headers=vault, json={"data": {"value": value}}, timeout=10)
        assert r.status_code == 200, r.text

        def read_ok() -> bool:
            # requests without a session: a new connection each time, hashed anew by the kernel.
            r = requests.get(path, headers=vault, timeout=10)
            assert r.status_code == 200, r.text
            return r.json()["data"]["data"]["value"] == value

        before = {addr: _answered(addr) for addr in metrics}

        def both_answer() -> bool:
            assert read_ok()
            return all(_answered(a) > before[a] for a in metrics)

        until(both_answer, 30, "requests answered by both gateway processes", interval=0)

        # kill -9 one gateway: once it is gone, every request is answered by the other while
        # the supervisor starts a new one in its place (same health address).
        def two() -> dict[str, int] | None:
            found = _gateways(d.proc.pid)  # the bootstrap's private gateway is gone by now
            return found if len(found) == 2 else None

        gateways = until(two, 30, "two gateway processes")
        assert set(gateways) == set(metrics), gateways
        victim_addr, victim = sorted(gateways.items())[0]
        os.kill(victim, signal.SIGKILL)
        # Reaped, not only a zombie: a zombie leader whose threads still exit holds its sockets.
        until(lambda: proc_state(victim) == "", 10, "the killed gateway reaped", 0.01)
        served_meanwhile = 0

        def replaced() -> bool:
            nonlocal served_meanwhile
            assert read_ok()
            served_meanwhile += 1
            new = _gateways(d.proc.pid).get(victim_addr)
            return new not in (None, victim) and _answered(victim_addr) > 0

        until(replaced, 30, "the restarted gateway answering requests", interval=0)
        assert served_meanwhile > 1
        said = (Path(d.data_dir) / "logs" / "supervisor.log").read_text()
        assert re.search(r"gateway(#2)? exited with -9", said), said

        # A second `trellis dev` of the same user cannot share the ports.
        ports = [int(u.rsplit(":", 1)[1]) for u in (d.secrets, d.workspace, d.scheduler)]
        second = popen_dev(
            ports, "--services", "", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        out, _ = second.communicate(timeout=60)
        assert second.returncode != 0
        assert f"127.0.0.1:{ports[0]}: address already in use" in out, out

        # SIGTERM stops both gateways (and everything else) and frees the ports.
        family = set(descendants(d.proc.pid))
        os.kill(d.proc.pid, signal.SIGTERM)
        assert d.proc.wait(40) == 0
        assert not [(p, child_role(p)) for p in family if alive(p)]
        assert not any(_listening(p) for p in ports)
    finally:
        if d.proc.poll() is None:
            d.stop()
        for p in family:
            if alive(p):
                os.kill(p, signal.SIGKILL)


def test_server_runs_the_configured_gateway_processes(nats_url: str, tmp_path: Path) -> None:
    cfg, ports = server_config(nats_url, tmp_path)
    cfg.write_text(
        cfg.read_text() + "gateway_processes: 2\nsecrets_processes: 2\ncrypto_processes: 2\n"
    )
    proc = start_server(cfg)
    family: set[int] = set()
    try:
        health = f"http://127.0.0.1:{ports[0]}/v1/sys/health"
        wait_http(health, ok=(501,))  # not initialised: each gateway answers it by itself
        gateways = until(lambda: len(_gateways(proc.pid)) == 2 and _gateways(proc.pid), 30)
        replicas = [p for p in direct_children(proc.pid) if child_role(p) == "secrets"]
        assert len(replicas) == 2, replicas
        # Each replica its own instance id (a lease holder) under the supervisor.
        assert len({_instance_id(p) for p in replicas}) == 2
        # The crypto service and the one more worker process it starts.
        (crypto,) = [p for p in direct_children(proc.pid) if child_role(p) == "crypto"]

        def second_worker() -> bool:
            return [child_role(p) for p in direct_children(crypto)] == ["crypto"]

        until(second_worker, 30, "a second crypto worker process")

        def both_answer() -> bool:
            assert requests.get(health, timeout=10).status_code == 501
            return all(_answered(addr) > 0 for addr in gateways)

        until(both_answer, 30, "requests answered by both gateway processes", interval=0)
        family = set(descendants(proc.pid))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(40) == 0
        assert not [(p, child_role(p)) for p in family if alive(p)]
        assert not any(_listening(p) for p in ports)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in family:
            if alive(p):
                os.kill(p, signal.SIGKILL)

"""`trellis dev` runs a secrets replica per usable CPU, up to two, by default: each has its own
instance id and log file, requests reach both, a write acknowledged by one is read back through
either, and a seal, an unseal or a key rotation made through one is seen by the next request on
either."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest
import requests

from services.supervisor import child_role, direct_children
from tests.procs import proc_state, start_dev, until

pytestmark = pytest.mark.e2e


def _health_addr(pid: int) -> str:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return argv[argv.index("--health-addr") + 1]


def _instance_id(pid: int) -> str:
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(e.decode().split("=", 1)[1] for e in env if e.startswith(b"TRELLIS_INSTANCE_ID="))


def _handled(health: str) -> int:
    """Secrets API requests this replica handled (its own /metrics)."""
    text = requests.get(f"http://{health}/metrics", timeout=5).text
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("trellis_bus_handled_total{") and 'subject="api.secrets"' in line
    )


def _sealed(health: str) -> bool | None:
    r = requests.get(f"http://{health}/readyz", timeout=5)
    return r.json().get("sealed")


def test_two_replicas_by_default_share_the_work_and_the_seal() -> None:
    expected = min(2, len(os.sched_getaffinity(0)))
    d = start_dev("--services", "", default_replicas=True)
    try:
        line = next(x for x in d.output if x.startswith("Secrets:"))
        assert re.fullmatch(rf"Secrets:\s+{expected} replicas?\n", line), line
        replicas = [
            p
            for p in direct_children(d.proc.pid)
            if child_role(p) == "secrets" and proc_state(p) not in ("", "Z")
        ]
        assert len(replicas) == expected, replicas
        # One lease holder and one log per replica, never shared.
        assert len({_instance_id(p) for p in replicas}) == expected
        logs = Path(d.data_dir) / "logs"
        names = ["secrets.log", "secrets#2.log"][:expected]
        assert all((logs / n).stat().st_size > 0 for n in names), list(logs.iterdir())
        health = [_health_addr(p) for p in replicas]

        vault = {"X-Vault-Token": d.root_token}
        path = f"{d.secrets}/v1/secret/data/replicas-{uuid.uuid4().hex[:8]}"
        before = {h: _handled(h) for h in health}
        written = 0

        def both_serve() -> bool:
            # A fresh write, then its read: each may reach either replica.
            nonlocal written
            written += 1
            w = requests.post(path, headers=vault, json={"data": {"n": written}}, timeout=10)
            assert w.status_code == 200, w.text
            r = requests.get(path, headers=vault, timeout=10)
            assert r.status_code == 200, r.text
            assert r.json()["data"]["data"] == {"n": written}
            return all(_handled(h) > before[h] for h in health)

        until(both_serve, 30, "requests handled by every secrets replica", interval=0)

        # Whichever replica answers the seal or the last share, the next request on either
        # replica sees it (a session: each request follows the last without a pause).
        with requests.Session() as http:
            for _ in range(5):
                r = http.put(f"{d.secrets}/v1/sys/seal", headers=vault, timeout=10)
                assert r.status_code == 204, r.text
                for _ in range(4):
                    r = http.get(path, headers=vault, timeout=10)
                    assert r.status_code == 503, r.text
                r = http.put(f"{d.secrets}/v1/sys/unseal", json={"key": d.unseal_key}, timeout=10)
                assert r.status_code == 200 and r.json()["sealed"] is False, r.text
                for _ in range(4):
                    r = http.get(path, headers=vault, timeout=10)
                    assert r.status_code == 200, r.text
                    assert r.json()["data"]["data"] == {"n": written}, r.text
            # A rotation made through one replica: every replica answers the new term next.
            status = f"{d.secrets}/v1/sys/key-status"
            term = http.get(status, headers=vault, timeout=10).json()["term"]
            for i in range(1, 4):
                r = http.post(f"{d.secrets}/v1/sys/rotate", headers=vault, timeout=10)
                assert r.status_code == 204, r.text
                for _ in range(4):
                    assert http.get(status, headers=vault, timeout=10).json()["term"] == term + i
        assert all(_sealed(h) is False for h in health)
    finally:
        d.stop()

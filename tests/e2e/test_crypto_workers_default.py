"""`trellis dev` runs a crypto worker per usable CPU, up to two, by default: a worker runs one
op at a time, so PKI issue with RSA keys (key generation) on one worker used one core of two.
Checked on the session's `trellis dev`: the worker processes under its crypto service, and that
RSA issues reach every one of them (a worker that never receives an RSA request spends no CPU
on RSA keys: its key pool starts filling only after a request asks for that size)."""

from __future__ import annotations

import os
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from bench._bus_pair import cpu_seconds
from services.supervisor import child_role, direct_children
from tests.procs import DevProcess, proc_state, until

pytestmark = pytest.mark.e2e


def _workers(dev_pid: int) -> list[int]:
    """The crypto service's process and the worker processes it started."""
    services = [p for p in direct_children(dev_pid) if child_role(p) == "crypto"]
    assert len(services) == 1, services
    extra = [p for p in direct_children(services[0]) if child_role(p) == "crypto"]
    return [p for p in (services[0], *extra) if proc_state(p) not in ("", "Z")]


def test_a_crypto_worker_per_cpu_and_rsa_issues_reach_each(trellis_dev: DevProcess) -> None:
    d = trellis_dev
    expected = min(2, len(os.sched_getaffinity(0)))
    workers = _workers(d.proc.pid)
    assert len(workers) == expected, workers

    vault = {"X-Vault-Token": d.root_token}
    mount = f"pki-workers-{uuid.uuid4().hex[:8]}"
    r = requests.post(f"{d.secrets}/v1/sys/mounts/{mount}", headers=vault, json={"type": "pki"})
    assert r.status_code == 204, r.text
    r = requests.post(
        f"{d.secrets}/v1/{mount}/root/generate/internal",
        headers=vault,
        json={"common_name": "workers root", "key_type": "ec", "ttl": "24h"},
    )
    assert r.status_code == 200, r.text
    role = {"key_type": "rsa", "key_bits": 2048, "allow_any_name": True, "no_store": True}
    r = requests.post(f"{d.secrets}/v1/{mount}/roles/rsa", headers=vault, json=role)
    assert r.status_code in (200, 204), r.text

    before = {p: cpu_seconds(p) for p in workers}
    issued: list[str] = []

    def issue(i: int) -> None:
        r = requests.post(
            f"{d.secrets}/v1/{mount}/issue/rsa",
            headers=vault,
            json={"common_name": f"leaf{i}.example.com", "ttl": "1h"},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        assert "BEGIN CERTIFICATE" in r.json()["data"]["certificate"]
        issued.append(r.json()["data"]["serial_number"])

    def every_worker_worked() -> bool:
        # Four at once, so that a busy worker leaves the next to another.
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(issue, range(len(issued), len(issued) + 4)))
        # A tenth of a second of CPU each: an RSA-2048 key is tens of milliseconds.
        return all(cpu_seconds(p) - before[p] >= 0.1 for p in workers)

    until(every_worker_worked, 60, "RSA issues served by every crypto worker", interval=0)
    assert len(set(issued)) == len(issued)

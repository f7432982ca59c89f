"""Two `trellis dev` instances become DR primary and secondary with three API calls, and the
primary's writes show up on the secondary (last_remote_wal, merkle_root) within a second. Then
the primary's whole process tree is killed (SIGKILL) and the secondary, promoted with an
operation token made from the primary's unseal key and no unseal call, serves the primary's
data to the primary's root token: the failover across real processes."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from typing import Any

import pytest
import requests

from services.replication import otp
from tests.openbao import bao_binary
from tests.procs import DevProcess, alive, descendants, dev, until

pytestmark = pytest.mark.e2e

DR = "/v1/sys/replication/dr/"


def call(base: str, method: str, path: str, token: str = "", **kw: Any) -> tuple[int, Any]:
    r = requests.request(
        method, base + path, headers={"X-Vault-Token": token} if token else {}, timeout=30, **kw
    )
    return r.status_code, (r.json() if r.content else None)


def test_two_dev_instances_pair_and_stream() -> None:
    with dev("--services", "replication") as a, dev("--services", "replication") as b:
        code, body = call(a.secrets, "POST", DR + "primary/enable", a.root_token, json={})
        assert code in (200, 204), body
        code, body = call(
            a.secrets, "POST", DR + "primary/secondary-token", a.root_token, json={"id": "dr-b"}
        )
        assert code == 200, body
        activation = body["wrap_info"]["token"]
        code, body = call(
            b.secrets, "POST", DR + "secondary/enable", b.root_token, json={"token": activation}
        )
        assert code == 200, body

        for i in range(5):
            code, _ = call(
                a.secrets, "POST", f"/v1/secret/data/app{i}", a.root_token, json={"data": {"i": i}}
            )
            assert code == 200
        _, primary = call(a.secrets, "GET", DR + "status")
        started = time.monotonic()
        deadline = started + 10
        while True:
            _, secondary = call(b.secrets, "GET", DR + "status")
            if (
                secondary["data"]["last_remote_wal"] >= primary["data"]["last_wal"]
                and secondary["data"]["merkle_root"] == primary["data"]["merkle_root"]
            ):
                break
            assert time.monotonic() < deadline, (primary, secondary)
            time.sleep(0.05)
        assert time.monotonic() - started < 1.0
        assert secondary["data"]["mode"] == "secondary"
        assert secondary["data"]["state"] == "stream-wals"
        # The secondary serves no client requests.
        code, body = call(b.secrets, "GET", "/v1/secret/data/app1", a.root_token)
        assert code == 400 and body["errors"]
        # ...but `bao status` prints its whole state (sys/leader too): sealed, as it holds no
        # usable key before promotion, which the CLI's exit code 2 says.
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(b.data_dir), "BAO_ADDR": b.secrets}
        st = subprocess.run(
            [bao_binary(), "status"], env=env, capture_output=True, text=True, timeout=60
        )
        assert st.returncode == 2 and not st.stderr, (st.stdout, st.stderr)
        assert re.search(r"^Sealed\s+true$", st.stdout, re.M), st.stdout
        assert re.search(r"^HA Enabled\s+false$", st.stdout, re.M), st.stdout

        fail_over(a, b)


def fail_over(a: DevProcess, b: DevProcess) -> None:
    """Kill every process of the primary; promote the secondary without unsealing it."""
    data_dir = a.data_dir
    tree = [a.proc.pid, *descendants(a.proc.pid)]
    for pid in tree:
        os.kill(pid, signal.SIGKILL)
    a.proc.wait()
    until(lambda: not any(alive(pid) for pid in tree), 30, "the primary's processes gone")
    shutil.rmtree(data_dir, ignore_errors=True)

    def cut_off() -> bool:
        _, status = call(b.secrets, "GET", DR + "status")
        return status["data"]["primaries"][0]["connection_status"] == "disconnected"

    until(cut_off, 30, "the secondary to see its primary gone", interval=0.05)
    code, body = call(b.secrets, "GET", "/v1/sys/seal-status")
    assert code == 200 and body["sealed"] is True, body  # no usable key before promotion
    gen = DR + "secondary/generate-operation-token/"
    code, att = call(b.secrets, "POST", gen + "attempt", json={})
    assert code == 200, att
    code, done = call(
        b.secrets, "POST", gen + "update", json={"key": a.unseal_key, "nonce": att["nonce"]}
    )
    assert code == 200 and done["complete"] is True, done
    token = otp.decode(done["encoded_token"], att["otp"])
    code, body = call(
        b.secrets, "POST", DR + "secondary/promote", json={"dr_operation_token": token}
    )
    assert code == 200 and body["complete"] is True and not body.get("warnings"), body

    def served() -> Any:
        code, body = call(b.secrets, "GET", "/v1/secret/data/app1", a.root_token)
        return body if code == 200 else None

    body = until(served, 30, "the promoted secondary to serve the primary's token", 0.05)
    assert body["data"]["data"] == {"i": 1}
    code, body = call(b.secrets, "GET", "/v1/sys/seal-status")
    assert code == 200 and body["sealed"] is False, body
    _, status = call(b.secrets, "GET", DR + "status")
    assert status["data"]["mode"] == "primary", status

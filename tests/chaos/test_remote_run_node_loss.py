"""Chaos: the client node running a remote run's apply dies mid-apply (kill -9 of the client
agent and every process it started, as when the machine goes). The run must end `errored`
with a message that says what happened, its workspace must unlock, and no state version may
claim the apply. And a cancel mid-apply: terraform is interrupted as by Ctrl-C, finishes what
it is doing, and the run ends `canceled` only then. The apply is held mid-flight
deterministically: the configuration reads two `terraform_remote_state`s (http backend) from a
server in this test, which answers the plan's read and holds the apply's (the second one's
address holds `timestamp()`, unknown until the apply, so only the apply of the saved plan
reads it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from services.supervisor import child_role, direct_children
from tests.procs import DevProcess, descendants, until
from tests.terraform_helpers import Api, Tf, create_org, grant, team_with_token, tls_dev, workspace

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

STATE = (
    b'{"version":4,"terraform_version":"1.0.3","serial":1,"lineage":"x",'
    b'"outputs":{},"resources":[]}'
)


class HeldState:
    """An http state backend whose GETs wait until the test lets each one through."""

    def __init__(self) -> None:
        self.arrived = threading.Semaphore(0)
        self.release = threading.Semaphore(0)
        self.closing = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.arrived.release()
                while not outer.release.acquire(timeout=0.5):
                    if outer.closing.is_set():
                        break
                with contextlib.suppress(OSError):  # a killed reader is gone
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(STATE)))
                    self.end_headers()
                    self.wfile.write(STATE)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()


@pytest.fixture(scope="module")
def trellis() -> Iterator[DevProcess]:
    """One `trellis dev` for the module: the cancel test first, the node kill last."""
    with tls_dev() as d:
        create_org(Api(d), d.root_token)
        yield d


def held_apply(
    trellis: DevProcess, tmp_path: Path, name: str, held: HeldState
) -> tuple[Api, str, str, subprocess.Popen[str], dict[str, Any]]:
    """`terraform apply -auto-approve` in a new workspace, up to the apply's held read:
    the API, the workspace id, a token, the CLI's process and the run (applying)."""
    api = Api(trellis)
    admin = trellis.root_token
    host = f"localhost:{urlsplit(trellis.workspace).port}"
    ws = workspace(api, admin, name)
    team, token = team_with_token(api, admin, f"ops-{name}")
    grant(api, admin, team, ws, "write")
    tf = Tf(tmp_path, name, host, token, trellis.ca_file)
    base = f"http://127.0.0.1:{held.port}"
    tf.write(
        name,
        f"""data "terraform_remote_state" "planned" {{
  backend = "http"
  config = {{
    address = "{base}/planned"
  }}
}}
data "terraform_remote_state" "slow" {{
  backend = "http"
  config = {{
    address = "{base}/slow?at=${{timestamp()}}"
  }}
}}
output "done" {{
  value = "yes"
}}
""",
    )
    tf.run("init", "-input=false", "-no-color")
    cli = subprocess.Popen(
        ["terraform", "apply", "-auto-approve", "-input=false", "-no-color"],
        cwd=tf.dir,
        env=tf.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # The plan reads the first remote state: let it through.
    assert held.arrived.acquire(timeout=120), "the plan never read the remote state"
    held.release.release()
    # The apply reads the second: now the apply job is running on the client node.
    assert held.arrived.acquire(timeout=120), "the apply never started"
    runs = api.ok("GET", f"/workspaces/{ws}/runs", token)["data"]
    assert runs[0]["attributes"]["status"] == "applying", runs[0]
    return api, ws, token, cli, runs[0]


def ended(api: Api, token: str, run_id: str) -> dict[str, Any]:
    def final() -> dict[str, Any] | None:
        doc = api.ok("GET", f"/runs/{run_id}", token)["data"]["attributes"]
        return doc if doc["status"] not in ("applying", "apply_queued") else None

    return until(final, 90, "the run to end")


@dataclass
class Applying:
    """A `terraform apply` held at its state read: what the tests act on."""

    api: Api
    ws: str
    token: str
    run: dict[str, Any]
    held: HeldState


@contextlib.contextmanager
def applying(trellis: DevProcess, tmp_path: Path, name: str) -> Iterator[Applying]:
    """`held_apply`, then the CLI killed (if still running) and the held backend closed."""
    held = HeldState()
    cli: subprocess.Popen[str] | None = None
    try:
        api, ws, token, cli, run = held_apply(trellis, tmp_path, name, held)
        yield Applying(api, ws, token, run, held)
        out, _ = cli.communicate(timeout=120)
        assert cli.returncode != 0, out  # the CLI reports the run did not apply
    finally:
        if cli is not None and cli.poll() is None:
            cli.kill()
            cli.wait()
        held.close()


def test_cancel_during_apply_interrupts_terraform(trellis: DevProcess, tmp_path: Path) -> None:
    with applying(trellis, tmp_path, "cancel") as a:
        api, ws, token, run, held = a.api, a.ws, a.token, a.run, a.held
        api.ok("POST", f"/runs/{run['id']}/actions/cancel", token, None, 202)
        # The run holds on until terraform stopped: its apply log shows the interrupt.
        apply_id = run["relationships"]["apply"]["data"]["id"]
        url = api.ok("GET", f"/applies/{apply_id}", token)["data"]["attributes"]["log-read-url"]

        def interrupted() -> bool:
            log = requests.get(url, verify=trellis.ca_file, timeout=10).content
            return b"Interrupt received" in log

        until(interrupted, 60, "terraform to receive the interrupt")
        doc = api.ok("GET", f"/runs/{run['id']}", token)["data"]["attributes"]
        assert doc["status"] == "applying" and doc["actions"]["is-cancelable"] is False
        assert api.ok("GET", f"/workspaces/{ws}", token)["data"]["attributes"]["locked"] is True
        held.release.release()  # the read in flight finishes; terraform halts after it
        done = ended(api, token, run["id"])
        assert done["status"] == "canceled", done
        assert "force-canceled-at" not in done["status-timestamps"]
        apply = api.ok("GET", f"/applies/{apply_id}", token)["data"]["attributes"]
        assert apply["status"] == "canceled", apply
        log = requests.get(url, verify=trellis.ca_file, timeout=10).content
        assert b"Gracefully shutting down" in log and log.endswith(b"\x03"), log
        assert api.ok("GET", f"/workspaces/{ws}", token)["data"]["attributes"]["locked"] is False


def test_force_cancel_kills_the_apply_at_once(trellis: DevProcess, tmp_path: Path) -> None:
    """force-cancel ends the run and frees the workspace at once, and its task is killed
    (SIGKILL), not left the graceful stop's two minutes."""
    with applying(trellis, tmp_path, "force") as a:
        api, ws, token, run = a.api, a.ws, a.token, a.run
        api.ok("POST", f"/runs/{run['id']}/actions/force-cancel", token, None, 202)
        doc = api.ok("GET", f"/runs/{run['id']}", token)["data"]["attributes"]
        assert doc["status"] == "canceled" and "force-canceled-at" in doc["status-timestamps"]
        assert api.ok("GET", f"/workspaces/{ws}", token)["data"]["attributes"]["locked"] is False
        job = f"{trellis.scheduler}/v1/job/trellis-{run['id']}-apply/allocations"

        def killed() -> bool:
            allocs = requests.get(job, verify=trellis.ca_file, timeout=10).json()
            return all(a["ClientStatus"] != "running" for a in allocs)

        # Well within the kill timeout a plain stop would wait for (120 s).
        until(killed, 30, "the apply task to be killed")


def test_client_node_dies_during_apply(trellis: DevProcess, tmp_path: Path) -> None:
    """Last in the module: the dev's client node does not come back."""
    with applying(trellis, tmp_path, "app") as a:
        api, ws, token, run = a.api, a.ws, a.token, a.run
        (client,) = [p for p in direct_children(trellis.proc.pid) if child_role(p) == "client"]
        for pid in [client, *descendants(client)]:
            os.kill(pid, signal.SIGKILL)
        done = ended(api, token, run["id"])
        assert done["status"] == "errored", done
        message = done["error-message"] or ""
        assert "apply" in message and ("lost" in message or "died" in message), message
        wsdoc = api.ok("GET", f"/workspaces/{ws}", token)["data"]
        assert wsdoc["attributes"]["locked"] is False
        assert wsdoc["relationships"]["current-run"]["data"] is None
        apply_id = run["relationships"]["apply"]["data"]["id"]
        apply = api.ok("GET", f"/applies/{apply_id}", token)["data"]["attributes"]
        assert apply["status"] == "errored", apply
        # Nothing was applied: no state version names this run.
        status, _ = api.call("GET", f"/workspaces/{ws}/current-state-version", token)
        assert status == 404

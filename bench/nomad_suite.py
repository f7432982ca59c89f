"""python-nomad's own tests, run as its CI runs them (`pytest tests/` with NOMAD_IP, NOMAD_PORT,
NOMAD_VERSION and NOMAD_TOKEN set), against `trellis dev --acl` on this machine: prints the pass
count and every test that did not pass.

    python bench/nomad_suite.py --nomad-src /tmp/pynomad [--out /tmp/nomad-suite] [-k EXPR]

`--nomad-src` is python-nomad's source tree at the tag of the installed python-nomad (`pip show
python-nomad`); its tests import the package from that tree, the same code. Its CI writes
`example.nomad` and `example.json` into the tree from `nomad init`'s job, whose task runs on
Docker; Trellis's client has no Docker driver, so this writes a job of the same shape (service
`example`, group `cache`, task `redis`) with its task on `mock_driver`, turned into JSON by
Trellis's own `/v1/jobs/parse`. Test dependencies go into a venv beside the results, never into
the project's environment. docs/scheduler-day-two.md says what fails and why."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import trellis_dev  # noqa: E402
from bench.hvac_suite import ensure_venv, listing, outcomes, summary  # noqa: E402

# python-nomad's test-only dependencies (requirements-dev.txt, without coverage and docs; a flaky
# that loads under pytest 8).
TEST_DEPS = ["flaky>=3.8", "responses>=0.22", "mock>=4"]
# The newest Nomad of python-nomad 2.1.0's CI matrix: its tests skip what older ones lack.
NOMAD_VERSION = "1.9.5"

EXAMPLE_JOB = """
job "example" {
  datacenters = ["dc1"]
  type        = "service"

  group "cache" {
    network {
      port "db" {
        to = 6379
      }
    }

    task "redis" {
      driver = "mock_driver"

      config {
        run_for = "3600s"
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
"""


def write_example(src: Path, scheduler: str, token: str) -> None:
    """example.nomad and example.json in the tree, as python-nomad's CI makes them."""
    (src / "example.nomad").write_text(EXAMPLE_JOB)
    r = requests.post(
        f"{scheduler}/v1/jobs/parse",
        json={"JobHCL": EXAMPLE_JOB, "Canonicalize": True},
        headers={"X-Nomad-Token": token},
        timeout=30,
    )
    r.raise_for_status()
    (src / "example.json").write_text(json.dumps({"Job": r.json()}, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nomad-src", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("/tmp/nomad-suite"))
    parser.add_argument("-k", dest="select", default=None, help="pytest -k expression")
    args = parser.parse_args()
    src = args.nomad_src.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    python = ensure_venv(args.out / "venv", TEST_DEPS)
    junit = args.out / "trellis.xml"
    with trellis_dev("--acl") as dev:
        write_example(src, dev.scheduler, dev.root_token)
        host, port = dev.scheduler.rsplit("//", 1)[1].split(":")
        env = {
            **os.environ,
            "NOMAD_IP": host,
            "NOMAD_PORT": port,
            "NOMAD_VERSION": NOMAD_VERSION,
            "NOMAD_TOKEN": dev.root_token,  # `trellis dev --acl` bootstrapped the ACLs
        }
        argv = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q", "--runxfail"]
        argv += [f"--junitxml={junit}", "tests/"]
        if args.select:
            argv += ["-k", args.select]
        with open(args.out / "trellis.log", "w") as log:
            subprocess.run(argv, cwd=src, env=env, stdout=log, stderr=subprocess.STDOUT)
    results = outcomes(junit)
    print(summary("trellis", results))
    failed = sorted(t for t, v in results.items() if v == "failed")
    print(listing("not passed", failed), end="")
    print(f"log and JUnit XML in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

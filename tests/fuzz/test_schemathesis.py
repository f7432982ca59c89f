"""schemathesis against all three APIs through a live gateway: the documents Trellis serves
(secrets `sys/internal/specs/openapi`, workspace `/api/v2/openapi.json`, scheduler
`/v1/openapi.json`), every phase including stateful `links`, and one check: no 5xx (a 503 while
sealed aside). CI runs a bounded pass; TRELLIS_FUZZ_LONG=1 runs >= 5,000 cases per API.

The CLI runs as a subprocess so that the in-process cluster keeps serving on this event loop."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
import schemathesis  # noqa: F401 - a test dependency; fails loudly if missing

from tests.fuzz.cluster import FuzzTarget, start_target

pytestmark = [pytest.mark.nats, pytest.mark.asyncio(loop_scope="module")]

ROOT = Path(__file__).resolve().parents[2]
LONG = os.environ.get("TRELLIS_FUZZ_LONG") == "1"
SEED = os.environ.get("TRELLIS_FUZZ_SEED", "1")
LONG_MIN_CASES = 5000
# --max-time makes fuzzing and stateful phases repeat until it is spent, so time sets the count.
LONG_SECONDS = int(os.environ.get("TRELLIS_FUZZ_LONG_SECONDS", "600"))

# Operations that would end the run rather than test it: sealing, stepping down, revoking the
# root token the run authenticates with, and turning this cluster into a DR primary/secondary
# (a secondary serves no client requests). Each is covered by its own integration test.
SECRETS_EXCLUDE = (
    r"^/sys/(seal|step-down)$"
    r"|^/sys/replication/dr/(primary|secondary)/"
    r"|^/auth/token/revoke-self$"
    r"|^/sys/(leases/)?revoke-(prefix|force)/"
)
# The event stream never ends by design (its own e2e test reads it): a fuzz request would wait.
SCHEDULER_EXCLUDE = r"^(/v1)?/event/stream$"


@dataclass(frozen=True)
class Api:
    name: str
    schema_path: str  # where the gateway serves the document
    base_path: str  # what the document's paths are relative to
    ci_seconds: int  # --max-time in CI; the three sum to ~66 s (TRELLIS_FUZZ_LONG=1 for depth)
    ci_examples: int
    long_examples: int


APIS = [
    Api("secrets", "/v1/sys/internal/specs/openapi", "/v1", 26, 10, 60),
    Api("workspace", "/api/v2/openapi.json", "", 20, 15, 150),
    Api("scheduler", "/v1/openapi.json", "", 20, 15, 200),
]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def target(nats_url: str) -> AsyncIterator[FuzzTarget]:
    t = await start_target(nats_url)
    yield t
    await t.close()


def _command(api: Api, t: FuzzTarget, report_dir: Path) -> list[str]:
    url = {"secrets": t.secrets_url, "workspace": t.workspace_url, "scheduler": t.scheduler_url}[
        api.name
    ]
    cmd = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        url + api.schema_path,
        "--url",
        url + api.base_path,
        "--checks",
        "trellis_no_server_error",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--seed",
        SEED,
        "--max-examples",
        str(api.long_examples if LONG else api.ci_examples),
        "--report",
        "junit",
        "--report-dir",
        str(report_dir),
        "--request-timeout",
        "30",
        "--no-color",
    ]
    cmd += ["--max-time", str(LONG_SECONDS if LONG else api.ci_seconds)]
    if api.name == "secrets":
        cmd += ["-H", f"X-Vault-Token: {t.cluster.root_token}"]
        cmd += ["--exclude-path-regex", SECRETS_EXCLUDE]
    elif api.name == "workspace":
        cmd += ["-H", f"Authorization: Bearer {t.admin_token}"]
        config = report_dir.parent / "schemathesis.toml"
        config.write_text(seeded_ids_config(t.ids))
        cmd[3:3] = ["--config-file", str(config)]  # an option of schemathesis, not of `run`
    elif api.name == "scheduler":
        cmd += ["--exclude-path-regex", SCHEDULER_EXCLUDE]
    return cmd


# Operations whose `{id}` (and `{var}`) name a seeded object of the example workspace
# (tests/fuzz/cluster.py): without them every case of these would be a 404 on a made-up id.
# DELETEs are left out, so that they cannot remove what the others need.
SEEDED = {
    "workspace": (
        "createStateVersion",
        "currentStateVersion",
        "currentStateVersionOutputs",
        "listWorkspaceVars",
        "createWorkspaceVar",
        "listWorkspaceVarsets",
    ),
    "state-version": ("showStateVersion", "downloadStateVersion", "listStateVersionOutputs"),
    "output": ("showStateVersionOutput",),
    "var": ("updateVar",),
}


def seeded_ids_config(ids: dict[str, str]) -> str:
    """schemathesis.toml: fixed path parameters for the operations of SEEDED."""
    blocks = [
        f"[[operations]]\ninclude-operation-id = {list(ops)!r}\n"
        f'parameters = {{ "path.id" = "{ids[kind]}" }}\n'
        for kind, ops in SEEDED.items()
    ]
    blocks.append(
        '[[operations]]\ninclude-operation-id = "updateWorkspaceVar"\n'
        f'parameters = {{ "path.id" = "{ids["workspace"]}", "path.var" = "{ids["var"]}" }}\n'
    )
    return "\n".join(blocks)


async def _run(cmd: list[str], cwd: Path) -> tuple[int, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SCHEMATHESIS_HOOKS": "tests.fuzz.hooks",
        "COLUMNS": "200",
    }
    # cwd is a temp dir: schemathesis keeps its example database (.hypothesis) there.
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


def _cases(output: str) -> int:
    m = re.search(r"(\d+) generated", output)
    return int(m.group(1)) if m else 0


@pytest.mark.timeout(7200 if LONG else 300)
@pytest.mark.parametrize("api", APIS, ids=[a.name for a in APIS])
async def test_no_server_errors(api: Api, target: FuzzTarget, tmp_path: Path) -> None:
    started = time.monotonic()
    code, output = await _run(_command(api, target, tmp_path / "report"), tmp_path)
    cases = _cases(output)
    elapsed = time.monotonic() - started
    print(f"\nschemathesis {api.name}: {cases} cases in {elapsed:.0f}s, exit {code}")
    tail = output[-6000:]
    assert code == 0, f"schemathesis found failures in the {api.name} API:\n{tail}"
    assert cases > 0, tail
    if LONG:
        assert cases >= LONG_MIN_CASES, f"only {cases} cases ran:\n{tail}"

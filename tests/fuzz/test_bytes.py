"""Byte-level fuzzing of every operation of the three OpenAPI documents Trellis serves, through a
live gateway: each body broken as tests/fuzz/mutations.py breaks it (truncation, invalid UTF-8,
lone surrogates, deep nesting, huge and non-finite numbers, duplicate keys, huge strings, wrong
content types, empty). No answer may be a 5xx, and every 4xx must be in its API's error shape.

schemathesis (test_schemathesis.py) sends schema-shaped JSON only; this suite sends the bytes
it never does. CI runs every crafted case on each operation that takes a body and a few blind
random mutants per operation (seconds); TRELLIS_FUZZ_LONG=1 runs every case on every operation
and 1,000 random mutants each (TRELLIS_FUZZ_RANDOM sets how many, TRELLIS_FUZZ_SEED which)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from services.crypto.service import CryptoService
from shared.bus import Bus
from tests.fuzz.cluster import EXAMPLE_JOB, EXAMPLE_ORG, FuzzTarget, start_target
from tests.fuzz.mutations import Case, Operation, cases, operations, random_cases, sample
from tests.fuzz.test_schemathesis import SCHEDULER_EXCLUDE, SECRETS_EXCLUDE

pytestmark = [pytest.mark.nats, pytest.mark.asyncio(loop_scope="module")]

LONG = os.environ.get("TRELLIS_FUZZ_LONG") == "1"
SEED = int(os.environ.get("TRELLIS_FUZZ_SEED", "1"))
# CI: every crafted case on every operation that takes a body, a few on each other operation,
# and a few blind random mutants per operation. Long mode: everything everywhere, and many
# more random mutants.
CI_OTHERS = 4
RANDOM_PER_OP = int(os.environ.get("TRELLIS_FUZZ_RANDOM", "1000" if LONG else "8"))
IN_FLIGHT = 8
PKI_MOUNT = "pki"
FUZZ = "fuzz"  # every other path parameter: a name that exists (role) or harmlessly does not


@dataclass
class Finding:
    op: str
    case: str
    status: int
    body: bytes

    def __str__(self) -> str:
        return f"{self.status} {self.op} [{self.case}]: {self.body[:200]!r}"


@dataclass
class Api:
    name: str
    url: str
    doc_path: str
    prefix: str  # what the document's paths are relative to
    headers: dict[str, str]
    examples: dict[str, str] = field(default_factory=dict)
    exclude: re.Pattern[str] | None = None


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def target(nats_url: str) -> AsyncIterator[FuzzTarget]:
    t = await start_target(nats_url)
    # PKI hands certificate work to a crypto worker: without one, those paths answer 503.
    bus = await Bus.connect(t.cluster.settings.nats_url, name="fuzz-crypto")
    t.cluster.buses.append(bus)
    worker = CryptoService(bus, t.cluster.settings)
    await worker.start()
    t.cluster.extra.append(worker)
    # A PKI mount and role, so that its paths (pki/issue/<role>, issue 20) are in the document.
    h = {"X-Vault-Token": t.cluster.root_token}
    async with aiohttp.ClientSession(headers=h) as s:
        url = t.secrets_url + "/v1/"
        async with s.post(url + f"sys/mounts/{PKI_MOUNT}", json={"type": "pki"}) as r:
            assert r.status in (200, 204), await r.text()
        role = {"allow_any_name": True, "max_ttl": "1h"}
        async with s.post(url + f"{PKI_MOUNT}/roles/{FUZZ}", json=role) as r:
            assert r.status in (200, 204), await r.text()
        # And transit, so that its key, encrypt and sign paths are fuzzed too.
        async with s.post(url + "sys/mounts/transit", json={"type": "transit"}) as r:
            assert r.status in (200, 204), await r.text()
    yield t
    await t.close()


async def _workspace_id(t: FuzzTarget) -> str:
    url = f"{t.workspace_url}/api/v2/organizations/{EXAMPLE_ORG}/workspaces/my-workspace"
    async with (
        aiohttp.ClientSession() as s,
        s.get(url, headers={"Authorization": f"Bearer {t.admin_token}"}) as r,
    ):
        assert r.status == 200, await r.text()
        return (await r.json(content_type=None))["data"]["id"]


def _apis(t: FuzzTarget, ws_id: str) -> list[Api]:
    return [
        Api(
            "secrets",
            t.secrets_url,
            "/v1/sys/internal/specs/openapi",
            "/v1",
            {"X-Vault-Token": t.cluster.root_token},
            exclude=re.compile(SECRETS_EXCLUDE),
        ),
        Api(
            "workspace",
            t.workspace_url,
            "/api/v2/openapi.json",
            "",
            {"Authorization": f"Bearer {t.admin_token}"},
            {
                "org": EXAMPLE_ORG,
                "name": "my-workspace",
                "workspace-id": ws_id,
                "state-version-id": t.ids["state-version"],
                "var-id": t.ids["var"],
                "var": t.ids["var"],
            },
        ),
        Api(
            "scheduler",
            t.scheduler_url,
            "/v1/openapi.json",
            "",
            {},
            {"job-id": EXAMPLE_JOB},
            exclude=re.compile(SCHEDULER_EXCLUDE),
        ),
    ]


def _examples(api: Api) -> Any:
    """Path parameters that must name real objects for a body to be read at all. `{id}` names
    a different kind of object on each path: the workspace's, the seeded state version's and
    variable's (tests/fuzz/cluster.py) and the job's are known.
    DELETE gets none, so that it cannot remove what the other operations need."""

    def fill(template: str, method: str) -> dict[str, str]:
        if method == "DELETE":
            return {}
        ex = dict(api.examples)
        if template.startswith("/api/v2/workspaces/{id}"):
            ex["id"] = ex["workspace-id"]
        elif template.startswith("/api/v2/state-versions/{id}"):
            ex["id"] = ex["state-version-id"]
        elif template.startswith("/api/v2/vars/{id}"):
            ex["id"] = ex["var-id"]
        elif template.startswith("/v1/job/{id}"):
            ex["id"] = ex["job-id"]
        return ex

    return fill


def _failed_batch(doc: Any) -> bool:
    results = (doc.get("data") or {}).get("batch_results") if isinstance(doc, dict) else None
    return (
        isinstance(results, list)
        and bool(results)
        and all(isinstance(r, dict) for r in results)
        and any(isinstance(r.get("error"), str) and r["error"] for r in results)
    )


def error_shape_problem(api: str, status: int, headers: Any, body: bytes) -> str | None:
    """Why a 4xx body is not in `api`'s error shape, or None when it is."""
    if api == "scheduler":
        ctype = headers.get("Content-Type", "")
        return None if ctype.startswith("text/plain") and body else f"not plain text: {ctype!r}"
    try:
        doc = json.loads(body)
    except ValueError:
        return "not JSON"
    if api == "secrets" and status == 400 and _failed_batch(doc):
        return None  # Vault's answer to a batch whose items failed: each says why in place
    if not isinstance(doc, dict) or not isinstance(doc.get("errors"), list):
        return "no errors list"
    if api == "secrets":
        ok = all(isinstance(e, str) for e in doc["errors"])
        return None if ok else "errors are not strings"
    errs = doc["errors"]
    if not errs or not all(isinstance(e, dict) and e.get("status") == str(status) for e in errs):
        return "JSON:API error objects need status as a string equal to the HTTP status"
    return None


async def _send(s: aiohttp.ClientSession, api: Api, op: Operation, case: Case) -> Finding | None:
    headers = dict(api.headers)
    if case.content_type is not None:
        headers["Content-Type"] = case.content_type
    url = api.url + api.prefix + op.path
    async with s.request(
        op.method,
        url,
        data=case.body,
        headers=headers,
        skip_auto_headers=("Content-Type",),
        allow_redirects=False,
    ) as r:
        body = await r.read()
        if r.status >= 500:
            return Finding(op.name, case.name, r.status, body)
        if r.status >= 400 and op.method != "HEAD":
            problem = error_shape_problem(api.name, r.status, r.headers, body)
            if problem:
                return Finding(op.name, case.name, r.status, f"{problem}: ".encode() + body)
    return None


def _plan(api: Api, doc: dict[str, Any]) -> list[tuple[Operation, Case]]:
    rng = random.Random(f"{SEED}-{api.name}")
    plan = []
    for i, op in enumerate(operations(api.name, doc, _examples(api), api.exclude)):
        base = sample(doc, op.schema) if op.schema else {"fuzz": "x"}
        every = list(cases(base, op.content_type))
        if LONG or op.schema is not None:
            plan += [(op, case) for case in every]
        else:  # no body in the document: a rotating few still probe it
            plan += [(op, every[(i * CI_OTHERS + k) % len(every)]) for k in range(CI_OTHERS)]
        plan += [(op, c) for c in random_cases(base, op.content_type, rng, RANDOM_PER_OP)]
    return plan


@pytest.mark.timeout(7200 if LONG else 240)
async def test_no_server_errors_and_errors_in_shape(target: FuzzTarget) -> None:
    ws_id = await _workspace_id(target)
    findings: list[Finding] = []
    slowest: list[tuple[float, str]] = []
    total = 0
    started = time.monotonic()
    sem = asyncio.Semaphore(IN_FLIGHT)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        for api in _apis(target, ws_id):
            async with s.get(api.url + api.doc_path, headers=api.headers) as r:
                assert r.status == 200, await r.text()
                doc = await r.json(content_type=None)
            plan = _plan(api, doc)
            t0 = time.monotonic()
            assert plan, f"no operations in the {api.name} document"

            async def one(op: Operation, case: Case, api: Api = api) -> None:
                async with sem:
                    t1 = time.monotonic()
                    try:
                        found = await _send(s, api, op, case)
                    except TimeoutError:  # a hang is a finding too, named like the others
                        found = Finding(op.name, case.name, 0, b"no answer within 60 s")
                    slowest.append((time.monotonic() - t1, f"{op.name} [{case.name}]"))
                if found:
                    findings.append(found)

            await asyncio.gather(*(one(op, case) for op, case in plan))
            ops = len({op.name for op, _ in plan})
            print(
                f"\n{api.name}: {len(plan)} cases on {ops} operations, {time.monotonic() - t0:.1f}s"
            )
            total += len(plan)
    print(f"{total} cases in {time.monotonic() - started:.0f}s; the slowest:")
    for took, what in sorted(slowest, reverse=True)[:8]:
        print(f"  {took * 1000:6.0f} ms  {what}")
    assert not findings, f"{len(findings)} findings:\n" + "\n".join(map(str, findings[:40]))

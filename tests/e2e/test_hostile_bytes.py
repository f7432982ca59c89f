"""Hostile bytes through `trellis dev` (issue 20, item 1): every body below on each API is a 4xx
in that API's error shape with a message saying what is wrong, a lone surrogate written to
each API reads back as U+FFFD (as OpenBao stores it in KV), and `OPTIONS *`, `CONNECT` and
`TRACE` get an answer below 500 on every listener. Bodies and request lines go out on raw
sockets: HTTP clients refuse to send some of them. (test_supervision.py sends some of them to
`trellis server`.)"""

from __future__ import annotations

import json
import socket
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest

from tests.openbao import OpenBao
from tests.procs import DevProcess

pytestmark = pytest.mark.e2e

DEEP_ARRAY = b"[" * 10_000 + b"]" * 10_000
DEEP_OBJECT = b'{"a":' * 10_000 + b"1" + b"}" * 10_000


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> object:
        return json.loads(self.body)


def raw_request(base: str, head: bytes, body: bytes = b"", timeout: float = 30.0) -> Reply:
    """Send `head` (request line and headers, no blank line) and `body` as given; read one
    response (the request says Connection: close)."""
    u = urlsplit(base)
    with socket.create_connection((u.hostname, u.port), timeout=timeout) as s:
        s.sendall(head + b"\r\nConnection: close\r\n\r\n" + body)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    data = b"".join(chunks)
    top, _, rest = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if "content-length" in headers:
        rest = rest[: int(headers["content-length"])]
    return Reply(status, headers, rest)


def post(base: str, path: str, body: bytes, ctype: str, token: str) -> Reply:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: trellis\r\nX-Vault-Token: {token}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(body)}"
    ).encode()
    return raw_request(base, head, body)


@pytest.fixture(scope="module")
def trellis(trellis_dev: DevProcess) -> DevProcess:
    """The session's `trellis dev` (every body here is refused: nothing is left behind but a
    KV secret, an organization, a job and a PKI mount, each of a unique name)."""
    return trellis_dev


# --- secrets: OpenBao's words, `{"errors": [...]}` ---

DECODE = "failed to decode JSON input"
COMPLEX = "refused JSON input due to high complexity"

SECRETS_BODIES = [
    ("infinity", b'{"ttl": Infinity}', DECODE),
    ("nan", b'{"ttl": NaN}', DECODE),
    ("1e999", b'{"ttl": 1e999}', DECODE),
    ("invalid-utf8", b'{"display_name": "\xff\xfe"}', DECODE),
    ("truncated", b'{"ttl": "1h"', DECODE),
    ("trailing", b'{"ttl": "1h"} x', DECODE),
    ("deep-array", DEEP_ARRAY, COMPLEX),
    ("deep-object", DEEP_OBJECT, COMPLEX),
    ("not-an-object", b"[1, 2]", DECODE),
    ("ttl-overflow", b'{"ttl": 9999999999999}', "ttl"),
    ("num-uses-overflow", b'{"num_uses": 9223372036854775808}', "num_uses"),
]


def _secrets_error(r: Reply, words: str) -> None:
    assert 400 <= r.status < 500, (r.status, r.body[:300])
    doc = r.json()
    assert isinstance(doc, dict) and isinstance(doc["errors"], list), doc
    assert any(words in e for e in doc["errors"]), doc


@pytest.mark.parametrize(
    ("body", "words"), [c[1:] for c in SECRETS_BODIES], ids=[c[0] for c in SECRETS_BODIES]
)
def test_token_create_refuses(trellis: DevProcess, body: bytes, words: str) -> None:
    r = post(trellis.secrets, "/v1/auth/token/create", body, "application/json", trellis.root_token)
    _secrets_error(r, words)


@pytest.fixture(scope="module")
def pki_role(trellis: DevProcess) -> str:
    mount = f"pki-{uuid.uuid4().hex[:8]}"
    token = trellis.root_token
    r = post(
        trellis.secrets, f"/v1/sys/mounts/{mount}", b'{"type": "pki"}', "application/json", token
    )
    assert r.status in (200, 204), r.body
    role = b'{"allow_any_name": true, "max_ttl": "1h"}'
    r = post(trellis.secrets, f"/v1/{mount}/roles/web", role, "application/json", token)
    assert r.status in (200, 204), r.body
    return f"/v1/{mount}/issue/web"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"common_name": "a.test", "ttl": Infinity}', DECODE),
        (b'{"common_name": "a.test", "ttl": 1e999}', DECODE),
        (b'{"common_name": "a.test", "ttl": -Infinity}', DECODE),
        (b'{"common_name": "\xc0\xaf"}', DECODE),
        (DEEP_OBJECT, COMPLEX),
    ],
    ids=["infinity", "1e999", "-infinity", "invalid-utf8", "deep"],
)
def test_pki_issue_refuses(trellis: DevProcess, pki_role: str, body: bytes, words: str) -> None:
    r = post(trellis.secrets, pki_role, body, "application/json", trellis.root_token)
    _secrets_error(r, words)


def test_kv_lone_surrogate_reads_back_as_replacement_character(trellis: DevProcess) -> None:
    path = f"/v1/secret/data/hostile-{uuid.uuid4().hex[:8]}"
    body = b'{"data": {"a": "x\\ud800y", "b": "\\udc00", "pair": "\\ud83d\\ude00"}}'
    r = post(trellis.secrets, path, body, "application/json", trellis.root_token)
    assert r.status in (200, 204), r.body
    head = f"GET {path} HTTP/1.1\r\nHost: trellis\r\nX-Vault-Token: {trellis.root_token}".encode()
    got = raw_request(trellis.secrets, head)
    assert got.status == 200, got.body
    data = got.json()["data"]["data"]  # type: ignore[index]
    assert data == {"a": "x\ufffdy", "b": "\ufffd", "pair": "\U0001f600"}


# The same bytes to the real OpenBao dev server and to Trellis: the same status and the same
# opening words. (Where they differ on purpose: invalid UTF-8, which OpenBao reads as U+FFFD
# and Trellis refuses, and a 10,000-deep array, which OpenBao calls a decode failure.)
ORACLE_BODIES = [
    ("infinity", b'{"ttl": Infinity}'),
    ("nan", b'{"ttl": NaN}'),
    ("1e999", b'{"ttl": 1e999}'),
    ("-1e999", b'{"ttl": -1e999}'),
    ("truncated", b'{"ttl": "1h"'),
    ("trailing", b'{"ttl": "1h"} x'),
    ("not-an-object", b"[1, 2]"),
    ("deep-object", DEEP_OBJECT),
]


def _first_error(r: Reply) -> str:
    errors = r.json()["errors"]  # type: ignore[index]
    return errors[0] if errors else ""


@pytest.mark.parametrize("body", [c[1] for c in ORACLE_BODIES], ids=[c[0] for c in ORACLE_BODIES])
def test_secrets_answers_as_openbao(trellis: DevProcess, openbao: OpenBao, body: bytes) -> None:
    ours = post(
        trellis.secrets, "/v1/auth/token/create", body, "application/json", trellis.root_token
    )
    theirs = post(openbao.addr, "/v1/auth/token/create", body, "application/json", openbao.token)
    assert ours.status == theirs.status == 400, (ours.body[:200], theirs.body[:200])
    # OpenBao's opening words; what follows is each decoder's own detail.
    want = _first_error(theirs).split(":")[0]
    assert want and _first_error(ours).startswith(want), (ours, theirs)


def test_lone_surrogates_read_back_as_openbao_stores_them(
    trellis: DevProcess, openbao: OpenBao
) -> None:
    name = f"surrogate-{uuid.uuid4().hex[:8]}"
    body = b'{"data": {"a": "x\\ud800y", "b": "\\udfff", "c": "\\ud83d\\ude00"}}'
    got = []
    for base, token in ((trellis.secrets, trellis.root_token), (openbao.addr, openbao.token)):
        r = post(base, f"/v1/secret/data/{name}", body, "application/json", token)
        assert r.status in (200, 204), r.body
        head = f"GET /v1/secret/data/{name} HTTP/1.1\r\nHost: x\r\nX-Vault-Token: {token}"
        got.append(raw_request(base, head.encode()).json()["data"]["data"])  # type: ignore[index]
    assert got[0] == got[1] == {"a": "x\ufffdy", "b": "\ufffd", "c": "\U0001f600"}


# --- workspace: JSON:API error objects, status as a string ---

WS_BODIES = [
    ("infinity", b'{"data": {"type": "organizations", "attributes": {"n": Infinity}}}', "'I'"),
    ("nan", b'{"data": {"type": "organizations", "attributes": {"n": NaN}}}', "'N'"),
    (
        "1e999",
        b'{"data": {"type": "organizations", "attributes": {"n": 1e999}}}',
        "a number is out",
    ),
    (
        "wide-int",
        b'{"data": {"type": "organizations", "attributes": {"n": 1' + b"0" * 30 + b"}}}",
        "64-bit",
    ),
    (
        "invalid-utf8",
        b'{"data": {"type": "organizations", "attributes": {"name": "\xff"}}}',
        "invalid UTF-8",
    ),
    ("deep-array", DEEP_ARRAY, "nested deeper than"),
    ("deep-object", DEEP_OBJECT, "nested deeper than"),
]


@pytest.mark.parametrize(
    ("body", "words"), [c[1:] for c in WS_BODIES], ids=[c[0] for c in WS_BODIES]
)
def test_workspace_refuses(trellis: DevProcess, body: bytes, words: str) -> None:
    ctype = "application/vnd.api+json"
    r = post(trellis.workspace, "/api/v2/organizations", body, ctype, trellis.root_token)
    assert r.status == 422, (r.status, r.body[:300])  # TFC: a malformed body is a 422
    err = r.json()["errors"][0]  # type: ignore[index]
    assert err["status"] == "422"
    assert err["detail"].startswith("malformed JSON: ") and words in err["detail"], err


def test_workspace_lone_surrogate_reads_back_as_replacement_character(
    trellis: DevProcess,
) -> None:
    ctype = "application/vnd.api+json"
    org = f"hostile-{uuid.uuid4().hex[:8]}"
    body = b'{"data": {"type": "organizations", "attributes": {"name": "%s", "email": "a@b.test"}}}'
    r = post(
        trellis.workspace, "/api/v2/organizations", body % org.encode(), ctype, trellis.root_token
    )
    assert r.status == 201, r.body
    attrs = b'{"name": "w", "description": "x\\ud800y\\udc00"}'
    ws = b'{"data": {"type": "workspaces", "attributes": %s}}' % attrs
    r = post(
        trellis.workspace, f"/api/v2/organizations/{org}/workspaces", ws, ctype, trellis.root_token
    )
    assert r.status == 201, r.body
    head = (
        f"GET /api/v2/organizations/{org}/workspaces/w HTTP/1.1\r\nHost: trellis\r\n"
        f"Authorization: Bearer {trellis.root_token}"
    )
    got = raw_request(trellis.workspace, head.encode())
    assert got.status == 200, got.body
    assert got.json()["data"]["attributes"]["description"] == "x\ufffdy\ufffd"  # type: ignore[index]


# --- scheduler: Nomad's plain-text errors ---

SCHED_BODIES = [
    ("infinity", b'{"Job": {"ID": "x", "Priority": Infinity}}', "'I'"),
    ("1e999", b'{"Job": {"ID": "x", "Priority": 1e999}}', "out of range"),
    ("wide-int", b'{"Job": {"ID": "x", "Priority": 1' + b"0" * 30 + b"}}", "64-bit"),
    ("invalid-utf8", b'{"Job": {"ID": "\xff\xfe"}}', "invalid UTF-8"),
    ("deep-array", DEEP_ARRAY, "nested deeper than"),
    ("deep-object", DEEP_OBJECT, "nested deeper than"),
    ("truncated", b'{"Job": {"ID": "x"', "truncated"),
]


@pytest.mark.parametrize(
    ("body", "words"), [c[1:] for c in SCHED_BODIES], ids=[c[0] for c in SCHED_BODIES]
)
@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/jobs/parse", "/v1/job/x"])
def test_scheduler_refuses(trellis: DevProcess, path: str, body: bytes, words: str) -> None:
    r = post(trellis.scheduler, path, body, "application/json", trellis.root_token)
    assert r.status == 400, (r.status, r.body[:300])
    assert r.headers["content-type"].startswith("text/plain")
    assert r.body.startswith(b"Failed to decode request body: "), r.body[:300]
    assert words.encode() in r.body, r.body[:300]


def test_scheduler_lone_surrogate_reads_back_as_replacement_character(
    trellis: DevProcess,
) -> None:
    name = f"hostile-{uuid.uuid4().hex[:8]}"
    job = {
        "Job": {
            "ID": name,
            "Type": "batch",
            "Datacenters": ["dc1"],
            "Meta": {"a": "@A@", "pair": "@PAIR@"},
            "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "mock", "Config": {}}]}],
        }
    }
    # json.dumps would write the surrogate escapes itself; put the raw escapes in.
    body = json.dumps(job).replace("@A@", "x\\ud800y").replace("@PAIR@", "\\ud83d\\ude00").encode()
    r = post(trellis.scheduler, "/v1/jobs", body, "application/json", trellis.root_token)
    assert r.status == 200, r.body
    head = f"GET /v1/job/{name} HTTP/1.1\r\nHost: trellis\r\nX-Nomad-Token: {trellis.root_token}"
    got = raw_request(trellis.scheduler, head.encode())
    assert got.status == 200, got.body
    assert got.json()["Meta"] == {"a": "x\ufffdy", "pair": "\U0001f600"}  # type: ignore[index]


# --- request lines: never a 500, on any listener ---

LISTENERS = ["secrets", "workspace", "scheduler"]


@pytest.mark.parametrize("listener", LISTENERS)
@pytest.mark.parametrize(
    "line",
    [
        b"OPTIONS * HTTP/1.1",
        b"CONNECT 127.0.0.1:22 HTTP/1.1",
        b"CONNECT /v1/sys/health HTTP/1.1",
        b"TRACE /v1/sys/health HTTP/1.1",
        b"TRACE / HTTP/1.1",
        b"FROB /v1/jobs HTTP/1.1",
    ],
    ids=["options-star", "connect-authority", "connect-path", "trace", "trace-root", "unknown"],
)
def test_odd_request_lines_answer_below_500(
    trellis: DevProcess, listener: str, line: bytes
) -> None:
    base = getattr(trellis, listener)
    token = trellis.root_token.encode()
    r = raw_request(base, line + b"\r\nHost: trellis\r\nX-Vault-Token: " + token)
    assert r.status < 500, (r.status, r.body[:300])
    if line.startswith(b"OPTIONS *"):
        assert r.status == 200  # as OpenBao (Go's net/http) answers it
        return
    assert token not in r.body  # TRACE must not echo the request back
    if listener == "secrets" and b" 127.0.0.1:22 " in line:
        assert r.status == 404  # OpenBao: no such path
    else:
        # OpenBao answers 405; Nomad and TFC would, and say what is allowed.
        assert r.status == 405, (r.status, r.body[:300])
        assert "GET" in r.headers["allow"] and line.split()[0].decode() not in r.headers["allow"]
    if listener == "secrets":
        assert isinstance(r.json()["errors"], list)  # type: ignore[index]
    elif listener == "workspace":
        assert r.json()["errors"][0]["status"] == str(r.status)  # type: ignore[index]
    else:
        assert r.headers["content-type"].startswith("text/plain") and r.body


@pytest.mark.parametrize("listener", LISTENERS)
@pytest.mark.parametrize(
    "head",
    [
        b"G@T-secret-token /v1/sys/health HTTP/1.1\r\nHost: trellis",
        b"GET /v1/sys/health HTTP/1.1 secret-token\r\nHost: trellis",
        b"GET /v1/sys/health HTTP/1.1\r\nHost: trellis\r\nX-Big: " + b"secret-token" * 1000,
        b"GET /v1/sys/health HTTP/1.1\r\nHost: trellis\r\nBad Header secret-token: 1",
    ],
    ids=["bad-method-token", "bad-request-line", "header-too-long", "bad-header-name"],
)
def test_malformed_request_lines_are_refused_in_the_api_shape(
    trellis: DevProcess, listener: str, head: bytes
) -> None:
    r = raw_request(getattr(trellis, listener), head)
    assert r.status == 400, (r.status, r.body[:300])
    assert b"secret-token" not in r.body  # the request is not quoted back
    if listener == "secrets":
        assert r.json()["errors"][0].startswith("malformed HTTP request")  # type: ignore[index]
    elif listener == "workspace":
        assert r.json()["errors"][0]["status"] == "400"  # type: ignore[index]
    else:
        assert r.body.startswith(b"malformed HTTP request")

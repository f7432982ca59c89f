"""/v1/client/fs/stream through the gateway: Nomad's framed file stream (base64 `Data`, `File`,
`Offset`, `FileEvent` on truncation and deletion), followed by default, with plain HTTP and
python-nomad. The test writes the streamed file itself, in the allocation's directory on disk,
so each append, truncation and deletion happens exactly when it says."""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nomad
import pytest
import requests

from tests.job_helpers import task_python
from tests.procs import DevProcess, start_dev, until

pytestmark = pytest.mark.e2e

REL = "alloc/streamed.txt"
SLEEPER = "import time\ntime.sleep(600)"


@pytest.fixture(scope="module")
def d() -> Iterator[DevProcess]:
    proc = start_dev("--services", "scheduler,client")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def alloc_id(d: DevProcess) -> str:
    n = nomad.Nomad(address=d.scheduler, token=d.root_token, timeout=40)
    job_id = f"stream-{uuid.uuid4().hex[:8]}"
    task = {
        "Name": "t",
        "Driver": "raw_exec",
        "Config": {"command": task_python(), "args": ["-c", SLEEPER]},
        "Resources": {"CPU": 50, "MemoryMB": 32},
    }
    group = {"Name": "g", "Count": 1, "Tasks": [task]}
    spec = {"ID": job_id, "Type": "service", "Datacenters": ["dc1"], "TaskGroups": [group]}
    # The banner can come before the scheduler replica answers.
    until(lambda: get_path(d, "/v1/jobs").status_code == 200, what="the scheduler to answer")
    n.jobs.register_job({"Job": spec})

    def running() -> Any:
        live = [a for a in n.job.get_allocations(job_id) if a["ClientStatus"] == "running"]
        return live[0]["ID"] if live else None

    return str(until(running, what=f"a running alloc of {job_id}"))


def get_path(d: DevProcess, path: str) -> requests.Response:
    return requests.get(d.scheduler + path, headers={"X-Nomad-Token": d.root_token}, timeout=60)


def on_disk(d: DevProcess, alloc_id: str) -> Path:
    """Where the streamed file is on disk: under the dev client node's data dir."""
    path = Path(d.data_dir, "client", "alloc", alloc_id, REL)
    until(path.parent.is_dir, what="the shared alloc dir")
    return path


def url(d: DevProcess, alloc_id: str) -> str:
    return f"{d.scheduler}/v1/client/fs/stream/{alloc_id}"


def get(d: DevProcess, alloc_id: str, **params: Any) -> requests.Response:
    headers = {"X-Nomad-Token": d.root_token}
    return requests.get(url(d, alloc_id), params=params, headers=headers, timeout=60)


def parse(text: str) -> list[dict[str, Any]]:
    """Nomad's frames, back to back, heartbeats ({}) left out."""
    frames, dec, i = [], json.JSONDecoder(), 0
    while i < len(text):
        frame, i = dec.raw_decode(text, i)
        if frame:
            frames.append(frame)
    return frames


def frames_of(r: requests.Response) -> Iterator[dict[str, Any]]:
    """Each frame of a streamed response as soon as it has fully arrived."""
    buf, dec = "", json.JSONDecoder()
    for chunk in r.iter_content(chunk_size=None):
        buf += chunk.decode()
        while buf:
            try:
                frame, end = dec.raw_decode(buf)
            except json.JSONDecodeError:
                break  # the rest of this frame is still on its way
            buf = buf[end:]
            if frame:
                yield frame


def data(frame: dict[str, Any]) -> bytes:
    return base64.b64decode(frame.get("Data", ""))


def test_read_without_follow(d: DevProcess, alloc_id: str) -> None:
    path = on_disk(d, alloc_id)
    body = f"hello {uuid.uuid4().hex}\n".encode()
    path.write_bytes(body)
    r = get(d, alloc_id, path=REL, follow="false")
    assert r.status_code == 200, r.text
    (frame,) = parse(r.text)
    assert data(frame) == body
    assert frame["File"] == REL and frame["Offset"] == len(body) and "FileEvent" not in frame
    tail = get(d, alloc_id, path=REL, follow="false", origin="end", offset=3, plain="true")
    assert tail.status_code == 200 and tail.content == body[-3:]
    skipped = get(d, alloc_id, path=REL, follow="false", offset=6)
    assert b"".join(data(f) for f in parse(skipped.text)) == body[6:]


def test_follow_sees_appends_truncation_and_deletion(d: DevProcess, alloc_id: str) -> None:
    path = on_disk(d, alloc_id)
    first, more, after = b"first line\n", f"appended {uuid.uuid4().hex}\n".encode(), b"x\n"
    path.write_bytes(first)
    headers = {"X-Nomad-Token": d.root_token}
    with requests.get(
        url(d, alloc_id), params={"path": REL}, headers=headers, stream=True, timeout=60
    ) as r:
        assert r.status_code == 200
        frames = frames_of(r)
        got = next(frames)
        assert data(got) == first and got["Offset"] == len(first)
        with path.open("ab") as f:  # appended while the stream is open
            f.write(more)
        got = next(frames)
        assert data(got) == more and got["Offset"] == len(first) + len(more)
        path.write_bytes(after)  # shorter than what was read: a truncation
        assert next(frames).get("FileEvent") == "file truncated"
        got = next(frames)
        while not data(got):  # the emptied file may be read before the new line is in
            got = next(frames)
        assert data(got) == after and got["Offset"] == len(after)
        path.unlink()
        gone = next(frames)
        assert gone["FileEvent"] == "file deleted" and gone["File"] == REL
        assert list(frames) == []  # deletion ends the stream


def test_python_nomad_stream_file(d: DevProcess, alloc_id: str) -> None:
    path = on_disk(d, alloc_id)
    body = f"via python-nomad {uuid.uuid4().hex}\n".encode()
    path.write_bytes(body)
    # python-nomad follows (Nomad's default) and returns the text once the stream ends: its
    # response hook says when the answer began, i.e. the file has been read once.
    opened = threading.Event()
    session = requests.Session()
    session.hooks["response"].append(lambda r, *a, **kw: opened.set())
    n = nomad.Nomad(address=d.scheduler, token=d.root_token, timeout=40, session=session)
    out: dict[str, str] = {}
    reader = threading.Thread(
        target=lambda: out.update(text=n.client.stream_file.stream(alloc_id, 0, "start", REL))
    )
    reader.start()
    until(opened.is_set, what="the stream to open")
    path.unlink()
    reader.join(60)
    assert not reader.is_alive()
    frames = parse(out["text"])
    assert b"".join(data(f) for f in frames) == body
    assert frames[-1]["FileEvent"] == "file deleted"


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({}, 400),  # no path
        ({"path": REL, "origin": "middle"}, 400),
        ({"path": REL, "offset": "-1"}, 400),
        ({"path": REL, "offset": str(2**63), "follow": "false"}, 400),  # beyond int64
        ({"path": REL, "follow": "maybe"}, 400),
        ({"path": "../../etc/passwd"}, 400),
        ({"path": "alloc/../../x"}, 400),
        ({"path": "alloc/no-such-file"}, 404),
        ({"path": "alloc", "follow": "false"}, 400),  # a directory
    ],
)
def test_bad_input_is_a_4xx(
    d: DevProcess, alloc_id: str, params: dict[str, str], status: int
) -> None:
    r = get(d, alloc_id, **params)
    assert r.status_code == status, (params, r.status_code, r.text)


def test_unknown_allocation_is_404(d: DevProcess) -> None:
    headers = {"X-Nomad-Token": d.root_token}
    r = requests.get(
        f"{d.scheduler}/v1/client/fs/stream/{uuid.uuid4()}",
        params={"path": REL},
        headers=headers,
        timeout=60,
    )
    assert r.status_code == 404

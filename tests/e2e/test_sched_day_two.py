"""Issue 17 through a real `trellis dev` and python-nomad (unmodified) plus raw HTTP: logs and
files, plan, scale, revert, dispatch, periodic force, allocation stop, search, drain, GC, and
re-registering an unchanged job."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from unittest import mock

import nomad
import pytest
import requests

from shared.localnet import free_port
from tests.job_helpers import node_data_dir, task_python
from tests.procs import ROOT, DevProcess, start_dev, until, wait_node_ready

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def d() -> Iterator[DevProcess]:
    # Task tokens renewed every 2 s instead of every minute, for the renewal to be seen.
    with mock.patch.dict(os.environ, {"TRELLIS_SCHEDULER_TASK_TOKEN_RENEW": "2"}):
        proc = start_dev()
    try:
        wait_node_ready(proc)
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def n(d: DevProcess) -> nomad.Nomad:
    return nomad.Nomad(address=d.scheduler, token=d.root_token, timeout=40)


def http(d: DevProcess, method: str, path: str, **kw: Any) -> requests.Response:
    headers = {"X-Nomad-Token": d.root_token}
    return requests.request(method, d.scheduler + path, headers=headers, timeout=60, **kw)


def task(name: str, script: str, **extra: Any) -> dict[str, Any]:
    return {
        "Name": name,
        "Driver": "raw_exec",
        "Config": {"command": task_python(), "args": ["-c", script]},
        "Resources": {"CPU": 50, "MemoryMB": 32},
        **extra,
    }


def job(job_id: str, tasks: list[dict[str, Any]], *, kind: str = "batch", count: int = 1, **kw):
    return {
        "ID": job_id,
        "Name": job_id,
        "Type": kind,
        "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": count, "Tasks": tasks}],
        **kw,
    }


def allocs_of(n: nomad.Nomad, job_id: str) -> list[dict[str, Any]]:
    return n.job.get_allocations(job_id)


def running(n: nomad.Nomad, job_id: str, count: int = 1) -> list[dict[str, Any]]:
    def check() -> Any:
        live = [a for a in allocs_of(n, job_id) if a["ClientStatus"] == "running"]
        return live if len(live) == count else None

    try:
        return until(check, what=f"{count} running allocs of {job_id}")
    except AssertionError:
        states = [(a["ClientStatus"], a.get("TaskStates")) for a in allocs_of(n, job_id)]
        raise AssertionError(f"{count} running allocs of {job_id}: {states}") from None


SLEEPER = "import time\nprint('up', flush=True)\ntime.sleep(600)"


def test_reregister_unchanged_job_keeps_version(n: nomad.Nomad) -> None:
    spec = job("same", [task("t", SLEEPER)], kind="service")
    first = n.jobs.register_job({"Job": spec})
    running(n, "same")  # the summary now carries queued counts the spec doesn't have
    again = n.jobs.register_job({"Job": spec})
    assert again["JobModifyIndex"] == first["JobModifyIndex"]
    assert n.job.get_job("same")["Version"] == 0
    assert len(n.job.get_versions("same")["Versions"]) == 1


def test_logs_read_followed_and_files(d: DevProcess, n: nomad.Nomad) -> None:
    script = (
        "import sys, time\n"
        "for i in range(30):\n"
        "    print(f'line {i}', flush=True)\n"
        "    time.sleep(0.2)\n"
        "print('oops', file=sys.stderr, flush=True)\n"
    )
    n.jobs.register_job({"Job": job("logs", [task("w", script)])})
    alloc = until(lambda: (allocs_of(n, "logs") or [None])[0], what="an alloc")
    until(lambda: allocs_of(n, "logs")[0]["ClientStatus"] == "running", what="running")
    # Followed while it writes: the first lines arrive while the task still runs, and the
    # stream ends when the task is done, holding every line.
    url = f"{d.scheduler}/v1/client/fs/logs/{alloc['ID']}"
    params = {"task": "w", "type": "stdout", "follow": "true", "plain": "true"}
    headers = {"X-Nomad-Token": d.root_token}
    with requests.get(url, params=params, headers=headers, stream=True, timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        assert next(lines) == b"line 0"
        assert allocs_of(n, "logs")[0]["ClientStatus"] == "running"  # still writing
        rest = [line.decode() for line in lines]
    assert rest == [f"line {i}" for i in range(1, 30)]
    followed = n.client.stream_logs.stream(alloc["ID"], "w", "stdout", follow=True, plain=True)
    assert followed.splitlines() == [f"line {i}" for i in range(30)]
    # Nomad's framed JSON by default: base64 data with file and offset.
    framed = http(
        d, "GET", f"/v1/client/fs/logs/{alloc['ID']}", params={"task": "w", "type": "stderr"}
    )
    assert framed.status_code == 200, framed.text
    frame = json.loads(framed.text)
    assert base64.b64decode(frame["Data"]) == b"oops\n"
    assert frame["File"] == "alloc/logs/w.stderr.0"
    tail = n.client.stream_logs.stream(
        alloc["ID"], "w", "stdout", origin="end", offset=8, plain=True
    )
    assert tail == "line 29\n"
    listing = n.client.ls.list_files(alloc["ID"], "alloc/logs")
    assert {f["Name"] for f in listing} >= {"w.stdout.0", "w.stderr.0"}
    assert n.client.cat.read_file(alloc["ID"], "alloc/logs/w.stderr.0") == "oops\n"
    st = n.client.stat.stat_file(alloc["ID"], "alloc/logs/w.stdout.0")
    assert st["Size"] == len(followed) and not st["IsDir"]
    part = n.client.read_at.read_file_offset(alloc["ID"], 5, 1, "alloc/logs/w.stdout.0")
    assert part == "0"
    # Confined to the allocation's directory.
    for bad in ("../../", "alloc/../../x", "/../client-id"):
        r = http(d, "GET", f"/v1/client/fs/cat/{alloc['ID']}", params={"path": bad})
        assert r.status_code in (400, 403), (bad, r.status_code)
    r = http(d, "GET", f"/v1/client/fs/logs/{alloc['ID']}", params={"task": "w", "type": "x"})
    assert r.status_code == 400
    for bad_query in ({"offset": str(2**63)}, {"offset": "1" * 5000}):
        query = {"task": "w", "type": "stdout", **bad_query}
        r = http(d, "GET", url[len(d.scheduler) :], params=query)
        assert r.status_code == 400, r.text
    big = f"{'9' * 19}:0"  # a followed read's position, sent back by the gateway: checked too
    for position in ("x", "1:", big, "-1:0"):
        resume = {**headers, "X-Sched-Log-Resume": position}
        r = requests.get(url, params={**params, "follow": "false"}, headers=resume, timeout=60)
        assert r.status_code == 400, (position, r.status_code)
    http_readat = {"path": "alloc/logs/w.stdout.0", "offset": str(2**63), "limit": "1"}
    r = http(d, "GET", f"/v1/client/fs/readat/{alloc['ID']}", params=http_readat)
    assert r.status_code == 400
    assert http(d, "GET", "/v1/client/fs/ls/nope", params={"path": "/"}).status_code == 404


MIB = 1024 * 1024
ROTATED_LINES = 440_000  # 8 bytes each: 3.36 MiB, four 1 MiB files of which two are kept
ROTATING = f"""
import signal, sys, time
signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGUSR1}})
print("ready", flush=True)
signal.sigwait({{signal.SIGUSR1}})  # the test is following by then
for i in range({ROTATED_LINES}):
    sys.stdout.write(f"{{i:07d}}\\n")
    if i % 8192 == 8191:
        sys.stdout.flush()
        time.sleep(0.06)
sys.stdout.flush()
"""


def test_log_rotation_while_followed(d: DevProcess, n: nomad.Nomad) -> None:
    logs = {"MaxFiles": 2, "MaxFileSizeMB": 1}
    n.jobs.register_job({"Job": job("rotating", [task("w", ROTATING, LogConfig=logs)])})
    [alloc] = running(n, "rotating")
    expected = b"ready\n" + b"".join(b"%07d\n" % i for i in range(ROTATED_LINES))
    url = f"{d.scheduler}/v1/client/fs/logs/{alloc['ID']}"
    params = {"task": "w", "type": "stdout", "follow": "true", "plain": "true"}
    headers = {"X-Nomad-Token": d.root_token}
    # Followed from the first byte while the task writes and its files rotate under the
    # reader: one contiguous stream, nothing skipped when the oldest file is deleted.
    with requests.get(url, params=params, headers=headers, stream=True, timeout=120) as r:
        assert r.status_code == 200
        chunks = r.iter_content(chunk_size=None)
        got = b""
        while b"ready\n" not in got:
            got += next(chunks)
        n.client.allocation.signal_allocation(alloc["ID"], "SIGUSR1", task="w")
        got += b"".join(chunks)
    assert len(got) == len(expected) and got == expected
    # Only the newest max_files are kept, each full one max_file_size, 0600.
    listing = {f["Name"]: f for f in n.client.ls.list_files(alloc["ID"], "alloc/logs")}
    kept = sorted(name for name in listing if name.startswith("w.stdout."))
    assert kept == ["w.stdout.2", "w.stdout.3"]
    assert listing["w.stdout.2"]["Size"] == MIB
    assert {listing[k]["FileMode"] for k in kept} == {"-rw-------"}
    # A read from the start begins at the oldest kept byte and crosses into the newest file.
    whole = n.client.stream_logs.stream(alloc["ID"], "w", "stdout", plain=True)
    assert whole.encode() == expected[2 * MIB :]
    framed = http(d, "GET", url[len(d.scheduler) :], params={"task": "w", "type": "stdout"})
    files = [json.loads(f)["File"] for f in framed.text.replace("}{", "}\n{").splitlines()]
    assert files[0] == "alloc/logs/w.stdout.2" and files[-1] == "alloc/logs/w.stdout.3"
    tail = n.client.stream_logs.stream(
        alloc["ID"], "w", "stdout", origin="end", offset=16, plain=True
    )
    assert tail.encode() == expected[-16:]


def test_plan_scale_and_revert(d: DevProcess, n: nomad.Nomad) -> None:
    spec = job("web", [task("t", SLEEPER)], kind="service", count=1)
    # Room for the destructive update beside the two new placements (the rolling limit).
    spec["TaskGroups"][0]["Update"] = {"MaxParallel": 3, "MinHealthyTime": 0}
    n.jobs.register_job({"Job": spec})
    running(n, "web")
    changed = json.loads(json.dumps(spec))
    changed["TaskGroups"][0]["Count"] = 3
    changed["TaskGroups"][0]["Tasks"][0]["Env"] = {"V": "2"}
    before = n.job.get_job("web")["Version"]
    plan = n.job.plan_job("web", {"Job": changed}, diff=True)
    assert n.job.get_job("web")["Version"] == before  # nothing written
    updates = plan["Annotations"]["DesiredTGUpdates"]["g"]
    assert updates["Place"] == 2 and updates["DestructiveUpdate"] == 1, updates
    group = plan["Diff"]["TaskGroups"][0]
    count = next(f for f in group["Fields"] if f["Name"] == "Count")
    assert (count["Old"], count["New"], count["Annotations"]) == ("1", "3", ["forces create"])
    assert group["Tasks"][0]["Annotations"] == ["forces create/destroy update"]
    assert plan["Diff"]["Type"] == "Edited"
    # A group no node can hold: the placements that would fail, with why; nothing written.
    huge = json.loads(json.dumps(spec))
    huge["ID"] = huge["Name"] = "web-huge"
    huge["TaskGroups"][0]["Tasks"][0]["Resources"]["MemoryMB"] = 10**8
    failed = n.job.plan_job("web-huge", {"Job": huge}, diff=True)
    metric = failed["FailedTGAllocs"]["g"]
    assert metric["NodesEvaluated"] >= 1 and metric["DimensionExhausted"], metric
    assert failed["Diff"]["Type"] == "Added"
    assert http(d, "GET", "/v1/job/web-huge").status_code == 404
    # Scale up, then down, with messages in the scaling events.
    up = n.job.request(
        "web",
        "scale",
        method="post",
        json={"Count": 3, "Target": {"Group": "g"}, "Message": "more"},
    ).json()
    assert up["EvalID"]
    running(n, "web", 3)
    n.job.request(
        "web",
        "scale",
        method="post",
        json={"Count": 2, "Target": {"Group": "g"}, "Message": "less"},
    )
    running(n, "web", 2)
    status = n.job.request("web", "scale", method="get").json()
    g = status["TaskGroups"]["g"]
    assert g["Desired"] == 2
    assert [e["Message"] for e in g["Events"]] == ["less", "more"]
    assert http(d, "POST", "/v1/job/web/scale", json={"Count": 1}).status_code == 400
    # Revert to version 0 (count 1): a new version with the old spec.
    version = n.job.get_job("web")["Version"]
    r = http(d, "POST", "/v1/job/web/revert", json={"JobVersion": 0, "EnforcePriorVersion": 0})
    assert r.status_code == 400  # the prior version is not 0
    n.job.revert_job("web", 0, enforce_prior_version=version)
    reverted = n.job.get_job("web")
    assert reverted["Version"] == version + 1 and reverted["TaskGroups"][0]["Count"] == 1
    running(n, "web", 1)


def test_dispatch_with_payload_and_meta(d: DevProcess, n: nomad.Nomad) -> None:
    reader = "print(open('local/input.txt').read(), flush=True)"
    spec = job(
        "param",
        [task("r", reader, DispatchPayload={"File": "input.txt"})],
        ParameterizedJob={"Payload": "required", "MetaRequired": ["who"], "MetaOptional": []},
    )
    n.jobs.register_job({"Job": spec})
    assert n.job.get_job("param")["Status"] == "running"
    payload = base64.b64encode(b"hello payload").decode()
    r = http(d, "POST", "/v1/job/param/dispatch", json={"Payload": payload})
    assert r.status_code == 400 and "who" in r.text
    r = http(d, "POST", "/v1/job/param/dispatch", json={"Meta": {"who": "me"}})
    assert r.status_code == 400 and "required" in r.text
    out = n.job.dispatch_job("param", payload=payload, meta={"who": "me"})
    child = out["DispatchedJobID"]
    assert child.startswith("param/dispatch-")

    def done() -> Any:
        allocs = [a for a in n.allocations.get_allocations() if a["JobID"] == child]
        return allocs[0] if allocs and allocs[0]["ClientStatus"] in ("complete", "failed") else None

    alloc = until(done, what="the dispatched job to finish")
    assert alloc["ClientStatus"] == "complete"
    logs = n.client.stream_logs.stream(alloc["ID"], "r", "stdout", plain=True)
    assert logs.strip() == "hello payload"
    summary = n.job.get_summary("param")
    assert sum(summary["Children"].values()) == 1


def test_periodic_force(d: DevProcess, n: nomad.Nomad) -> None:
    spec = job(
        "cron",
        [task("c", "print('tick')")],
        Periodic={
            "Enabled": True,
            "Spec": "0 0 1 1 *",
            "SpecType": "cron",
            "ProhibitOverlap": True,
            "TimeZone": "Europe/Paris",
        },
    )
    n.jobs.register_job({"Job": spec})
    plan = n.job.plan_job("cron", {"Job": spec})
    assert plan["NextPeriodicLaunch"].endswith("-12-31T23:00:00Z")  # midnight in Paris
    forced = n.job.periodic_job("cron")
    assert forced["EvalID"]
    children = until(
        lambda: [j for j in n.jobs.get_jobs() if j["ParentID"] == "cron"], what="a child"
    )
    assert children[0]["ID"].startswith("cron/periodic-")
    r = http(d, "POST", "/v1/job/web/periodic/force")
    assert r.status_code in (400, 404)


def test_alloc_stop_replaces_it(n: nomad.Nomad) -> None:
    n.jobs.register_job({"Job": job("stopme", [task("t", SLEEPER)], kind="service")})
    [alloc] = running(n, "stopme")
    out = n.allocation.stop_allocation(alloc["ID"])
    assert out["EvalID"]

    def replaced() -> Any:
        live = [a for a in allocs_of(n, "stopme") if a["ClientStatus"] == "running"]
        return live if live and live[0]["ID"] != alloc["ID"] else None

    new = until(replaced, what="a replacement")
    assert new[0]["Name"] == alloc["Name"]


TRAPPER = """
import signal, sys, time
signal.signal(signal.SIGUSR1, lambda *_: print("got usr1", flush=True))
print("start", flush=True)
while True:
    time.sleep(0.05)
"""


def test_alloc_restart_and_signal(d: DevProcess, n: nomad.Nomad) -> None:
    n.jobs.register_job({"Job": job("trap", [task("t", TRAPPER)], kind="service")})
    [alloc] = running(n, "trap")

    def logs() -> str:
        return n.client.stream_logs.stream(alloc["ID"], "t", "stdout", plain=True)

    until(lambda: logs() == "start\n", what="the task's first output")
    n.client.allocation.signal_allocation(alloc["ID"], "SIGUSR1", task="t")
    until(lambda: logs() == "start\ngot usr1\n", what="the signal handled")
    n.client.allocation.restart_allocation(alloc["ID"])
    until(lambda: logs() == "start\ngot usr1\nstart\n", what="a second start")

    def restarted() -> bool:
        # The client sends task states in batches: the server learns of the restart after
        # the task's second line is in its log.
        state = n.allocation.get_allocation(alloc["ID"])["TaskStates"]["t"]
        return state["Restarts"] == 1 and state["State"] == "running"

    until(restarted, what="one restart, running again, in the allocation's task state")
    assert [a["ID"] for a in running(n, "trap")] == [alloc["ID"]]  # restarted in place
    r = http(d, "POST", f"/v1/client/allocation/{alloc['ID']}/signal", json={"Signal": "NOPE"})
    assert r.status_code == 400


def test_a_mock_driver_task_takes_a_signal(d: DevProcess, n: nomad.Nomad) -> None:
    # As Nomad's mock_driver (python-nomad's own tests signal one): accepted, recorded.
    mock = {"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "0s"}}
    n.jobs.register_job({"Job": job("mocksig", [mock], kind="service")})
    [alloc] = running(n, "mocksig")
    n.client.allocation.signal_allocation(alloc["ID"], "SIGUSR1", task="t")

    def signalled() -> bool:
        events = n.allocation.get_allocation(alloc["ID"])["TaskStates"]["t"]["Events"]
        return any(e["Type"] == "Signaling" for e in events)

    until(signalled, what='a "Signaling" event in the task state')
    assert [a["ID"] for a in running(n, "mocksig")] == [alloc["ID"]]  # still running
    r = http(d, "POST", f"/v1/client/allocation/{alloc['ID']}/signal", json={"Signal": "NOPE"})
    assert r.status_code == 400


def test_search_prefix(d: DevProcess, n: nomad.Nomad) -> None:
    n.jobs.register_job({"Job": job("searchable-1", [task("t", "print(1)")])})
    got = n.search.search("searchable", "jobs")
    assert got["Matches"]["jobs"] == ["searchable-1"]
    assert got["Truncations"]["jobs"] is False
    everything = n.search.search("searchable", "all")
    assert "nodes" in everything["Matches"]
    fuzzy = n.search.fuzzy_search("rchab", "all")
    assert {"ID": "searchable-1", "Scope": ["default"]} in fuzzy["Matches"]["jobs"]
    r = http(d, "POST", "/v1/search/fuzzy", json={"Text": "x", "Context": "all"})
    assert r.status_code == 400


def test_purge_and_gc_remove_records(d: DevProcess, n: nomad.Nomad) -> None:
    n.jobs.register_job({"Job": job("gcme", [task("t", "print('bye')")])})
    until(
        lambda: [a for a in allocs_of(n, "gcme") if a["ClientStatus"] == "complete"],
        what="the batch job to finish",
    )
    evals = [e["ID"] for e in n.job.get_evaluations("gcme")]
    allocs = [a["ID"] for a in allocs_of(n, "gcme")]
    assert evals and allocs
    r = http(d, "DELETE", "/v1/job/gcme", params={"purge": "true"})
    assert r.status_code == 200
    assert n.system.initiate_garbage_collection()
    for ev in evals:
        assert http(d, "GET", f"/v1/evaluation/{ev}").status_code == 404
    for a in allocs:
        assert http(d, "GET", f"/v1/allocation/{a}").status_code == 404
    assert n.search.search("gcme", "all")["Matches"].get("jobs") == []


def _client_env(d: DevProcess) -> dict[str, str]:
    nats_url = next(line.split()[-1] for line in d.output if line.startswith("NATS:"))
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"services.cli" not in cmd or b"client" not in cmd:
                continue
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        env = dict(i.decode().split("=", 1) for i in raw.split(b"\0") if b"=" in i)
        if env.get("TRELLIS_NATS_URL") == nats_url:
            return env
    raise AssertionError("the dev client agent was not found")


def started_ns(alloc: dict[str, Any]) -> int:
    stamp = alloc["TaskStates"]["t"]["StartedAt"].replace("Z", "+00:00")
    return int(datetime.fromisoformat(stamp).timestamp() * 1e9)


def test_drain_moves_allocations_honouring_migrate(
    d: DevProcess, n: nomad.Nomad, tmp_path: Path
) -> None:
    spec = job("drained", [task("t", SLEEPER)], kind="service", count=2)
    spec["TaskGroups"][0]["Migrate"] = {"MaxParallel": 1, "MinHealthyTime": 0}
    n.jobs.register_job({"Job": spec})
    old = running(n, "drained", 2)
    first_node = old[0]["NodeID"]
    n.jobs.register_job({"Job": job("drain-sys", [task("t", SLEEPER)], kind="system")})
    [system_alloc] = running(n, "drain-sys")
    node_dir = node_data_dir()  # its tasks run as nobody: not under pytest's private tmp
    env = {**_client_env(d), "TRELLIS_DATA_DIR": node_dir}
    log = open(tmp_path / "client2.log", "wb")  # noqa: SIM115
    second = subprocess.Popen(
        [
            *(sys.executable, "-m", "services.cli", "run", "client", "--datacenter", "dc1"),
            *("--health-addr", f"127.0.0.1:{free_port()}"),  # not the default 9100: shared host
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        until(lambda: len(n.nodes.get_nodes()) == 2, what="a second node")
        out = n.node.drain_node_with_spec(first_node, {"Deadline": 60_000_000_000})
        assert out["NodeModifyIndex"]
        node = n.node.get_node(first_node)
        assert node["SchedulingEligibility"] == "ineligible" and node["DrainStrategy"]

        def moved() -> Any:
            live = [a for a in allocs_of(n, "drained") if a["ClientStatus"] == "running"]
            return (
                live if len(live) == 2 and first_node not in {a["NodeID"] for a in live} else None
            )

        new = until(moved, what="both allocations on the second node")
        assert sorted(a["Name"] for a in new) == sorted(a["Name"] for a in old)
        # migrate { max_parallel = 1 }: the second replacement was placed only once the first
        # one ran (all at once, both would be placed before either started).
        moved_first, moved_second = sorted(
            (n.allocation.get_allocation(a["ID"]) for a in new), key=lambda a: a["CreateTime"]
        )
        assert moved_second["CreateTime"] >= started_ns(moved_first)
        assert {a["PreviousAllocation"] for a in new} == {a["ID"] for a in old}
        until(lambda: not n.node.get_node(first_node)["DrainStrategy"], what="drain complete")
        assert n.node.get_node(first_node)["LastDrain"]["Status"] == "complete"
        # System jobs' allocations are not moved: stopped on the drained node (IgnoreSystemJobs
        # not set), before the drain completes.
        assert n.allocation.get_allocation(system_alloc["ID"])["DesiredStatus"] == "stop"
        assert system_alloc["ID"] not in {
            a.get("PreviousAllocation") for a in allocs_of(n, "drain-sys")
        }
        n.job.deregister_job("drain-sys")
        n.node.eligible_node(first_node, eligible=True)
        assert n.node.get_node(first_node)["SchedulingEligibility"] == "eligible"
    finally:
        second.terminate()
        try:
            second.wait(20)
        except subprocess.TimeoutExpired:
            second.kill()
            second.wait()
        log.close()
        shutil.rmtree(node_dir, ignore_errors=True)


SHOW_SECRET = """
import json, os, time, urllib.request
print("PASSWORD=" + os.environ.get("PASSWORD", "<unset>"), flush=True)
token = os.environ.get("VAULT_TOKEN", "")
print("token-file=" + str(open("secrets/vault_token").read() == token), flush=True)
req = urllib.request.Request(
    os.environ["SECRETS_ADDR"] + "/v1/auth/token/lookup-self", headers={"X-Vault-Token": token}
)
me = json.load(urllib.request.urlopen(req))["data"]
print("policies=" + ",".join(sorted(me["policies"])), flush=True)
# For the test only: where it can find the token to see it revoked.
open("local/token-for-test", "w").write(token)
time.sleep(600)
"""


# Not the file's last test: the scheduler drains the stream's parked poll (up to its 10 s
# heartbeat) when `trellis dev` stops, and the tests after it cover that wait.
def test_event_stream_streams_through_the_gateway(d: DevProcess, n: nomad.Nomad) -> None:
    url = d.scheduler + "/v1/event/stream"
    headers = {"X-Nomad-Token": d.root_token}
    params = {"topic": ["Job:streamed", "Allocation:streamed"], "index": "0"}
    seen: list[dict[str, Any]] = []
    with requests.get(url, params=params, headers=headers, stream=True, timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        # The stream is open before the job exists: what follows arrives as it happens.
        n.jobs.register_job({"Job": job("streamed", [task("t", "print(1)")])})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = next(lines)
            if not line:
                continue
            frame = json.loads(line)
            seen += frame.get("Events") or []
            topics = {(e["Topic"], e["Type"]) for e in seen}
            if ("Job", "JobRegistered") in topics and ("Allocation", "PlanResult") in topics:
                break
    assert all(e["Key"] == "streamed" or "streamed" in (e["FilterKeys"] or []) for e in seen)
    job_event = next(e for e in seen if e["Topic"] == "Job")
    assert job_event["Payload"]["Job"]["ID"] == "streamed"
    # Resuming from an index gives only what came after it.
    after = max(e["Index"] for e in seen)
    with requests.get(
        url, params={**params, "index": str(after)}, headers=headers, stream=True, timeout=60
    ) as r:
        first = json.loads(next(line for line in r.iter_lines() if line))
    assert all(e["Index"] > after for e in first.get("Events") or [])
    bad = requests.get(url, params={"topic": "Nope"}, headers=headers, timeout=30)
    assert bad.status_code == 400


SIGNALLED = """
import signal, time
def show(*_):
    print("pw=" + open("local/pw.txt").read(), flush=True)
signal.signal(signal.SIGUSR1, show)
show()
while True:
    time.sleep(0.05)
"""


def secrets_api(d: DevProcess, method: str, path: str, body: Any = None, token: str = "") -> Any:
    r = requests.request(
        method,
        d.secrets + path,
        json=body,
        headers={"X-Vault-Token": token or d.root_token},
        timeout=30,
    )
    return r


def test_template_renders_a_kv_secret_and_follows_changes(d: DevProcess, n: nomad.Nomad) -> None:
    r = secrets_api(d, "POST", "/v1/secret/data/app", {"data": {"password": "first-pw"}})
    assert r.status_code == 200, r.text
    rules = 'path "secret/data/app" { capabilities = ["read"] }'
    assert secrets_api(d, "PUT", "/v1/sys/policies/acl/app-read", {"policy": rules}).ok
    tpl = '{{ with secret "secret/data/app" }}PASSWORD={{ .Data.data.password }}{{ end }}'
    t = task(
        "app",
        SHOW_SECRET,
        Env={"SECRETS_ADDR": d.secrets},
        Vault={"Policies": ["app-read"]},
        Templates=[
            {
                "EmbeddedTmpl": tpl,
                "DestPath": "secrets/app.env",
                "Envvars": True,
                "ChangeMode": "restart",
            }
        ],
    )
    pw_tpl = '{{ with secret "secret/data/app" }}{{ .Data.data.password }}{{ end }}'

    def rendering(name: str, mode: str, **extra: Any) -> dict[str, Any]:
        file = {"EmbeddedTmpl": pw_tpl, "DestPath": "local/pw.txt", "ChangeMode": mode, **extra}
        return task(name, SIGNALLED, Vault={"Policies": ["app-read"]}, Templates=[file])

    signalled = rendering("sig", "signal", ChangeSignal="SIGUSR1")
    quiet = rendering("quiet", "noop")
    n.jobs.register_job({"Job": job("secretive", [t, signalled, quiet], kind="service")})
    [alloc] = running(n, "secretive")

    def out(name: str = "app") -> str:
        return n.client.stream_logs.stream(alloc["ID"], name, "stdout", plain=True)

    until(lambda: "PASSWORD=first-pw" in out(), what="the secret in the task's environment")
    # The task's token (env and secrets/vault_token): its policies only, never root.
    until(lambda: "policies=app-read,default" in out(), what="the task's token looked up")
    assert "token-file=True" in out()
    token = n.client.cat.read_file(alloc["ID"], "app/local/token-for-test")
    assert token and token != d.root_token
    r = http(d, "GET", f"/v1/client/fs/cat/{alloc['ID']}", params={"path": "app/secrets/app.env"})
    assert r.status_code == 403 and "first-pw" not in r.text  # the secrets dir is never served

    # Renewed while the allocation runs: the token's expiry moves on.
    def expiry() -> datetime:
        r = secrets_api(d, "POST", "/v1/auth/token/lookup", {"token": token})
        return datetime.fromisoformat(r.json()["data"]["expire_time"])

    first_expiry = expiry()
    until(lambda: expiry() > first_expiry, what="the task token renewed")
    until(lambda: out("sig") == out("quiet") == "pw=first-pw\n", what="the other templates")
    # The secret changes: the template renders again and the task restarts with it.
    assert secrets_api(d, "POST", "/v1/secret/data/app", {"data": {"password": "second-pw"}}).ok
    until(lambda: "PASSWORD=second-pw" in out(), what="the new secret after a restart")
    # change_mode signal: the task gets SIGUSR1 and reads the new rendering, not restarted.
    until(lambda: out("sig") == "pw=first-pw\npw=second-pw\n", what="the task signalled")
    # change_mode noop: the file is rendered again, the task left alone.
    until(
        lambda: n.client.cat.read_file(alloc["ID"], "quiet/local/pw.txt") == "second-pw",
        what="the noop template rendered again",
    )
    assert out("quiet") == "pw=first-pw\n"

    def restarts() -> dict[str, int]:
        states = n.allocation.get_allocation(alloc["ID"])["TaskStates"]
        return {name: state["Restarts"] for name, state in states.items()}

    # Task states reach the server in the client's next batch, after the task's output.
    expected = {"app": 1, "sig": 0, "quiet": 0}
    until(lambda: restarts() == expected, what=f"restarts {expected} in the allocation")
    # Never in the job, the allocation or its evaluation as the API shows them.
    views = [
        http(d, "GET", "/v1/job/secretive").text,
        http(d, "GET", f"/v1/allocation/{alloc['ID']}").text,
        http(d, "GET", "/v1/job/secretive/evaluations").text,
    ]
    for v in views:
        assert "first-pw" not in v and "second-pw" not in v and token not in v
    # Nor in any service's log or the stored state (JetStream's files): only in the task's
    # own directory, where the template put it.
    banner = next(line for line in d.output if line.startswith("Trellis is running"))
    data_dir = Path(re.search(r"data in (.+?), logs in", banner).group(1))  # type: ignore[union-attr]
    assert (data_dir / "logs" / "scheduler.log").is_file() and (data_dir / "jetstream").is_dir()
    for path in data_dir.rglob("*"):
        if path.is_file() and "alloc" not in path.relative_to(data_dir).parts:
            held = path.read_bytes()
            for secret in (b"first-pw", b"second-pw", token.encode()):
                assert secret not in held, (secret, path)
    # Stopping the allocation's job revokes its token.
    n.job.deregister_job("secretive")
    until(
        lambda: secrets_api(d, "GET", "/v1/auth/token/lookup-self", token=token).status_code == 403,
        what="the task token revoked",
    )

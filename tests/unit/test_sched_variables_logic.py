"""Pure parts of Nomad Variables and the issue-21 scheduler endpoints: path and item rules,
check-and-set and lock decisions at apply time, ACL capabilities by namespace and path,
namespace deletion rules, /proc parsing for stats, the router's rest-of-path routes."""

from __future__ import annotations

import msgspec
import pytest

from services.scheduler.acl import Acl, PolicyError, parse_rules
from services.scheduler.api.router import match
from services.scheduler.client import hoststats
from services.scheduler.state.fsm import SchedulerFSM
from services.scheduler.variables.acl import allow_variable, variable_caps
from services.scheduler.variables.model import (
    RESERVED,
    VariableError,
    check_items,
    check_path,
    metadata,
    parse_lock,
)
from shared.metrics_summary import summary
from shared.replog import ApplyError, LogEntry

S = 10**9


class Machine:
    def __init__(self) -> None:
        self.fsm = SchedulerFSM()
        self.index = 0

    def __call__(self, kind: str, payload: dict, at: float = 1000.0) -> dict:
        self.index += 1
        entry = LogEntry(
            type=kind, payload=msgspec.msgpack.encode(payload), time=at, id=f"e{self.index}"
        )
        return self.fsm.apply(self.index, entry)

    def put(self, path: str, op: str = "set", at: float = 1000.0, **kw: object) -> dict:
        return self(
            "var.apply",
            {"namespace": "default", "path": path, "op": op, "sealed": b"x" * 40, **kw},
            at,
        )


def test_paths_and_items_follow_nomad() -> None:
    for ok in ("a", "app/db", "nomad/jobs", "nomad/jobs/web/g/t", "a-b_c~d"):
        check_path(ok)
    for bad, msg in (("", "missing"), ("a b", "invalid path"), ("x" * 129, "invalid path")):
        with pytest.raises(VariableError, match=msg):
            check_path(bad)
    for reserved in ("nomad", "nomad/other"):
        with pytest.raises(VariableError) as exc:
            check_path(reserved)
        assert str(exc.value) == RESERVED
    with pytest.raises(VariableError, match="missing required Items"):
        check_items({}, required=True)
    assert check_items(None, required=False) == {}
    with pytest.raises(VariableError, match="must be a string"):
        check_items({"a": 1}, required=True)
    with pytest.raises(VariableError, match="64KiB"):
        check_items({"a": "x" * (64 * 1024)}, required=True)


def test_lock_parameters() -> None:
    assert parse_lock(None) == (15 * S, 15 * S, "")
    assert parse_lock({"TTL": "30s", "LockDelay": "1m"}) == (30 * S, 60 * S, "")
    with pytest.raises(VariableError, match="between 10s and 24h"):
        parse_lock({"TTL": "1s"})
    with pytest.raises(VariableError, match=r"invalid Lock\.TTL"):
        parse_lock({"TTL": "soon"})


def test_cas_conflicts_answer_with_the_winner() -> None:
    m = Machine()
    first = m.put("app/db", cas=0)["record"]
    assert first["CreateIndex"] == first["ModifyIndex"] == 1
    # cas=0 means "only if absent": the existing variable comes back as the conflict.
    assert m.put("app/db", cas=0)["conflict"]["ModifyIndex"] == 1
    assert m.put("app/db", cas=7)["conflict"]["ModifyIndex"] == 1
    second = m.put("app/db", cas=1)["record"]
    assert second["CreateIndex"] == 1 and second["ModifyIndex"] == 4
    assert m.put("other", cas=3) == {"conflict_missing": True}
    assert "conflict" in m(
        "var.apply", {"namespace": "default", "path": "app/db", "op": "delete", "cas": 1}
    )
    m("var.apply", {"namespace": "default", "path": "app/db", "op": "delete", "cas": 4})
    assert "default\x00app/db" not in m.fsm.t.variables
    # A snapshot keeps variables (sealed) across a restore.
    m.put("kept")
    again = SchedulerFSM()
    again.restore(m.fsm.snapshot(), m.index)
    assert again.t.variables["default\x00kept"]["_Sealed"] == b"x" * 40


def test_locks_hold_renew_release_and_delay() -> None:
    m = Machine()
    lock = {"ttl": 10 * S, "lock_delay": 20 * S, "new_lock_id": "L1"}
    rec = m.put("svc/leader", "lock-acquire", at=100, **lock)["record"]
    assert rec["_Lock"]["ID"] == "L1" and rec["_Lock"]["Expires"] == 110 * S
    assert metadata(rec, 105 * S)["Lock"] == {"TTL": "10s", "LockDelay": "20s", "ID": ""}
    assert metadata(rec, 105 * S, with_lock_id=True)["Lock"]["ID"] == "L1"
    # Held: another acquire, a write or a delete without the lock ID conflict.
    assert "conflict" in m.put(
        "svc/leader", "lock-acquire", at=101, **{**lock, "new_lock_id": "L2"}
    )
    assert "conflict" in m.put("svc/leader", at=101)
    assert "conflict" in m(
        "var.apply", {"namespace": "default", "path": "svc/leader", "op": "delete"}, 101
    )
    assert "record" in m.put("svc/leader", at=102, lock_id="L1")
    assert "conflict" in m.put("svc/leader", "lock-renew", at=103, lock_id="nope")
    renewed = m.put("svc/leader", "lock-renew", at=105, lock_id="L1")["record"]
    assert renewed["_Lock"]["Expires"] == 115 * S
    # Lapsed without release: nobody may take it during the lock delay, then anyone may.
    assert "conflict" in m.put(
        "svc/leader", "lock-acquire", at=120, **{**lock, "new_lock_id": "L3"}
    )
    assert "conflict" in m.put("svc/leader", "lock-renew", at=120, lock_id="L1")
    assert "record" in m.put("svc/leader", at=120)  # a lapsed lock does not block writes
    got = m.put("svc/leader", "lock-acquire", at=136, **{**lock, "new_lock_id": "L3"})
    assert got["record"]["_Lock"]["ID"] == "L3"
    released = m.put("svc/leader", "lock-release", at=137, lock_id="L3")["record"]
    assert released["_Lock"] is None and "Lock" not in metadata(released, 137 * S)
    # Released (not lapsed): no delay.
    assert "record" in m.put("svc/leader", "lock-acquire", at=138, **{**lock, "new_lock_id": "L4"})


def test_namespaces_guard_their_contents() -> None:
    m = Machine()
    with pytest.raises(ApplyError, match='namespace "prod" does not exist'):
        m("var.apply", {"namespace": "prod", "path": "a", "op": "set", "sealed": b"x"})
    m("namespace.apply", {"op": "upsert", "namespaces": [{"Name": "prod", "Description": "p"}]})
    m("var.apply", {"namespace": "prod", "path": "a", "op": "set", "sealed": b"x"})
    with pytest.raises(ApplyError, match="has variables"):
        m("namespace.apply", {"op": "delete", "names": ["prod"]})
    with pytest.raises(ApplyError, match="default namespace can not be deleted"):
        m("namespace.apply", {"op": "delete", "names": ["default"]})
    m("var.apply", {"namespace": "prod", "path": "a", "op": "delete"})
    m("namespace.apply", {"op": "delete", "names": ["prod"]})
    assert "prod" not in m.fsm.t.namespaces


POLICY = """
namespace "default" {
  policy = "read"
  variables {
    path "project/*" { capabilities = ["write", "read", "destroy"] }
    path "project/secret" { capabilities = ["deny"] }
  }
}
namespace "prod-*" {
  variables {
    path "*" { capabilities = ["list"] }
  }
}
"""


def test_variable_capabilities_by_namespace_and_path() -> None:
    acl = Acl(policies=[parse_rules(POLICY)])
    assert variable_caps(acl, "default", "project/web") == {"write", "read", "destroy"}
    assert variable_caps(acl, "default", "project/secret") == set()  # deny wins
    assert variable_caps(acl, "default", "elsewhere") == {"read", "list"}  # from policy=read
    assert variable_caps(acl, "prod-eu", "x") == {"list"}
    assert variable_caps(acl, "staging", "x") == set()
    assert allow_variable(Acl(management=True), "any", "thing", "destroy")
    with pytest.raises(PolicyError, match="Invalid variable capabilities"):
        parse_rules('namespace "d" { variables { path "*" { capabilities = ["own"] } } }')


def test_rest_of_path_routes() -> None:
    handlers, args = match(["var", "nomad", "jobs", "web"]) or ({}, [])
    assert "PUT" in handlers and args == ["nomad", "jobs", "web"]
    assert match(["var"]) is None
    handlers, args = match(["client", "allocation", "abc", "stats"]) or ({}, [])
    assert "GET" in handlers and args == ["abc"]


def test_proc_parsing() -> None:
    mem = hoststats.parse_meminfo("MemTotal:  1000 kB\nMemFree: 200 kB\nMemAvailable: 500 kB\n")
    assert mem == {"MemTotal": 1024000, "MemFree": 204800, "MemAvailable": 512000}
    cpus = hoststats.parse_cpu_lines(
        "cpu  9 9 9 9 9 9 9 9 0 0\ncpu0 100 0 50 800 50 0 0 0 0 0\nintr 5\n"
    )
    assert cpus == {"cpu0": [100, 0, 50, 800, 50, 0, 0, 0]}
    pct = hoststats.cpu_percentages([0] * 8, [30, 10, 10, 50, 0, 0, 0, 0])
    assert pct == {"User": 40.0, "System": 10.0, "Idle": 50.0, "Total": 50.0}
    stat = "42 (my (odd) cmd) S 1 42 42 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 555 0 0"
    assert hoststats.parse_proc_stat(stat) == (7, 3, 555)
    assert hoststats.parse_status_rss("Name: x\nVmRSS:\t  2048 kB\n") == 2048 * 1024


def test_metrics_in_nomad_json_and_scheduler_gauges() -> None:
    from types import SimpleNamespace

    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

    from services.scheduler.api import metrics

    m = Machine()
    m.put("a")
    ctx = SimpleNamespace(t=m.fsm.t, replog=SimpleNamespace(applied_index=m.index))
    gauges = {f.name: f.samples[0].value for f in metrics.scheduler_families(ctx)}  # type: ignore[arg-type]
    assert gauges["nomad_nomad_variables_total"] == 1
    assert gauges["nomad_raft_appliedIndex"] == 1 and gauges["nomad_nomad_job_status_running"] == 0
    counter = CounterMetricFamily("reqs", "requests", labels=["api"])
    counter.add_metric(["x"], 3)
    hist = HistogramMetricFamily("lat", "latency", labels=[])
    hist.add_metric([], buckets=[("1", 2), ("+Inf", 4)], sum_value=2.0)
    out = summary([counter, hist, *metrics.scheduler_families(ctx)])  # type: ignore[arg-type]
    assert {"Name": "reqs_total", "Count": 1, "Sum": 3.0, "Labels": {"api": "x"}} in out["Counters"]
    assert out["Samples"] == [{"Name": "lat", "Count": 4, "Sum": 2.0, "Mean": 0.5, "Labels": {}}]
    assert {"Name": "nomad_nomad_variables_total", "Value": 1.0, "Labels": {}} in out["Gauges"]


async def test_templates_read_only_their_jobs_variables() -> None:
    import json

    from services.scheduler.client import template
    from services.scheduler.variables import workload
    from shared.errors import ServiceError
    from shared.sealing import Keys, seal

    key = b"k" * 32

    async def fetch(name: str) -> bytes:
        assert name == workload.DATA_KEY
        return key

    m = Machine()
    items = json.dumps({"user": "bob"}).encode()
    m(
        "var.apply",
        {
            "namespace": "default",
            "path": "nomad/jobs/web",
            "op": "set",
            "sealed": seal(key, items, workload.aad("default", "nomad/jobs/web")),
        },
    )
    alloc = {"JobID": "web", "TaskGroup": "g", "Namespace": "default"}
    nodes = template.parse(
        '{{ with nomadVar "nomad/jobs/web" }}u={{ .user }}{{ end }}'
        '{{ with nomadVar "nomad/jobs/web/g/t" }}x{{ else }}-{{ end }}'
    )
    refs = template.secret_paths(nodes)
    assert refs == ["nomadvar:nomad/jobs/web", "nomadvar:nomad/jobs/web/g/t"]
    got = await workload.read_for_task(m.fsm.t, Keys(fetch), alloc, "t", refs)
    assert got == {"nomadvar:nomad/jobs/web": {"user": "bob"}, "nomadvar:nomad/jobs/web/g/t": None}
    assert template.render(nodes, got, {}) == "u=bob-"
    with pytest.raises(ServiceError, match="only its job's variables"):
        await workload.read_for_task(m.fsm.t, Keys(fetch), alloc, "t", ["nomadvar:nomad/jobs/db"])

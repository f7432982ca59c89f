"""The workspace state machine applied directly: deterministic results, validation at apply
time, nothing half applied, and snapshot/restore round trips."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from services.workspace.state import WorkspaceState
from shared.replog import ApplyError, LogEntry


class Machine:
    def __init__(self) -> None:
        self.state = WorkspaceState()
        self.index = 0

    def __call__(self, op: str, payload: dict[str, Any], t: float = 1000.0) -> Any:
        self.index += 1
        return self.state.apply(
            self.index,
            LogEntry(type=op, payload=msgspec.msgpack.encode(payload), time=t, id=str(self.index)),
        )


@pytest.fixture
def m() -> Machine:
    machine = Machine()
    machine(
        "org.create",
        {
            "id": "org-1",
            "name": "acme",
            "email": "a@example.com",
            "owners_team_id": "team-own",
            "default_project_id": "prj-def",
        },
    )
    return machine


def ws(
    m: Machine, wid: str, name: str, tags: list[dict[str, str]] | None = None, **fields: Any
) -> str:
    return m(
        "ws.create",
        {"fields": {"id": wid, "org_id": "org-1", "name": name, **fields}, "tags": tags or []},
    )


def test_unique_names_and_defaults(m: Machine) -> None:
    assert ws(m, "ws-a", "a") == "ws-a"
    w = m.state.workspaces["ws-a"]
    assert w.project_id == "prj-def" and w.created_at == 1000.0
    with pytest.raises(ApplyError) as exc:
        ws(m, "ws-b", "a")
    assert exc.value.code == 422 and "already been taken" in exc.value.message
    assert list(m.state.workspaces) == ["ws-a"]
    with pytest.raises(ApplyError):
        ws(m, "ws-c", "c", execution_mode="agent")  # agent mode needs a pool
    assert "ws-c" not in m.state.workspaces


def test_update_rename_and_vcs_merge(m: Machine) -> None:
    ws(m, "ws-a", "a")
    ws(m, "ws-b", "b")
    with pytest.raises(ApplyError):
        m("ws.update", {"id": "ws-a", "changes": {"name": "b"}})
    with pytest.raises(ApplyError):  # needs both keys on a workspace without a repository
        m("ws.update", {"id": "ws-a", "changes": {}, "vcs": {"branch": "x"}})
    m(
        "ws.update",
        {
            "id": "ws-a",
            "changes": {"name": "z"},
            "vcs": {"identifier": "o/r", "oauth_token_id": "ot"},
        },
        t=2000.0,
    )
    w = m.state.workspaces["ws-a"]
    assert w.name == "z" and w.updated_at == 2000.0 and w.vcs_repo is not None
    assert m.state.workspace_named("org-1", "z") is w
    assert m.state.workspace_named("org-1", "a") is None
    assert [x.name for x in m.state.org_workspaces("org-1")] == ["b", "z"]
    m("ws.update", {"id": "ws-a", "changes": {}, "vcs": {"branch": "dev"}})
    assert w.vcs_repo.branch == "dev" and w.vcs_repo.identifier == "o/r"
    # Agent mode with a pool, then back to remote drops the pool.
    m(
        "ws.update",
        {"id": "ws-a", "changes": {"execution_mode": "agent", "agent_pool_id": "apool-1"}},
    )
    m("ws.update", {"id": "ws-a", "changes": {"execution_mode": "remote"}})
    assert w.agent_pool_id is None


def test_tags_counts_and_cleanup(m: Machine) -> None:
    ws(m, "ws-a", "a", [{"name": "x", "new_id": "tag-x"}, {"name": "y", "new_id": "tag-y"}])
    ws(m, "ws-b", "b", [{"id": "tag-x"}])
    assert m.state.tag_count == {"tag-x": 2, "tag-y": 1}
    with pytest.raises(ApplyError):
        m("ws.tags", {"id": "ws-b", "op": "add", "items": [{"id": "tag-nope"}]})
    m(
        "ws.tags",
        {
            "id": "ws-a",
            "op": "remove",
            "items": [{"name": "y", "new_id": "n"}, {"name": "unknown", "new_id": "n"}],
        },
    )
    assert "tag-y" not in m.state.tags  # on no workspace: gone from the organization
    m("ws.delete", {"id": "ws-a"})
    assert m.state.tag_count == {"tag-x": 1}


def test_consumers_rules(m: Machine) -> None:
    ws(m, "ws-a", "a")
    ws(m, "ws-b", "b")
    ws(m, "ws-g", "g", global_remote_state=True)
    for bad in ({"op": "add", "ids": ["ws-a"]}, {"op": "add", "ids": ["ws-x"]}):
        with pytest.raises(ApplyError):
            m("ws.consumers", {"id": "ws-a", **bad})
    with pytest.raises(ApplyError):
        m("ws.consumers", {"id": "ws-g", "op": "add", "ids": ["ws-a"]})
    m("ws.consumers", {"id": "ws-a", "op": "add", "ids": ["ws-b", "ws-b"]})
    assert m.state.workspaces["ws-a"].consumer_ids == ["ws-b"]
    m("ws.delete", {"id": "ws-b"})
    assert m.state.workspaces["ws-a"].consumer_ids == []


def test_locks(m: Machine) -> None:
    ws(m, "ws-a", "a")
    m("ws.lock", {"id": "ws-a", "by": ["users", "user-1"], "reason": "r"})
    with pytest.raises(ApplyError) as exc:
        m("ws.lock", {"id": "ws-a", "by": ["users", "user-1"]})
    assert exc.value.code == 409
    with pytest.raises(ApplyError) as exc:
        m("ws.unlock", {"id": "ws-a", "by": ["teams", "team-1"]})
    assert "locked by User user-1" in exc.value.message
    m("ws.unlock", {"id": "ws-a", "by": ["teams", "team-1"], "force": True})
    assert m.state.workspaces["ws-a"].locked is False


def test_policy_sets_rules(m: Machine) -> None:
    ws(m, "ws-a", "a")
    m(
        "policy.create",
        {
            "id": "pol-1",
            "org_id": "org-1",
            "name": "p",
            "kind": "opa",
            "enforcement_level": "advisory",
            "query": "q",
        },
    )
    base = {"org_id": "org-1", "kind": "opa"}
    m("polset.create", {"fields": {"id": "ps-1", "name": "s", **base}, "policy_ids": ["pol-1"]})
    assert m.state.policies["pol-1"].policy_set_ids == ["ps-1"]
    for bad in (
        {"fields": {"id": "ps-2", "name": "s", **base}},  # duplicate
        {"fields": {"id": "ps-2", "name": "t", **base}, "policy_ids": ["pol-x"]},
        {
            "fields": {"id": "ps-2", "name": "t", "org_id": "org-1", "kind": "sentinel"},
            "policy_ids": ["pol-1"],
        },  # kind mismatch
        {"fields": {"id": "ps-2", "name": "t", **base, "workspace_ids": ["ws-x"]}},
    ):
        with pytest.raises(ApplyError):
            m("polset.create", bad)
    m("polset.create", {"fields": {"id": "ps-g", "name": "g", **base, "is_global": True}})
    with pytest.raises(ApplyError):
        m("polset.rel", {"id": "ps-g", "rel": "workspaces", "op": "add", "ids": ["ws-a"]})
    m("polset.rel", {"id": "ps-1", "rel": "workspaces", "op": "add", "ids": ["ws-a"]})
    m("ws.delete", {"id": "ws-a"})
    assert m.state.policy_sets["ps-1"].workspace_ids == []
    m("policy.delete", {"id": "pol-1"})
    assert m.state.policy_sets["ps-1"].policy_ids == []


def test_snapshot_restore_round_trip(m: Machine) -> None:
    ws(m, "ws-a", "a", [{"name": "x", "new_id": "tag-x"}])
    ws(m, "ws-b", "b", [{"id": "tag-x"}])
    m(
        "token.create",
        {
            "id": "at-1",
            "kind": "organization",
            "owner_id": "org-1",
            "digest": "d1",
            "replace": True,
        },
    )
    m(
        "token.create",
        {
            "id": "at-2",
            "kind": "organization",
            "owner_id": "org-1",
            "digest": "d2",
            "replace": True,
        },
    )
    assert list(m.state.token_by_digest) == ["d2"]  # one organization token at a time
    other = WorkspaceState()
    other.restore(m.state.snapshot(), m.index)
    assert other.index == m.index
    assert other.snapshot() == m.state.snapshot()
    assert other.tag_count == m.state.tag_count
    assert other.ws_sorted == m.state.ws_sorted
    assert other.workspace_named("org-1", "b") is not None


def test_unknown_op_and_bad_payload(m: Machine) -> None:
    with pytest.raises(ApplyError):
        m("nope", {})
    with pytest.raises(ApplyError):
        m.state.apply(99, LogEntry(type="ws.create", payload=b"\xc1", time=0, id="x"))


def test_org_delete_cascades(m: Machine) -> None:
    ws(m, "ws-a", "a", [{"name": "x", "new_id": "tag-x"}])
    m("team.create", {"id": "team-2", "org_id": "org-1", "name": "devs"})
    m(
        "token.create",
        {"id": "at-1", "kind": "team", "owner_id": "team-2", "digest": "d", "replace": True},
    )
    m("org.delete", {"org_id": "org-1"})
    assert not m.state.workspaces and not m.state.tags and not m.state.teams
    assert not m.state.tokens and not m.state.org_by_name

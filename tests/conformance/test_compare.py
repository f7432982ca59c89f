"""The comparison and the allow-list parser, without servers."""

from __future__ import annotations

import pytest

from tests.conformance.allowlist import Allowed, load, parse
from tests.conformance.replay import Answer, Target, compare
from tests.conformance.report import replay, stale
from tests.conformance.steps import S, Step


def _env(data: object, **kw: object) -> dict[str, object]:
    return {
        "request_id": "x",
        "data": data,
        "auth": None,
        "wrap_info": None,
        "warnings": None,
        **kw,
    }


def test_same_shape_matches_whatever_the_values() -> None:
    step = S("a", "GET", "x")
    assert compare(step, Answer(200, _env({"k": 1})), Answer(200, _env({"k": 2}))) == []


def test_status_and_keys_differ() -> None:
    step = S("a", "GET", "x")
    (d,) = compare(step, Answer(200, _env({})), Answer(404, None))
    assert (d.kind, d.detail) == ("status", "200 != 404")
    diffs = compare(
        step, Answer(200, _env({"k": 1, "old": 1})), Answer(200, _env({"k": 1, "new": 2}))
    )
    assert {(d.kind, d.detail) for d in diffs} == {("missing", "data.old"), ("extra", "data.new")}


def test_auth_and_warnings_are_compared() -> None:
    step = S("a", "POST", "x")
    bao = Answer(200, _env(None, auth={"client_token": "t"}, warnings=["w"]))
    trellis = Answer(200, _env(None, auth=None))
    kinds = {(d.kind, d.detail) for d in compare(step, bao, trellis)}
    assert kinds == {("missing", "auth"), ("missing", "warnings")}


def test_pick_compares_one_entry_of_a_map() -> None:
    step = S("a", "GET", "sys/mounts", pick=("data", "secret/"))
    a = Answer(200, _env({"secret/": {"type": "kv", "uuid": "1"}, "x/": {}}))
    b = Answer(200, _env({"secret/": {"type": "kv"}}))
    assert [(d.kind, d.detail) for d in compare(step, a, b)] == [("missing", "pick.uuid")]


def test_errors_compare_by_status_only() -> None:
    step = S("a", "GET", "x")
    assert compare(step, Answer(403, {"errors": ["a"]}), Answer(403, {"errors": ["b", "c"]})) == []


def test_allowlist_rows_and_globs() -> None:
    text = "<!-- conformance:allow -->\n| step | kind | detail | reason |\n|---|---|---|---|\n"
    text += "| `ns.*` | missing | `data.uuid` | OpenBao only |\n<!-- /conformance:allow -->\n"
    (row,) = parse(text)
    assert row.covers("ns.read", "missing", "data.uuid")
    assert not row.covers("ns.read", "extra", "data.uuid")
    with pytest.raises(ValueError, match="malformed"):
        parse(text.replace("| OpenBao only |", "|  |"))


class _Canned(Target):
    """A target that answers every step with one status, without a server."""

    def __init__(self, status: int) -> None:
        super().__init__("canned", "http://unused", "t")
        self.status = status

    def run(self, step: Step) -> Answer:
        return Answer(self.status, {"errors": ["x"]})


def test_an_oracle_5xx_must_be_a_documented_row() -> None:
    steps = [S("login.empty", "POST", "auth/x/login")]
    row = Allowed("login.*", "oracle", "500 != 400", "OpenBao fails")
    documented = replay(_Canned(500), _Canned(400), steps, [row])
    assert documented.undocumented == [] and documented.used == {row}
    assert documented.compared == 0 and len(documented.oracle_errors) == 1
    (missing,) = replay(_Canned(500), _Canned(400), steps, []).undocumented
    assert (missing.kind, missing.detail) == ("oracle", "500 != 400")
    (ours,) = replay(_Canned(500), _Canned(500), steps, [row]).undocumented
    assert (ours.kind, ours.detail) == ("status", "500 != 500")


def test_a_row_is_stale_only_for_the_steps_replayed() -> None:
    steps = [S("login.empty", "POST", "auth/x/login")]
    mine = Allowed("login.*", "oracle", "500 != 400", "OpenBao fails")
    other = Allowed("transit.*", "oracle", "500 != 400", "another suite's step")
    quiet = replay(_Canned(200), _Canned(200), steps, [mine, other])
    assert stale([mine, other], quiet, steps) == [mine]


def test_the_document_parses() -> None:
    rows = load()
    assert rows and all(r.reason for r in rows)

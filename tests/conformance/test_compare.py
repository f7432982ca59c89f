"""The comparison and the allow-list parser, without servers."""

from __future__ import annotations

import pytest

from tests.conformance.allowlist import load, parse
from tests.conformance.replay import Answer, compare
from tests.conformance.steps import S


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


def test_the_document_parses() -> None:
    rows = load()
    assert rows and all(r.reason for r in rows)

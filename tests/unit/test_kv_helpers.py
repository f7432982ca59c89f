"""Pure KV helpers: JSON merge patch, subkeys, timestamps, weak input typing, custom metadata,
the v1 lease hint."""

from __future__ import annotations

import pytest

from services.secrets.engines.kv import inputs
from services.secrets.engines.kv.merge_patch import merge_patch
from services.secrets.engines.kv.subkeys import subkeys
from services.secrets.engines.kv.timestamps import optional_rfc3339, rfc3339
from services.secrets.engines.kv.v1 import lease_hint
from services.secrets.engines.kv.v2_metadata import custom_metadata
from services.secrets.errors import SecretsError


# RFC 7396 appendix A, a representative selection.
@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch_rfc7396(target: object, patch: object, result: object) -> None:
    assert merge_patch(target, patch) == result


def test_merge_patch_does_not_modify_its_inputs() -> None:
    target, patch = {"a": {"b": 1}}, {"a": {"c": 2}}
    merge_patch(target, patch)
    assert target == {"a": {"b": 1}} and patch == {"a": {"c": 2}}


def test_subkeys_replaces_values_and_honours_depth() -> None:
    data = {"foo": "abc", "bar": {"baz": "def", "deep": {"x": 1}}, "quux": {}, "n": [1]}
    assert subkeys(data) == {
        "foo": None,
        "bar": {"baz": None, "deep": {"x": None}},
        "quux": None,
        "n": None,
    }
    assert subkeys(data, 1) == {"foo": None, "bar": None, "quux": None, "n": None}
    assert subkeys(data, 2) == {
        "foo": None,
        "bar": {"baz": None, "deep": None},
        "quux": None,
        "n": None,
    }


def test_subkeys_stops_at_the_hard_limit() -> None:
    data: dict[str, object] = {}
    cur = data
    for _ in range(150):
        cur["k"] = {}
        cur = cur["k"]  # type: ignore[assignment]
    cur["leaf"] = 1
    depth, node = 0, subkeys(data)
    while isinstance(node, dict):
        node, depth = node["k"], depth + 1
    assert depth == 100


def test_timestamps_are_rfc3339_with_nanoseconds() -> None:
    assert rfc3339(1521685446_945319214) == "2018-03-22T02:24:06.945319214Z"
    assert rfc3339(1521685446_945000000) == "2018-03-22T02:24:06.945Z"  # Go trims zeros
    assert rfc3339(1521685446_000000000) == "2018-03-22T02:24:06Z"
    assert optional_rfc3339(0) == ""
    assert optional_rfc3339(1) == "1970-01-01T00:00:00.000000001Z"


@pytest.mark.parametrize(
    ("value", "number"),
    [(None, 0), ("", 0), ("3", 3), (3, 3), (3.0, 3), (" 7 ", 7), (["2"], 2), (True, 1)],
)
def test_version_param_weak_typing(value: object, number: int) -> None:
    assert inputs.version_param(value) == number


@pytest.mark.parametrize("value", ["abc", "1.5", 1.5, -1, "-2", {"a": 1}, ["1", "2"]])
def test_version_param_rejects_junk_with_400(value: object) -> None:
    with pytest.raises(SecretsError) as err:
        inputs.version_param(value)
    assert err.value.code == 400


def test_version_list() -> None:
    assert inputs.version_list(["1", "2"]) == [1, 2]
    for bad in ([], ["x"], ["-1"]):
        with pytest.raises(SecretsError) as err:
            inputs.version_list(bad)
        assert err.value.code == 400


def test_cas_option() -> None:
    assert inputs.cas_option({}) is None
    assert inputs.cas_option({"options": {}}) is None
    assert inputs.cas_option({"options": {"cas": None}}) is None
    assert inputs.cas_option({"options": {"cas": "2"}}) == 2
    assert inputs.cas_option({"options": '{"cas": 0}'}) == 0
    for bad in ({"options": {"cas": "x"}}, {"options": "nope"}, {"options": [1]}):
        with pytest.raises(SecretsError) as err:
            inputs.cas_option(bad)
        assert err.value.code == 400


def test_json_object() -> None:
    assert inputs.json_object("data", {"a": 1}, required=True) == {"a": 1}
    assert inputs.json_object("data", '{"a": 1}', required=True) == {"a": 1}
    assert inputs.json_object("options", None, required=False) is None
    for bad in (None, "[1]", "{", 5, ["a"]):
        with pytest.raises(SecretsError) as err:
            inputs.json_object("data", bad, required=True)
        assert err.value.code == 400


def test_custom_metadata_validation() -> None:
    assert custom_metadata({"a": "b", "n": 1, "t": True}) == {"a": "b", "n": "1", "t": "1"}
    assert custom_metadata({"a": None, "b": "c"}, drop_nulls=True) == {"b": "c"}
    for bad in (
        {f"k{i}": "v" for i in range(65)},
        {"k" * 129: "v"},
        {"k": "v" * 513},
        {"k": ""},
        {"k": {"nested": 1}},
        {"k": "a\x00b"},
    ):
        with pytest.raises(SecretsError) as err:
            custom_metadata(bad)
        assert err.value.code == 400


def test_v1_lease_hint() -> None:
    assert lease_hint({}, 2764800) == 2764800
    assert lease_hint({"ttl": "1h"}, 2764800) == 3600
    assert lease_hint({"ttl": 90}, 2764800) == 90
    assert lease_hint({"lease": "2m"}, 2764800) == 120
    assert lease_hint({"ttl": "soon"}, 2764800) == 2764800  # unreadable: the default

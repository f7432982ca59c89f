"""Weak typing of request fields, durations and path templates."""

from __future__ import annotations

from typing import Annotated

import msgspec
import pytest

from services.secrets.framework.durations import format_duration, parse_duration
from services.secrets.framework.fields import (
    CommaList,
    Duration,
    FieldError,
    KVPairs,
    decode_fields,
    desc,
)
from services.secrets.framework.path import Path, template_openapi, template_regex


class Role(msgspec.Struct, kw_only=True):
    name: str
    ttl: Duration = 0
    users: CommaList = []
    enabled: bool = False
    port: Annotated[int, desc("a port")] = 22
    opts: dict[str, str] = {}
    pairs: KVPairs = {}
    tags: list[str] = []


@pytest.mark.parametrize(
    ("raw", "secs"),
    [
        (90, 90),
        ("90", 90),
        ("1h", 3600),
        ("1h30m", 5400),
        ("2.5s", 2),
        ("1d", 86400),
        ("", 0),
        ("500ms", 0),
        (12.7, 12),
    ],
)
def test_durations(raw: object, secs: int) -> None:
    assert parse_duration(raw) == secs


@pytest.mark.parametrize("raw", ["forever", "1x", "h", True, [1], "1h-"])
def test_bad_durations(raw: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(raw)


def test_durations_asked_again_answer_alike() -> None:
    """Remembered strings answer as the first time; a refused one is refused every time; a
    string past the remembered length is read all the same."""
    for _ in range(2):
        assert parse_duration("7h") == 25200
        with pytest.raises(ValueError, match="invalid duration 'soon'"):
            parse_duration("soon")
    assert parse_duration("1h" + "0m" * 20) == 3600
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration("1h" + "0m" * 20 + "x")


def test_values_of_their_exact_type_pass_as_they_are() -> None:
    fields, unknown = decode_fields(
        Role,
        {"enabled": True, "opts": {"a": "b"}, "tags": ["x"], "port": 2222, "ttl": "2m"},
        {"name": "web"},
    )
    assert unknown == []
    assert fields == Role(name="web", enabled=True, opts={"a": "b"}, tags=["x"], port=2222, ttl=120)
    with pytest.raises(FieldError, match="64-bit"):
        decode_fields(Role, {"port": 2**64}, {"name": "web"})


def test_format_duration() -> None:
    assert format_duration(0) == "0s"
    assert format_duration(3600) == "1h0m0s"
    assert format_duration(90) == "1m30s"


def test_weak_values_as_vault_takes_them() -> None:
    f, unknown = decode_fields(
        Role,
        {
            "ttl": "1h",
            "users": "a, b,,c",
            "enabled": "",
            "port": "2222",
            "opts": '{"k": "v"}',
            "pairs": ["a=1", "b=2"],
            "tags": "one",
            "junk": 1,
        },
        {"name": "r1"},
    )
    assert f == Role(
        name="r1",
        ttl=3600,
        users=["a", "b", "c"],
        enabled=False,
        port=2222,
        opts={"k": "v"},
        pairs={"a": "1", "b": "2"},
        tags=["one"],
    )
    assert unknown == ["junk"]
    f, _ = decode_fields(Role, {"enabled": "true", "ttl": None, "users": ["x"]}, {"name": "r"})
    assert f.enabled is True and f.ttl == 0 and f.users == ["x"]
    f, _ = decode_fields(Role, {"enabled": 1, "port": 8.0}, {"name": "r"})
    assert f.enabled is True and f.port == 8


def test_captures_beat_body() -> None:
    f, _ = decode_fields(Role, {"name": "body"}, {"name": "url"})
    assert f.name == "url"


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"ttl": "soon"}, "ttl"),
        ({"port": "abc"}, "port"),
        ({"enabled": "maybe"}, "enabled"),
        ({"opts": "{nope"}, "opts"),
        ({"pairs": ["novalue"]}, "pairs"),
        ({"port": [1]}, "port"),
        ({"ttl": "-1h"}, "negative"),
    ],
)
def test_bad_values_name_the_field(data: dict[str, object], fragment: str) -> None:
    with pytest.raises(FieldError) as err:
        decode_fields(Role, data, {"name": "r"})
    assert fragment in str(err.value)


def test_missing_required_field() -> None:
    with pytest.raises(FieldError, match="missing required field 'name'"):
        decode_fields(Role, {}, {})


def test_templates() -> None:
    rx = template_regex("roles/{name}")
    assert rx.fullmatch("roles/web")["name"] == "web"  # type: ignore[index]
    assert rx.fullmatch("roles/a/b") is None
    assert template_regex("data/{path*}").fullmatch("data/a/b/c")["path"] == "a/b/c"  # type: ignore[index]
    assert template_openapi("data/{path*}") == "data/{path}"
    p = Path(("sign-verbatim", "sign-verbatim/{role}"), {})
    assert p.match("sign-verbatim") == {} and p.match("sign-verbatim/r") == {"role": "r"}
    assert template_regex("roles/").fullmatch("roles") is not None

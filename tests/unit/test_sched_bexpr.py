"""go-bexpr filters as Nomad evaluates them on jobs."""

from __future__ import annotations

import pytest

from services.scheduler.bexpr import FilterEvalError, FilterSyntaxError, compile_filter

JOB = {
    "ID": "web-1",
    "Priority": 50,
    "Stop": False,
    "Datacenters": ["dc1", "dc2"],
    "Meta": {"owner": "bob", "team": ""},
    "TaskGroups": [{"Name": "g"}],
    "ParentID": "",
}


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ('Meta.owner == "bob"', True),
        ('Meta["owner"] == bob', True),
        ("Meta.owner != `bob`", False),
        ('"dc2" in Datacenters', True),
        ('"dc3" not in Datacenters', True),
        ('Datacenters contains "dc1"', True),
        ('Datacenters not contains "dc1"', False),
        ('ID matches "^web-[0-9]+$"', True),
        ('ID not matches "^api"', True),
        ("ParentID is empty", True),
        ("Meta is not empty", True),
        ("Priority == 50 and Stop == false", True),
        ('Priority == 10 or Meta.owner == "bob"', True),
        ('not (Priority == 50) or ID == "x"', False),
        ('(Priority == 50 or ID == "x") and not Stop == true', True),
    ],
)
def test_expressions(expr: str, want: bool) -> None:
    assert compile_filter(expr).matches(JOB) is want


@pytest.mark.parametrize("expr", ["ID ==", "ID = 1", "(ID == a", "", "== a", "ID is full"])
def test_syntax_errors(expr: str) -> None:
    with pytest.raises(FilterSyntaxError, match="no match found"):
        compile_filter(expr)


def test_missing_map_key_error_text() -> None:
    with pytest.raises(FilterEvalError) as err:
        compile_filter('Meta.example == "x"').matches(JOB)
    assert str(err.value) == (
        'error finding value in datum: /Meta/example at part 1: couldn\'t find key "example"'
    )


def test_missing_struct_field() -> None:
    with pytest.raises(FilterEvalError, match="couldn't find struct field"):
        compile_filter("Nope == 1").matches(JOB)

"""Property tests for the three user-facing parsers: the HCL job parser, the ACL policy parser
and the filter expression parser. Any input gives a result or the parser's own error class
(which the APIs turn into a 400); any other exception would be a 500."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from services.scheduler.bexpr import FilterEvalError, FilterSyntaxError, compile_filter
from services.scheduler.jobspec.parse import JobParseError, parse_job
from services.secrets.policy import Policy, PolicyError, parse_policy

SETTINGS = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _joined(fragments: list[str], max_size: int = 60) -> st.SearchStrategy[str]:
    """Random sequences of grammar fragments: near-valid input reaches deeper than noise."""
    return st.lists(st.sampled_from(fragments) | st.text(max_size=4), max_size=max_size).map(
        "".join
    )


# --- HCL job parser -------------------------------------------------------------------------

HCL_FRAGMENTS = [
    'job "web" {',
    'job "',
    'group "g" {',
    'task "t" {',
    "}",
    "{",
    "\n",
    " ",
    'driver = "raw_exec"\n',
    "count = ",
    "count = 3\n",
    "-1",
    "1e400",
    "99999999999999999999999",
    'datacenters = ["dc1"]\n',
    "config {",
    'command = "/bin/sleep"\n',
    "args = [var.x]\n",
    'variable "x" {',
    'default = "1"\n',
    "type = string\n",
    "type = number\n",
    "type = list(string)\n",
    "locals {",
    "y = local.y\n",
    "z = var.undefined\n",
    "${",
    '"${var.x}"',
    "%{ if true }a%{ endif }",
    "[for s in var.x : upper(s)]",
    "{for k, v in {} : k => v}",
    'meta { a = "b" }\n',
    'resources { cpu = 100 memory = "x" }\n',
    'update { max_parallel = "two" }\n',
    'restart { delay = "-5s" }\n',
    'constraint { attribute = "${attr.kernel.name}" value = "linux" }\n',
    "<<EOT\nheredoc\nEOT\n",
    "# comment\n",
    "/* c */",
    '"\\u0000"',
    "null",
    "true",
    "a.b.c",
    "[",
    "]",
    "(",
    ")",
    "?",
    ":",
    "=",
    ",",
]
VAR_FRAGMENTS = ['x = "2"\n', "x = 5\n", "x = [1, 2]\n", "x = {}\n", 'y = "unknown"\n', "x {", "}"]


def _job_or_error(source: str, variables: str = "", flags: dict[str, str] | None = None) -> None:
    try:
        parsed = parse_job(source, variables, flags)
    except JobParseError:
        return
    assert isinstance(parsed.job, dict)


@SETTINGS
@given(st.text())
@example("")
@example('job "a" {}')
@example('job "a" { group "g" { count = 1e400 } }')
def test_jobspec_any_text(source: str) -> None:
    _job_or_error(source)


@SETTINGS
@given(
    _joined(HCL_FRAGMENTS),
    _joined(VAR_FRAGMENTS, 8),
    st.dictionaries(st.sampled_from(["x", "y", ""]) | st.text(max_size=3), st.text(), max_size=3),
)
def test_jobspec_hcl_like_text(source: str, variables: str, flags: dict[str, str]) -> None:
    _job_or_error(source, variables, flags)


@SETTINGS
@given(st.text(max_size=8), st.integers() | st.floats() | st.text(max_size=6))
def test_jobspec_valid_shape_odd_values(name: str, count: Any) -> None:
    # A well-formed job with an odd name and count: validation, not a crash.
    src = f'job {json.dumps(name)} {{ group "g" {{ count = {json.dumps(count)} }} }}'
    _job_or_error(src)


# --- ACL policy parser ----------------------------------------------------------------------

POLICY_FRAGMENTS = [
    'path "secret/*" {',
    'path "',
    "}",
    "{",
    "\n",
    'capabilities = ["read", "list"]\n',
    'capabilities = ["deny"]\n',
    'capabilities = "read"\n',
    "capabilities = [1]\n",
    'policy = "write"\n',
    'min_wrapping_ttl = "1h"\n',
    "max_wrapping_ttl = -1\n",
    'max_wrapping_ttl = "99999999999999999999h"\n',
    'allowed_parameters = { "*" = [] }\n',
    "denied_parameters = { a = [1, {}] }\n",
    'required_parameters = ["a"]\n',
    'name = "p"\n',
    '{"path": {"a/*": {"capabilities": ["read"]}}}',
    '{"path": ',
    "[",
    "]",
    '"+/x"',
    "*",
    "${x}",
    "<<EOT\n",
    "EOT\n",
    "1e999",
]


def _policy_or_error(text: str) -> None:
    try:
        result = parse_policy(text)
    except PolicyError:
        return
    assert isinstance(result, Policy)


@SETTINGS
@given(st.text())
def test_policy_any_text(text: str) -> None:
    _policy_or_error(text)


@SETTINGS
@given(_joined(POLICY_FRAGMENTS))
def test_policy_hcl_like_text(text: str) -> None:
    _policy_or_error(text)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["path", "capabilities", "policy", "a/*", "allowed_parameters"])
            | st.text(max_size=3),
            inner,
            max_size=3,
        )
    ),
    max_leaves=15,
)


@SETTINGS
@given(JSON_VALUES)
def test_policy_any_json(doc: Any) -> None:
    _policy_or_error(json.dumps(doc))


# --- filter expressions ---------------------------------------------------------------------

FILTER_FRAGMENTS = [
    "ID",
    "Status",
    "Meta.owner",
    "TaskGroups",
    "Datacenters",
    "Job.Name",
    " ",
    "==",
    "!=",
    " and ",
    " or ",
    "not ",
    " in ",
    " not in ",
    " contains ",
    " matches ",
    " not matches ",
    " is empty",
    " is not empty",
    '"a"',
    '"("',
    '"[a-"',
    '"\\',
    "`x`",
    "(",
    ")",
    "[",
    "]",
    ".",
    '["k"]',
    "1",
    "true",
]
DATUMS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["ID", "Status", "Meta", "owner", "Name", "Job", "Datacenters"])
            | st.text(max_size=3),
            inner,
            max_size=4,
        )
    ),
    max_leaves=15,
)


@SETTINGS
@given(st.text() | _joined(FILTER_FRAGMENTS, 20), DATUMS)
def test_filter_parse_and_eval(expression: str, datum: Any) -> None:
    try:
        flt = compile_filter(expression)
    except FilterSyntaxError:
        return
    with contextlib.suppress(FilterEvalError):
        assert isinstance(flt.matches(datum), bool)

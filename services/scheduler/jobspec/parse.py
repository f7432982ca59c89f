"""HCL2 job file -> Nomad's JSON job (api.Job before Canonicalize), with jobspec2's variables:
`variable` blocks, `locals`, var-file content and variable flags."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import hcl2
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput

from services.scheduler.jobspec.decode import attrs, blocks, decode, is_block_list
from services.scheduler.jobspec.hclexpr import Evaluator, HclError, Parser
from shared import jsonbody

INPUT = "input.hcl"
VARFILE = "variables.hcl"


class JobParseError(ValueError):
    """The message Nomad puts after "Failed to parse job: "."""


@dataclass
class Parsed:
    job: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Variable:
    name: str
    type: str = "any"
    default: Any = None
    has_default: bool = False
    validations: list[tuple[str, str]] = field(default_factory=list)


def _load(text: str, filename: str) -> dict[str, Any]:
    try:
        return hcl2.loads(text)
    except UnexpectedEOF:
        lines = text.splitlines() or [""]
        raise JobParseError(
            f"{filename}:{len(lines)},{len(lines[-1]) + 1}: Unclosed configuration block; There "
            "is no closing brace for this block before the end of the file."
        ) from None
    except (UnexpectedCharacters, UnexpectedInput) as exc:
        if getattr(getattr(exc, "token", None), "type", "") == "$END":
            lines = text.splitlines() or [""]
            raise JobParseError(
                f"{filename}:{len(lines)},{len(lines[-1]) + 1}: Unclosed configuration block; "
                "There is no closing brace for this block before the end of the file."
            ) from None
        line, col = getattr(exc, "line", 0), getattr(exc, "column", 0)
        raise JobParseError(
            f"{filename}:{line},{col}: Invalid syntax; The configuration could not be parsed "
            "at this position."
        ) from None
    except (LarkError, ValueError, TypeError, RuntimeError) as exc:
        # python-hcl2 reports some semantic errors (a repeated attribute) as RuntimeError.
        first = (str(exc).splitlines() or [""])[0]
        raise JobParseError(f"{filename}: Invalid syntax; {first}") from None


def _type_name(raw: Any) -> str:
    if isinstance(raw, str):
        s = raw[2:-1] if raw.startswith("${") and raw.endswith("}") else raw
        return s.strip().strip('"')
    return "any"


def _convert(var: _Variable, value: Any, *, from_flag: bool) -> Any:
    """Coerce a value to the declared type (flags arrive as strings)."""
    t = var.type
    base = t.split("(", 1)[0]
    if from_flag and isinstance(value, str) and base in ("list", "set", "map", "object", "tuple"):
        value = Evaluator({}).value("${" + value + "}")
    if base == "string":
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float):
            return str(value)
        if not isinstance(value, str):
            raise HclError(f'Invalid value for variable "{var.name}"; string required.')
        return value
    if base == "number":
        if isinstance(value, bool):
            raise HclError(f'Invalid value for variable "{var.name}"; a number is required.')
        if isinstance(value, int | float):
            return value
        try:
            return int(value)
        except (TypeError, ValueError):
            try:
                return float(value)
            except (TypeError, ValueError):
                raise HclError(
                    f'Invalid value for variable "{var.name}"; a number is required.'
                ) from None
    if base == "bool":
        if isinstance(value, bool):
            return value
        if value in ("true", "false"):
            return value == "true"
        raise HclError(f'Invalid value for variable "{var.name}"; a bool is required.')
    if base in ("list", "set", "tuple") and not isinstance(value, list):
        raise HclError(f'Invalid value for variable "{var.name}"; list of {t[5:-1]} required.')
    if base in ("map", "object") and not isinstance(value, dict):
        raise HclError(f'Invalid value for variable "{var.name}"; map required.')
    return value


def _declarations(top: dict[str, Any], ev: Evaluator) -> dict[str, _Variable]:
    out: dict[str, _Variable] = {}
    for labels, body in blocks(top.get("variable", []), ev):
        if len(labels) != 1:
            raise JobParseError(
                f"{INPUT}: Missing name for variable; All variable blocks must "
                "have 1 labels (name)."
            )
        name = labels[0]
        if name in out:
            raise JobParseError(
                f"{INPUT}: Duplicate variable; Duplicate {name} variable definition found."
            )
        var = _Variable(name=name)
        b = attrs(body)
        if "type" in b:
            var.type = _type_name(b["type"])
        if "default" in b:
            var.default = Evaluator({}).value(b["default"])
            var.has_default = True
        for _, vb in (
            blocks(b.get("validation", []), ev) if is_block_list(b.get("validation")) else []
        ):
            va = attrs(vb)
            cond = va.get("condition", "${true}")
            src = cond[2:-1] if isinstance(cond, str) and cond.startswith("${") else str(cond)
            msg = Evaluator({}).value(va.get("error_message", '"Invalid value."'))
            var.validations.append((src, str(msg)))
        out[name] = var
    return out


def _var_file(content: str) -> dict[str, Any]:
    text = content.strip()
    if not text:
        return {}
    if text.startswith("{"):
        # JSON variables obey the request body policy (a var file in HCL never starts with "{").
        try:
            data = jsonbody.loads(text, wide_ints="reject")
        except jsonbody.BodyError as exc:
            raise JobParseError(f"{VARFILE}: invalid JSON: {exc.detail}") from None
        if isinstance(data, dict):
            return data
    ev = Evaluator({})
    loaded = _load(content, VARFILE)
    out: dict[str, Any] = {}
    for k, v in attrs(loaded).items():
        if is_block_list(v):
            raise JobParseError(f'{VARFILE}: Unexpected "{k}" block; Blocks are not allowed here.')
        try:
            out[k] = ev.value(v)
        except HclError as exc:
            raise JobParseError(f"{VARFILE}: Variables not allowed; {exc}") from None
    return out


def parse_job(
    source: str,
    variables: str = "",
    variable_flags: dict[str, str] | None = None,
    *,
    strict: bool = False,
) -> Parsed:
    """jobspec2.ParseWithConfig: raises JobParseError with Nomad's diagnostic text."""
    warnings: list[str] = []
    top = _load(source, INPUT)
    ev0 = Evaluator({})
    for key in attrs(top):
        if key not in ("variable", "variables", "locals", "job"):
            raise JobParseError(
                f'{INPUT}: Unsupported block type; Blocks of type "{key}" are not expected here.'
            )
    try:
        decls = _declarations(top, ev0)
    except HclError as exc:
        raise JobParseError(f"{INPUT}: {exc}") from None

    values: dict[str, Any] = {n: v.default for n, v in decls.items() if v.has_default}
    supplied: list[tuple[dict[str, Any], bool]] = [(_var_file(variables), False)]
    if variable_flags:
        supplied.append((dict(variable_flags), True))
    for given, from_flag in supplied:
        for name, value in given.items():
            if name not in decls:
                msg = (
                    f'Undefined variable; A "{name}" variable was passed but was not found '
                    'in known variables. To declare variable "' + name + '", place this '
                    "block in your job files"
                )
                if strict:
                    raise JobParseError(f"{VARFILE}: {msg}")
                warnings.append(msg)
                continue
            try:
                values[name] = _convert(decls[name], value, from_flag=from_flag)
            except HclError as exc:
                raise JobParseError(f"{VARFILE}: {exc}") from None
    for name in decls:
        if name not in values:
            raise JobParseError(
                f'{INPUT}: Unset variable "{name}"; A used variable must be set or have a '
                "default value; see https://developer.hashicorp.com/nomad/docs/job-specification"
                "/hcl2/variables for details."
            )
    for name, var in decls.items():
        for cond, message in var.validations:
            try:
                ok = Evaluator(values).eval(Parser(cond).parse(), {})
            except HclError as exc:
                raise JobParseError(f"{INPUT}: Invalid validation condition; {exc}") from None
            if ok is not True:
                raise JobParseError(
                    f"{INPUT}: Invalid value for variable; {message}\n\nThis "
                    f"was checked by the validation rule at {name}."
                )

    locals_: dict[str, Any] = {}
    ev = Evaluator(values, locals_, set(decls))
    pending: dict[str, Any] = {}
    for _, body in blocks(top.get("locals", []), ev0) if is_block_list(top.get("locals")) else []:
        pending.update(attrs(body))
    # Locals may refer to each other in any order: resolve until no progress.
    while pending:
        progressed = False
        last_error: HclError | None = None
        for name in list(pending):
            try:
                locals_[name] = ev.value(pending[name])
            except HclError as exc:
                last_error = exc
                continue
            del pending[name]
            progressed = True
        if not progressed:
            raise JobParseError(f"{INPUT}: {last_error}")

    jobs = top.get("job")
    if not jobs or not is_block_list(jobs):
        raise JobParseError(f"{INPUT}: Missing job block; A job block is required.")
    found = blocks(jobs, ev)
    if len(found) > 1:
        raise JobParseError(
            f"{INPUT}: Duplicate job block; Only one job block is allowed in a file."
        )
    labels, body = found[0]
    if len(labels) != 1:
        raise JobParseError(
            f"{INPUT}: Missing name for job; All job blocks must have 1 labels (name)."
        )
    try:
        job = decode("Job", body, ev)
    except HclError as exc:
        raise JobParseError(f"{INPUT}: {exc}") from None
    job["ID"] = labels[0]
    if not job.get("Name"):
        job["Name"] = labels[0]
    return Parsed(job=_api_shape(job), warnings=warnings)


_JOB_FIELDS = (
    "Region",
    "Namespace",
    "ID",
    "ParentID",
    "Name",
    "Type",
    "Priority",
    "AllAtOnce",
    "Datacenters",
    "NodePool",
    "Constraints",
    "Affinities",
    "TaskGroups",
    "Update",
    "Multiregion",
    "Spreads",
    "Periodic",
    "ParameterizedJob",
    "Reschedule",
    "Migrate",
    "Meta",
    "SvcToken",
    "SvcNamespace",
    "MeshToken",
    "UI",
    "Stop",
    "Dispatched",
    "Payload",
    "SchedTokenID",
    "Status",
    "StatusDescription",
    "Stable",
    "Version",
    "SubmitTime",
    "CreateIndex",
    "ModifyIndex",
    "JobModifyIndex",
)


def _api_shape(job: dict[str, Any]) -> dict[str, Any]:
    """api.Job marshals every field; unset pointers are null."""
    return {k: job.get(k) for k in _JOB_FIELDS} | {
        k: v for k, v in job.items() if k not in _JOB_FIELDS
    }

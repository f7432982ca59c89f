"""Replaying steps against one server, and comparing two servers' answers to the same step.

The comparison is of shape, not values: the status code, and the keys of `data` (or of the
object a step picks), of `auth` and of `wrap_info`, and whether `warnings` is present. Values
differ between any two servers (ids, times, keys), shapes must not.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

import requests

from tests.conformance.steps import Pointer, Raw, Step

_VAR = re.compile(r"\{(\w+)\}")


@dataclass
class Answer:
    status: int
    body: Any  # parsed JSON, or None for an empty or non-JSON body


@dataclass
class Target:
    name: str
    addr: str
    root_token: str
    vars: dict[str, Any] = field(default_factory=dict)
    session: requests.Session = field(default_factory=requests.Session)

    def fill(self, value: Any) -> Any:
        if isinstance(value, str):
            # Only `{name}` of a saved value: HCL bodies keep their own braces.
            return _VAR.sub(lambda m: str(self.vars.get(m.group(1), m.group(0))), value)
        if isinstance(value, dict):
            return {k: self.fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.fill(v) for v in value]
        return value

    def send(self, step: Step) -> Answer:
        headers = {k: self.fill(v) for k, v in step.headers.items()}
        if step.token == "root":
            headers["X-Vault-Token"] = self.root_token
        elif step.token is not None:
            headers["X-Vault-Token"] = self.fill(step.token)
        data: bytes | None = None
        if isinstance(step.body, Raw):
            data = step.body.text.encode()
        elif step.body is not None:
            data = json.dumps(self.fill(step.body)).encode()
        if data is not None:
            # PATCH carries a JSON merge patch, as the CLI and hvac send it.
            json_type = "merge-patch+json" if step.method == "PATCH" else "json"
            headers.setdefault("Content-Type", f"application/{json_type}")
        r = self.session.request(
            step.method,
            f"{self.addr}/v1/{self.fill(step.path)}",
            headers=headers,
            data=data,
            timeout=60,
        )
        try:
            body = r.json() if r.content else None
        except ValueError:
            body = None
        return Answer(r.status_code, body)

    def run(self, step: Step) -> Answer:
        answer = self.send(step)
        if step.until is not None:
            deadline = time.monotonic() + 20
            while not step.until(answer.status, answer.body):
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.name}: {step.id} never reached its condition")
                time.sleep(0.1)
                answer = self.send(step)
        for name, pointer in step.save.items():
            value = dig(answer.body, pointer)
            if value is None:
                raise AssertionError(
                    f"{self.name}: step {step.id} has no {pointer} to save "
                    f"({answer.status} {answer.body})"
                )
            self.vars[name] = value
        return answer


def dig(body: Any, pointer: Pointer) -> Any:
    for part in pointer:
        if isinstance(part, int) and isinstance(body, list) and len(body) > part:
            body = body[part]
        elif isinstance(part, str) and isinstance(body, dict):
            body = body.get(part)
        else:
            return None
    return body


@dataclass(frozen=True)
class Difference:
    """One way Trellis's answer to a step differs from OpenBao's."""

    step: str
    kind: str  # status | missing | extra | oracle
    detail: str  # "200 != 204", or the dotted key

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.step, self.kind, self.detail)


def _keys(value: Any) -> set[str] | None:
    return set(value) if isinstance(value, dict) else None


def _is_envelope(body: Any) -> bool:
    return isinstance(body, dict) and "request_id" in body and "data" in body


def shape(step: Step, answer: Answer) -> dict[str, set[str] | None]:
    """What is compared of one answer: named groups of keys (None when absent)."""
    body = answer.body
    if answer.status >= 400 or body is None:
        return {}
    if step.pick is not None:
        return {"pick": _keys(dig(body, step.pick))}
    if not _is_envelope(body):
        return {"body": _keys(body)}
    return {
        "data": _keys(body.get("data")),
        "auth": _keys(body.get("auth")),
        "wrap_info": _keys(body.get("wrap_info")),
        "warnings": {"present"} if body.get("warnings") else None,
    }


def compare(step: Step, bao: Answer, trellis: Answer) -> list[Difference]:
    if bao.status != trellis.status:
        return [Difference(step.id, "status", f"{bao.status} != {trellis.status}")]
    out: list[Difference] = []
    theirs, ours = shape(step, bao), shape(step, trellis)
    for group in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(group), ours.get(group)
        if a == b:
            continue
        if a is not None and b is None:
            out.append(Difference(step.id, "missing", group))
        elif a is None and b is not None:
            out.append(Difference(step.id, "extra", group))
        else:
            assert a is not None and b is not None
            out += [Difference(step.id, "missing", f"{group}.{k}") for k in sorted(a - b)]
            out += [Difference(step.id, "extra", f"{group}.{k}") for k in sorted(b - a)]
    return out

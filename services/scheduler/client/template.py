"""The consul-template subset Nomad jobs use for secrets: text with {{ actions }}:
`with secret "path"` ... `end` (the block runs with the secret's response as `.`; skipped when
the secret is missing), `.Data.data.key` style field paths, `range $k, $v := .Data.data`,
`env "NAME"`, `{{-`/`-}}` whitespace trimming, and `if`/`else` on a field; `with nomadVar
"path"` reads Nomad Variables (`.` is the items). Parsing is pure:
`secret_paths` lists what to fetch, `render` fills in what was fetched."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

VAR_PREFIX = "nomadvar:"  # as services/scheduler/variables/workload.py
_ACTION = re.compile(r"\{\{(-\s*)?(.*?)(\s*-)?\}\}", re.DOTALL)


class TemplateError(ValueError):
    pass


@dataclass
class Node:
    kind: str  # "text" | "field" | "var" | "env" | "with" | "range" | "if"
    arg: str = ""
    args: list[str] = field(default_factory=list)
    body: list[Node] = field(default_factory=list)
    other: list[Node] = field(default_factory=list)  # else branch


def _tokens(src: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    for m in _ACTION.finditer(src):
        text = src[pos : m.start()]
        if m.group(1):
            text = text.rstrip()
        if out and out[-1][0] == "trim-next":
            out.pop()
            text = text.lstrip()
        if text:
            out.append(("text", text))
        out.append(("action", m.group(2).strip()))
        if m.group(3):
            out.append(("trim-next", ""))
        pos = m.end()
    tail = src[pos:]
    if out and out[-1][0] == "trim-next":
        out.pop()
        tail = tail.lstrip()
    if tail:
        out.append(("text", tail))
    return out


def parse(src: str) -> list[Node]:
    if not isinstance(src, str):
        raise TemplateError("template must be text")
    stack: list[tuple[Node | None, list[Node]]] = [(None, [])]
    for kind, value in _tokens(src):
        body = stack[-1][1]
        if kind == "text":
            body.append(Node("text", value))
            continue
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise TemplateError(f"bad action {{{{ {value} }}}}: {exc}") from None
        if not words:
            raise TemplateError("empty action {{ }}")
        head = words[0]
        if head == "end":
            if len(stack) == 1:
                raise TemplateError("unexpected {{ end }}")
            stack.pop()
        elif head == "else":
            node = stack[-1][0]
            if node is None or node.kind not in ("if", "with", "withvar"):
                raise TemplateError("unexpected {{ else }}")
            stack[-1] = (node, node.other)
        elif head == "with" and len(words) == 3 and words[1] == "secret":
            node = Node("with", words[2])
            body.append(node)
            stack.append((node, node.body))
        elif head == "with" and len(words) == 3 and words[1] == "nomadVar":
            node = Node("withvar", words[2])  # Nomad Variables: `.` is the items
            body.append(node)
            stack.append((node, node.body))
        elif head == "if" and len(words) == 2:
            node = Node("if", words[1])
            body.append(node)
            stack.append((node, node.body))
        elif head == "range" and len(words) == 5 and words[3] == ":=":
            node = Node("range", words[4], [words[1].rstrip(","), words[2]])
            body.append(node)
            stack.append((node, node.body))
        elif head == "env" and len(words) == 2:
            body.append(Node("env", words[1]))
        elif head.startswith(".") and len(words) == 1:
            body.append(Node("field", head))
        elif head.startswith("$") and len(words) == 1:
            body.append(Node("var", head))
        else:
            raise TemplateError(f"unsupported action {{{{ {value} }}}}")
    if len(stack) != 1:
        raise TemplateError("unclosed block: missing {{ end }}")
    return stack[0][1]


def secret_paths(nodes: list[Node]) -> list[str]:
    out: list[str] = []
    for n in nodes:
        if n.kind == "with" and n.arg not in out:
            out.append(n.arg)
        if n.kind == "withvar" and VAR_PREFIX + n.arg not in out:
            out.append(VAR_PREFIX + n.arg)  # fetched with the secrets, told apart by the prefix
        for p in secret_paths(n.body) + secret_paths(n.other):
            if p not in out:
                out.append(p)
    return out


def _lookup(dot: Any, path: str) -> Any:
    cur = dot
    for part in [p for p in path.split(".") if p]:
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _show(value: Any) -> str:
    if value is None:
        return "<no value>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{k}:{_show(v)}" for k, v in sorted(value.items())) + "]"
    return str(value)


def render(
    nodes: list[Node],
    secrets: Mapping[str, Any],
    env: Mapping[str, str],
    dot: Any = None,
    vars_: dict[str, Any] | None = None,
) -> str:
    """`secrets` maps a path to its API response ({"data": ...}); consul-template's view of it
    is {"Data": response data}."""
    vars_ = dict(vars_ or {})
    out: list[str] = []
    for n in nodes:
        if n.kind == "text":
            out.append(n.arg)
        elif n.kind == "field":
            out.append(_show(_lookup(dot, n.arg)))
        elif n.kind == "var":
            name, _, rest = n.arg.partition(".")
            out.append(_show(_lookup(vars_.get(name), rest) if rest else vars_.get(name)))
        elif n.kind == "env":
            out.append(env.get(n.arg, ""))
        elif n.kind == "with":
            resp = secrets.get(n.arg)
            if resp is not None:
                out.append(render(n.body, secrets, env, {"Data": resp.get("data")}, vars_))
            else:
                out.append(render(n.other, secrets, env, dot, vars_))
        elif n.kind == "withvar":
            items = secrets.get(VAR_PREFIX + n.arg)
            if items is not None:
                out.append(render(n.body, secrets, env, items, vars_))
            else:
                out.append(render(n.other, secrets, env, dot, vars_))
        elif n.kind == "if":
            value = _lookup(dot, n.arg) if n.arg.startswith(".") else vars_.get(n.arg)
            branch = n.body if value else n.other
            out.append(render(branch, secrets, env, dot, vars_))
        elif n.kind == "range":
            coll = _lookup(dot, n.arg)
            if isinstance(coll, Mapping):
                kname, vname = n.args
                for k in sorted(coll):
                    out.append(
                        render(n.body, secrets, env, dot, {**vars_, kname: k, vname: coll[k]})
                    )
    return "".join(out)


def env_lines(text: str) -> dict[str, str]:
    """An env=true template's output: KEY=VALUE lines (comments and blanks skipped), as
    Nomad reads them."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        k = k.strip()
        if k.startswith("export "):
            k = k[7:].strip()
        v = v.strip()
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
            v = v[1:-1]
        out[k] = v
    return out

"""A small HCL2 expression evaluator for the strings python-hcl2 leaves behind.

python-hcl2 returns quoted literals as '"text"' and expressions as '${expr}'. Jobspec2 only
evaluates `var.*`, `local.*` and functions; runtime references such as `${attr.kernel.name}`,
`${node.unique.id}` or `${NOMAD_ALLOC_ID}` are kept verbatim for the client to interpolate.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared import jsonbody


class HclError(ValueError):
    """A diagnostic in Nomad's words (summary; detail)."""


KNOWN_ROOTS = {"var", "local"}


# ---------------------------------------------------------------- tokens

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<num>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_-]*)
    | (?P<op>\.\.\.|==|!=|<=|>=|&&|\|\||=>|[-+*/%<>!?:.,()\[\]{}=])
    | (?P<str>")
    )""",
    re.X,
)


@dataclass(slots=True)
class Tok:
    kind: str  # num, ident, op, str, end
    value: Any
    pos: int


def _scan_string(src: str, start: int) -> tuple[str, int]:
    """Return the raw body of a quoted string starting after the quote, honouring nested ${}."""
    i, depth = start, 0
    while i < len(src):
        c = src[i]
        if c == "\\" and depth == 0:
            i += 2
            continue
        if src.startswith("${", i) or src.startswith("%{", i):
            if src.startswith("$${", i) or src.startswith("%%{", i):
                i += 3
                continue
            depth += 1
            i += 2
            continue
        if c == "}" and depth:
            depth -= 1
        elif c == '"' and depth == 0:
            return src[start:i], i + 1
        elif c == '"' and depth:
            _, i = _scan_string(src, i + 1)
            continue
        i += 1
    raise HclError("Unterminated template string; No closing marker was found for the string.")


def tokenize(src: str) -> list[Tok]:
    toks: list[Tok] = []
    pos = 0
    while True:
        while pos < len(src) and src[pos].isspace():
            pos += 1
        if pos >= len(src):
            break
        m = _TOKEN.match(src, pos)
        if not m:
            raise HclError(
                f"Invalid character; This character is not used within the language: {src[pos]!r}"
            )
        if m.group("num"):
            text = m.group("num")
            val: Any = float(text) if any(c in text for c in ".eE") else int(text)
            toks.append(Tok("num", val, m.start("num")))
            pos = m.end()
        elif m.group("ident"):
            toks.append(Tok("ident", m.group("ident"), m.start("ident")))
            pos = m.end()
        elif m.group("op"):
            toks.append(Tok("op", m.group("op"), m.start("op")))
            pos = m.end()
        else:
            body, pos = _scan_string(src, m.end())
            toks.append(Tok("str", body, m.start("str")))
    toks.append(Tok("end", None, len(src)))
    return toks


# ---------------------------------------------------------------- AST

Node = tuple  # (kind, ...) tuples keep the evaluator tiny


class Parser:
    def __init__(self, src: str) -> None:
        self.src = src
        self.toks = tokenize(src)
        self.i = 0

    def peek(self, value: str | None = None) -> bool:
        t = self.toks[self.i]
        return t.kind == "op" and (value is None or t.value == value)

    def take(self) -> Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, value: str) -> None:
        t = self.take()
        if not (t.kind == "op" and t.value == value):
            got = "end of expression" if t.kind == "end" else repr(t.value)
            raise HclError(f"Invalid expression; Expected {value!r}, got {got}.")

    def parse(self) -> Node:
        node = self.expr()
        if self.toks[self.i].kind != "end":
            raise HclError(
                f"Extra characters after expression: {self.src[self.toks[self.i].pos :]!r}"
            )
        return node

    def expr(self) -> Node:
        cond = self.binary(0)
        if self.peek("?"):
            self.take()
            a = self.expr()
            self.expect(":")
            b = self.expr()
            return ("cond", cond, a, b)
        return cond

    _LEVELS = (("||",), ("&&",), ("==", "!="), ("<", "<=", ">", ">="), ("+", "-"), ("*", "/", "%"))

    def binary(self, level: int) -> Node:
        if level == len(self._LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.toks[self.i].kind == "op" and self.toks[self.i].value in self._LEVELS[level]:
            op = self.take().value
            left = ("bin", op, left, self.binary(level + 1))
        return left

    def unary(self) -> Node:
        if self.peek("!") or self.peek("-"):
            op = self.take().value
            return ("un", op, self.unary())
        return self.postfix(self.primary())

    def postfix(self, node: Node) -> Node:
        while True:
            if self.peek("."):
                self.take()
                t = self.take()
                if t.kind == "ident":
                    node = ("attr", node, t.value)
                elif t.kind == "num":
                    node = ("index", node, ("lit", t.value))
                elif t.kind == "op" and t.value == "*":
                    node = ("splat", node)
                else:
                    raise HclError(
                        "Invalid attribute name; An attribute name is required after a dot."
                    )
            elif self.peek("["):
                self.take()
                if self.peek("*"):
                    self.take()
                    self.expect("]")
                    node = ("splat", node)
                    continue
                idx = self.expr()
                self.expect("]")
                node = ("index", node, idx)
            else:
                return node

    def primary(self) -> Node:
        t = self.take()
        if t.kind == "num":
            return ("lit", t.value)
        if t.kind == "str":
            return ("tmpl", parse_template(t.value))
        if t.kind == "ident":
            if t.value == "true":
                return ("lit", True)
            if t.value == "false":
                return ("lit", False)
            if t.value == "null":
                return ("lit", None)
            if self.peek("("):
                self.take()
                args: list[Node] = []
                expand = False
                while not self.peek(")"):
                    args.append(self.expr())
                    if self.peek("..."):
                        self.take()
                        expand = True
                    if self.peek(","):
                        self.take()
                    elif not self.peek(")"):
                        raise HclError("Missing argument separator; A comma is required.")
                self.take()
                return ("call", t.value, args, expand)
            return ("ref", t.value)
        if t.kind == "op" and t.value == "(":
            inner = self.expr()
            self.expect(")")
            return inner
        if t.kind == "op" and t.value == "[":
            if self.toks[self.i].kind == "ident" and self.toks[self.i].value == "for":
                return self.for_expr("]")
            items: list[Node] = []
            while not self.peek("]"):
                items.append(self.expr())
                if self.peek(","):
                    self.take()
                elif not self.peek("]"):
                    raise HclError("Missing item separator; Expected a comma.")
            self.take()
            return ("tuple", items)
        if t.kind == "op" and t.value == "{":
            if self.toks[self.i].kind == "ident" and self.toks[self.i].value == "for":
                return self.for_expr("}")
            pairs: list[tuple[Node, Node]] = []
            while not self.peek("}"):
                kt = self.toks[self.i]
                if (
                    kt.kind == "ident"
                    and self.toks[self.i + 1].kind == "op"
                    and self.toks[self.i + 1].value in ("=", ":")
                ):
                    self.take()
                    key: Node = ("lit", kt.value)
                else:
                    key = self.expr()
                if not (self.peek("=") or self.peek(":")):
                    raise HclError("Missing key/value separator; Expected an equals sign.")
                self.take()
                pairs.append((key, self.expr()))
                if self.peek(","):
                    self.take()
            self.take()
            return ("object", pairs)
        got = "end of expression" if t.kind == "end" else repr(t.value)
        raise HclError(f"Invalid expression; Expected the start of an expression, but found {got}.")

    def for_expr(self, close: str) -> Node:
        self.take()  # for
        names = [self.take().value]
        if self.peek(","):
            self.take()
            names.append(self.take().value)
        t = self.take()
        if t.value != "in":
            raise HclError("Invalid 'for' expression; 'in' keyword is required.")
        coll = self.expr()
        self.expect(":")
        key = None
        val = self.expr()
        if close == "}":
            self.expect("=>")
            key, val = val, self.expr()
        cond = None
        if self.toks[self.i].kind == "ident" and self.toks[self.i].value == "if":
            self.take()
            cond = self.expr()
        self.expect(close)
        return ("for", names, coll, key, val, cond)


# ---------------------------------------------------------------- templates

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            n = text[i + 1]
            if n in _ESCAPES:
                out.append(_ESCAPES[n])
                i += 2
                continue
            if n == "u" and i + 6 <= len(text):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            if n == "U" and i + 10 <= len(text):
                out.append(chr(int(text[i + 2 : i + 10], 16)))
                i += 10
                continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_template(body: str, *, escapes: bool = True) -> list[Any]:
    """Split a template into literal strings and ("interp", source) parts."""
    parts: list[Any] = []
    buf: list[str] = []
    i = 0
    while i < len(body):
        if body.startswith("$${", i) or body.startswith("%%{", i):
            buf.append(body[i + 1 : i + 3])
            i += 3
            continue
        if body.startswith("${", i) or body.startswith("%{", i):
            depth, j = 1, i + 2
            while j < len(body) and depth:
                if body[j] == '"':
                    _, j = _scan_string(body, j + 1)
                    continue
                if body[j] == "{":
                    depth += 1
                elif body[j] == "}":
                    depth -= 1
                j += 1
            if depth:
                raise HclError("Unterminated template string; No closing marker was found.")
            if buf:
                text = "".join(buf)
                parts.append(_unescape(text) if escapes else text)
                buf = []
            kind = "interp" if body[i] == "$" else "directive"
            parts.append((kind, body[i + 2 : j - 1].strip().strip("~").strip()))
            i = j
            continue
        buf.append(body[i])
        i += 1
    if buf:
        text = "".join(buf)
        parts.append(_unescape(text) if escapes else text)
    return parts


# ---------------------------------------------------------------- evaluation


class _Opaque(Exception):
    """The expression refers to a runtime value (attr, node, meta, NOMAD_*): keep it verbatim."""


class Evaluator:
    def __init__(
        self,
        variables: dict[str, Any],
        locals_: dict[str, Any] | None = None,
        declared: set[str] | None = None,
    ) -> None:
        self.vars = variables
        self.locals = locals_ if locals_ is not None else {}
        self.declared = declared if declared is not None else set(variables)

    # -- entry points

    def value(self, raw: Any) -> Any:
        """Evaluate one value as python-hcl2 returned it."""
        if isinstance(raw, str):
            if raw.startswith('"') and raw.endswith('"') and len(raw) >= 2:
                inner = raw[1:-1]
                if inner.startswith("<<"):
                    return self._heredoc(inner)
                return self.template(parse_template(inner))
            if raw.startswith("${") and raw.endswith("}"):
                src = raw[2:-1]
                try:
                    return self.eval(Parser(src).parse(), {})
                except _Opaque:
                    return raw
            return raw
        if isinstance(raw, list):
            return [self.value(v) for v in raw]
        if isinstance(raw, dict):
            return {self.key(k): self.value(v) for k, v in raw.items() if not _meta_key(k)}
        return raw

    def key(self, raw: str) -> str:
        if raw.startswith('"') and raw.endswith('"') and len(raw) >= 2:
            return _unescape(raw[1:-1])
        if raw.startswith("${") and raw.endswith("}"):
            return str(self.eval(Parser(raw[2:-1]).parse(), {}))
        return raw

    def _heredoc(self, inner: str) -> str:
        first, _, rest = inner.partition("\n")
        marker = first[2:]
        indent = marker.startswith("-")
        marker = marker.lstrip("-").strip()
        body = rest
        if body.rstrip().endswith(marker):
            body = body.rstrip()[: -len(marker)]
        if indent:
            lines = body.split("\n")
            pad = min((len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()), default=0)
            body = "\n".join(ln[pad:] for ln in lines)
        return self.template(parse_template(body, escapes=False))

    def template(self, parts: list[Any], scope: dict[str, Any] | None = None) -> Any:
        scope = scope or {}
        if len(parts) == 1 and isinstance(parts[0], tuple) and parts[0][0] == "interp":
            # A lone interpolation keeps its type ("${var.count}" is a number).
            try:
                return self.eval(Parser(parts[0][1]).parse(), scope)
            except _Opaque:
                return "${" + parts[0][1] + "}"
        out: list[str] = []
        for p in parts:
            if isinstance(p, str):
                out.append(p)
            elif p[0] == "directive":
                raise HclError(
                    "Unsupported template directive; %{...} directives are not supported."
                )
            else:
                try:
                    out.append(_to_string(self.eval(Parser(p[1]).parse(), scope)))
                except _Opaque:
                    out.append("${" + p[1] + "}")
        return "".join(out)

    # -- the tree walker

    def eval(self, node: Node, scope: dict[str, Any]) -> Any:
        kind = node[0]
        if kind == "lit":
            return node[1]
        if kind == "tmpl":
            return self.template(node[1], scope)
        if kind == "ref":
            name = node[1]
            if name in scope:
                return scope[name]
            if name in KNOWN_ROOTS:
                return _Root(name)
            raise _Opaque()
        if kind == "attr":
            base = self.eval(node[1], scope)
            return self._get(base, node[2])
        if kind == "index":
            base = self.eval(node[1], scope)
            return self._get(base, self.eval(node[2], scope))
        if kind == "splat":
            base = self.eval(node[1], scope)
            return list(base) if isinstance(base, list) else [base]
        if kind == "tuple":
            return [self.eval(n, scope) for n in node[1]]
        if kind == "object":
            return {_to_string(self.eval(k, scope)): self.eval(v, scope) for k, v in node[1]}
        if kind == "un":
            v = self.eval(node[2], scope)
            if node[1] == "!":
                if not isinstance(v, bool):
                    raise HclError(
                        "Invalid operand; Unsuitable value for unary operand: bool required."
                    )
                return not v
            return -_num(v)
        if kind == "bin":
            return self._binary(node[1], node[2], node[3], scope)
        if kind == "cond":
            c = self.eval(node[1], scope)
            if not isinstance(c, bool):
                raise HclError(
                    "Incorrect condition type; The condition expression must be of type bool."
                )
            return self.eval(node[2] if c else node[3], scope)
        if kind == "call":
            return self._call(node[1], node[2], node[3], scope)
        if kind == "for":
            return self._for(node, scope)
        raise HclError(f"Unsupported expression {kind}")

    def _get(self, base: Any, key: Any) -> Any:
        if isinstance(base, _Root):
            table = self.vars if base.name == "var" else self.locals
            if base.name == "var" and key not in self.declared:
                raise HclError(
                    f"Reference to undeclared input variable; An input variable with the name "
                    f'"{key}" has not been declared.'
                )
            if base.name == "local" and key not in table:
                raise HclError(
                    f'Reference to undeclared local value; A local value with the name "{key}" '
                    "has not been declared."
                )
            if key not in table:
                raise HclError(
                    f'Unset variable "{key}"; A used variable must be set or have a default value.'
                )
            return table[key]
        if isinstance(base, dict):
            if str(key) not in base:
                raise HclError(
                    f'Unsupported attribute; This object does not have an attribute named "{key}".'
                )
            return base[str(key)]
        if isinstance(base, list):
            try:
                return base[int(key)]
            except (ValueError, IndexError):
                raise HclError(
                    "Invalid index; The given key does not identify an element in this "
                    "collection value."
                ) from None
        raise HclError("Unsupported attribute; Can't access attributes on a primitive-typed value.")

    def _binary(self, op: str, ln: Node, rn: Node, scope: dict[str, Any]) -> Any:
        if op == "&&":
            return _bool(self.eval(ln, scope)) and _bool(self.eval(rn, scope))
        if op == "||":
            return _bool(self.eval(ln, scope)) or _bool(self.eval(rn, scope))
        a, b = self.eval(ln, scope), self.eval(rn, scope)
        if op == "==":
            return a == b
        if op == "!=":
            return a != b
        x, y = _num(a), _num(b)
        if op == "+":
            return _norm(x + y)
        if op == "-":
            return _norm(x - y)
        if op == "*":
            return _norm(x * y)
        if op == "/":
            if y == 0:
                raise HclError("Operation failed; Error during operation: divide by zero.")
            return _norm(x / y)
        if op == "%":
            return _norm(math.fmod(x, y))
        return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]

    def _call(self, name: str, args: list[Node], expand: bool, scope: dict[str, Any]) -> Any:
        fn = FUNCTIONS.get(name)
        if fn is None:
            raise HclError(f'Call to unknown function; There is no function named "{name}".')
        values = [self.eval(a, scope) for a in args]
        if expand and values:
            values = values[:-1] + list(values[-1])
        try:
            return fn(*values)
        except HclError:
            raise
        except Exception as exc:
            raise HclError(
                f'Error in function call; Call to function "{name}" failed: {exc}.'
            ) from None

    def _for(self, node: Node, scope: dict[str, Any]) -> Any:
        _, names, coll_n, key_n, val_n, cond_n = node
        coll = self.eval(coll_n, scope)
        items = list(coll.items()) if isinstance(coll, dict) else list(enumerate(coll))
        out_list: list[Any] = []
        out_map: dict[str, Any] = {}
        for k, v in items:
            inner = dict(scope)
            if len(names) == 2:
                inner[names[0]], inner[names[1]] = k, v
            else:
                inner[names[0]] = v
            if cond_n is not None and not _bool(self.eval(cond_n, inner)):
                continue
            if key_n is None:
                out_list.append(self.eval(val_n, inner))
            else:
                out_map[_to_string(self.eval(key_n, inner))] = self.eval(val_n, inner)
        return out_list if key_n is None else out_map


@dataclass(frozen=True, slots=True)
class _Root:
    name: str


def _meta_key(k: str) -> bool:
    return k.startswith("__") and k.endswith("__")


def _num(v: Any) -> float | int:
    if isinstance(v, bool):
        raise HclError("Invalid operand; Unsuitable value: a number is required.")
    if isinstance(v, int | float):
        return v
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            try:
                return float(v)
            except ValueError:
                pass
    raise HclError("Invalid operand; Unsuitable value: a number is required.")


def _norm(v: float | int) -> float | int:
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if v in ("true", "false"):
        return v == "true"
    raise HclError("Invalid operand; Unsuitable value: a bool is required.")


def _to_string(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(_norm(v)) if not v.is_integer() else str(int(v))
    if v is None:
        raise HclError("Invalid template interpolation value; The expression result is null.")
    if isinstance(v, list | dict):
        raise HclError(
            "Invalid template interpolation value; Cannot include the given value in a "
            "string template: string required."
        )
    return str(v)


def _format(fmt: str, *args: Any) -> str:
    it = iter(args)

    def sub(m: re.Match[str]) -> str:
        verb = m.group(1)
        if verb == "%":
            return "%"
        v = next(it)
        if verb == "q":
            return json.dumps(_to_string(v))
        if verb == "d":
            return str(int(_num(v)))
        if verb in ("f",):
            return f"{float(_num(v)):f}"
        return _to_string(v) if not isinstance(v, list | dict) else json.dumps(v)

    return re.sub(r"%([%vsdqtf])", sub, fmt)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "upper": lambda s: s.upper(),
    "lower": lambda s: s.lower(),
    "title": lambda s: s.title(),
    "trimspace": lambda s: s.strip(),
    "trimprefix": lambda s, p: s[len(p) :] if s.startswith(p) else s,
    "trimsuffix": lambda s, p: s[: -len(p)] if p and s.endswith(p) else s,
    "replace": lambda s, a, b: s.replace(a, b),
    "format": _format,
    "join": lambda sep, *lists: sep.join(_to_string(x) for lst in lists for x in lst),
    "split": lambda sep, s: s.split(sep),
    "concat": lambda *lists: [x for lst in lists for x in lst],
    "length": lambda v: len(v),
    "lookup": lambda m, k, *d: m[k] if k in m else (d[0] if d else m[k]),
    "merge": lambda *ms: {k: v for m in ms for k, v in m.items()},
    "coalesce": lambda *vs: next(v for v in vs if v not in (None, "")),
    "tostring": _to_string,
    "tonumber": _num,
    "tobool": _bool,
    "tolist": list,
    "toset": lambda v: sorted(set(v), key=str),
    "tomap": dict,
    "abs": abs,
    "max": max,
    "min": min,
    "ceil": lambda v: math.ceil(v),
    "floor": lambda v: math.floor(v),
    "contains": lambda lst, v: v in lst,
    "keys": lambda m: sorted(m),
    "values": lambda m: [m[k] for k in sorted(m)],
    "jsonencode": lambda v: json.dumps(v, separators=(",", ":")),
    "jsondecode": lambda text: jsonbody.loads(text, wide_ints="reject"),  # the body policy
    "range": lambda *a: list(range(*(int(x) for x in a))),
    "element": lambda lst, i: lst[int(i) % len(lst)],
    "substr": lambda s, off, n: s[int(off) : None if int(n) < 0 else int(off) + int(n)],
    "distinct": lambda lst: list(dict.fromkeys(lst)),
    "flatten": lambda lst: [y for x in lst for y in (x if isinstance(x, list) else [x])],
    "compact": lambda lst: [x for x in lst if x not in (None, "")],
    "reverse": lambda lst: list(reversed(lst)),
    "sort": lambda lst: sorted(lst),
}

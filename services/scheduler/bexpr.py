"""go-bexpr filter expressions, evaluated against a datum in Nomad's JSON shape (Go field
names). Errors carry go-bexpr's wording so Nomad's HTTP messages can wrap them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# Fields that are Go maps: a missing key is "couldn't find key", elsewhere a missing name is
# "couldn't find struct field".
MAP_FIELDS = {
    "Meta",
    "Env",
    "Config",
    "GetterOptions",
    "GetterHeaders",
    "Attributes",
    "Drivers",
    "Links",
    "Volumes",
    "TaskStates",
    "QueuedAllocations",
    "Summary",
    "TaskGroups:map",
    "Details",
    "FailedTGAllocs",
    "ClassEligibility",
    "Header",
}


class FilterSyntaxError(ValueError):
    """The expression does not parse (`failed to read filter expression: ...`)."""


class FilterEvalError(ValueError):
    """A selector could not be resolved against a datum (`error finding value in datum: ...`)."""


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<lp>\() | (?P<rp>\))
    | (?P<op>==|!=)
    | (?P<dq>"(?:[^"\\]|\\.)*")
    | (?P<bq>`[^`]*`)
    | (?P<lb>\[) | (?P<rb>\])
    | (?P<dot>\.)
    | (?P<word>[A-Za-z0-9_\-/:+@]+)
    )""",
    re.X,
)
KEYWORDS = {"and", "or", "not", "in", "contains", "matches", "is", "empty"}


@dataclass(slots=True)
class _Tok:
    kind: str
    text: str
    pos: int


def _tokens(src: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    while pos < len(src):
        if src[pos:].strip() == "":
            break
        m = _TOKEN.match(src, pos)
        if not m or m.end() == pos:
            raise _syntax(src, pos)
        kind = m.lastgroup or ""
        out.append(_Tok(kind, m.group(kind), m.start(kind)))
        pos = m.end()
    out.append(_Tok("end", "", len(src)))
    return out


def _syntax(src: str, pos: int) -> FilterSyntaxError:
    line = src.count("\n", 0, pos) + 1
    col = pos - (src.rfind("\n", 0, pos) + 1) + 1
    return FilterSyntaxError(
        f'{line}:{col} ({pos}): no match found, expected: "!=", "(", '
        '"==", "contains", "in", "is", "matches", "not" or [ \\t\\r\\n]'
    )


# ------------------------------------------------------------------ AST and parser

Selector = list[str]


@dataclass(frozen=True, slots=True)
class Match:
    op: str  # ==, !=, empty, notempty, in, notin, contains, notcontains, matches, notmatches
    selector: tuple[str, ...]
    value: str | None
    regex: re.Pattern[str] | None = None


@dataclass(frozen=True, slots=True)
class BoolOp:
    op: str  # and, or, not
    args: tuple[Any, ...]


class _Parser:
    def __init__(self, src: str) -> None:
        self.src = src
        self.toks = _tokens(src)
        self.i = 0

    def _peek(self) -> _Tok:
        return self.toks[self.i]

    def _is_word(self, word: str, at: int = 0) -> bool:
        t = self.toks[self.i + at] if self.i + at < len(self.toks) else self.toks[-1]
        return t.kind == "word" and t.text == word

    def _fail(self) -> FilterSyntaxError:
        return _syntax(self.src, self._peek().pos)

    def parse(self) -> Any:
        if self._peek().kind == "end":
            raise self._fail()
        node = self._or()
        if self._peek().kind != "end":
            raise self._fail()
        return node

    def _or(self) -> Any:
        left = self._and()
        while self._is_word("or"):
            self.i += 1
            left = BoolOp("or", (left, self._and()))
        return left

    def _and(self) -> Any:
        left = self._not()
        while self._is_word("and"):
            self.i += 1
            left = BoolOp("and", (left, self._not()))
        return left

    def _not(self) -> Any:
        if self._is_word("not"):
            self.i += 1
            return BoolOp("not", (self._not(),))
        if self._peek().kind == "lp":
            self.i += 1
            node = self._or()
            if self._peek().kind != "rp":
                raise self._fail()
            self.i += 1
            return node
        return self._match()

    def _value(self) -> str:
        t = self._peek()
        if t.kind == "dq":
            self.i += 1
            return bytes(t.text[1:-1], "utf-8").decode("unicode_escape")
        if t.kind == "bq":
            self.i += 1
            return t.text[1:-1]
        if t.kind == "word" and t.text not in KEYWORDS:
            self.i += 1
            return t.text
        raise self._fail()

    def _selector(self) -> tuple[str, ...]:
        t = self._peek()
        if t.kind != "word" or t.text in KEYWORDS or not re.match(r"[A-Za-z_]", t.text):
            raise self._fail()
        parts = [t.text]
        self.i += 1
        while True:
            t = self._peek()
            if t.kind == "dot":
                self.i += 1
                n = self._peek()
                if n.kind != "word":
                    raise self._fail()
                parts.append(n.text)
                self.i += 1
            elif t.kind == "lb":
                self.i += 1
                n = self._peek()
                if n.kind not in ("dq", "bq"):
                    raise self._fail()
                parts.append(self._value())
                if self._peek().kind != "rb":
                    raise self._fail()
                self.i += 1
            else:
                return tuple(parts)

    def _match(self) -> Match:
        t = self._peek()
        # Value-first forms: "v" in Sel / "v" not in Sel.
        value_first = t.kind in ("dq", "bq") or (
            t.kind == "word"
            and (self._is_word("in", 1) or (self._is_word("not", 1) and self._is_word("in", 2)))
        )
        if value_first:
            value = self._value()
            negate = False
            if self._is_word("not"):
                negate = True
                self.i += 1
            if not self._is_word("in"):
                raise self._fail()
            self.i += 1
            return Match("notin" if negate else "in", self._selector(), value)
        sel = self._selector()
        t = self._peek()
        if t.kind == "op":
            self.i += 1
            return Match(t.text, sel, self._value())
        if self._is_word("is"):
            self.i += 1
            negate = False
            if self._is_word("not"):
                negate = True
                self.i += 1
            if not self._is_word("empty"):
                raise self._fail()
            self.i += 1
            return Match("notempty" if negate else "empty", sel, None)
        negate = False
        if self._is_word("not"):
            negate = True
            self.i += 1
        for word in ("contains", "matches"):
            if self._is_word(word):
                self.i += 1
                value = self._value()
                regex = None
                if word == "matches":
                    try:
                        regex = re.compile(value)
                    except re.error as exc:
                        raise FilterSyntaxError(f"invalid regex {value!r}: {exc}") from None
                return Match(("not" if negate else "") + word, sel, value, regex)
        raise self._fail()


# ------------------------------------------------------------------ evaluation

_MISSING = object()


def _resolve(datum: Any, selector: tuple[str, ...]) -> Any:
    cur = datum
    path = ""
    for i, part in enumerate(selector):
        path += "/" + part
        parent = selector[i - 1] if i else ""
        if isinstance(cur, dict):
            if part in cur:
                cur = cur[part]
                continue
            if parent in MAP_FIELDS:
                raise FilterEvalError(
                    f'error finding value in datum: {path} at part {i}: couldn\'t find key "{part}"'
                )
            raise FilterEvalError(
                f"error finding value in datum: {path} at part {i}: "
                f'couldn\'t find struct field with name "{part}"'
            )
        if isinstance(cur, list):
            try:
                cur = cur[int(part)]
                continue
            except (ValueError, IndexError):
                raise FilterEvalError(
                    f'error finding value in datum: {path} at part {i}: invalid index "{part}"'
                ) from None
        if cur is None:
            if parent in MAP_FIELDS:
                raise FilterEvalError(
                    f'error finding value in datum: {path} at part {i}: couldn\'t find key "{part}"'
                )
            raise FilterEvalError(
                f"error finding value in datum: {path} at part {i}: nil pointer dereference"
            )
        raise FilterEvalError(
            f"error finding value in datum: {path} at part {i}: "
            f"can't descend into a {type(cur).__name__}"
        )
    return cur


def _coerce_equal(actual: Any, value: str) -> bool:
    if isinstance(actual, bool):
        low = value.lower()
        if low not in ("true", "false", "1", "0", "t", "f"):
            return False
        return (low in ("true", "1", "t")) == actual
    if isinstance(actual, int | float):
        try:
            return float(value) == float(actual)
        except ValueError:
            return False
    if actual is None:
        return value == ""
    return str(actual) == value


def _members(actual: Any) -> list[Any]:
    if isinstance(actual, dict):
        return list(actual.keys())
    if isinstance(actual, list):
        return actual
    return []


def _contains(actual: Any, value: str) -> bool:
    if isinstance(actual, str):
        return value in actual
    return any(_coerce_equal(m, value) for m in _members(actual))


def _eval(node: Any, datum: Any) -> bool:
    if isinstance(node, BoolOp):
        if node.op == "and":
            return _eval(node.args[0], datum) and _eval(node.args[1], datum)
        if node.op == "or":
            return _eval(node.args[0], datum) or _eval(node.args[1], datum)
        return not _eval(node.args[0], datum)
    actual = _resolve(datum, node.selector)
    op = node.op
    if op == "==":
        return _coerce_equal(actual, node.value or "")
    if op == "!=":
        return not _coerce_equal(actual, node.value or "")
    if op in ("empty", "notempty"):
        empty = actual is None or (hasattr(actual, "__len__") and len(actual) == 0)
        return empty if op == "empty" else not empty
    if op in ("in", "contains"):
        return _contains(actual, node.value or "")
    if op in ("notin", "notcontains"):
        return not _contains(actual, node.value or "")
    assert node.regex is not None
    text = actual if isinstance(actual, str) else ("" if actual is None else str(actual))
    found = node.regex.search(text) is not None
    return found if op == "matches" else not found


class Filter:
    """A compiled expression; `matches(datum)` raises FilterEvalError for unknown selectors."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        self.tree = _Parser(expression).parse()

    def matches(self, datum: Any) -> bool:
        return _eval(self.tree, datum)


def compile_filter(expression: str) -> Filter:
    return Filter(expression)

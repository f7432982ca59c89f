"""The documented differences, read from docs/compatibility.md so the suite and the document
cannot drift: a difference the suite finds must be listed there, and a listed one must occur."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
START, END = "<!-- conformance:allow -->", "<!-- /conformance:allow -->"
# `oracle`: OpenBao answers a 5xx (a bug of the oracle, not compared) and Trellis a 4xx.
KINDS = {"status", "missing", "extra", "oracle"}


@dataclass(frozen=True)
class Allowed:
    step: str  # a glob over step ids
    kind: str
    detail: str  # a glob over the detail ("201 != 200", "data.uuid")
    reason: str

    def covers(self, step: str, kind: str, detail: str) -> bool:
        return (
            kind == self.kind
            and fnmatch.fnmatchcase(step, self.step)
            and fnmatch.fnmatchcase(detail, self.detail)
        )


def _cells(line: str) -> list[str]:
    return [c.strip().strip("`") for c in line.strip().strip("|").split("|")]


def parse(text: str) -> list[Allowed]:
    if START not in text or END not in text:
        raise ValueError(f"{DOC.name} has no {START} ... {END} table")
    table = text.split(START, 1)[1].split(END, 1)[0]
    rows: list[Allowed] = []
    for line in table.splitlines():
        if not line.startswith("|") or re.match(r"^\|[\s\-|:]+\|$", line.strip()):
            continue
        cells = _cells(line)
        if cells[:2] == ["step", "kind"]:
            continue  # the header row
        if len(cells) != 4 or cells[1] not in KINDS or not cells[3]:
            raise ValueError(f"malformed allow-list row (step | kind | detail | reason): {line}")
        rows.append(Allowed(*cells))
    return rows


def load() -> list[Allowed]:
    return parse(DOC.read_text())

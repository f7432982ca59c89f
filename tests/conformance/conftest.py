"""One `trellis dev` for the package, beside the session's OpenBao dev server (the modules already
share that server, so their names are unique); the suite's match figure is printed at the end of
the run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.procs import DevProcess, dev

SUMMARIES: list[str] = []


@pytest.fixture(scope="package")
def trellis() -> Iterator[DevProcess]:
    with dev() as d:
        yield d


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for text in SUMMARIES:
        terminalreporter.write_line(text)

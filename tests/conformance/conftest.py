"""The session's `trellis dev` beside the session's OpenBao dev server (tests/conftest.py; the
modules already share both, so their names are unique); the suite's match figure is printed at
the end of the run."""

from __future__ import annotations

import pytest

from tests.procs import DevProcess

SUMMARIES: list[str] = []


@pytest.fixture
def trellis(trellis_dev: DevProcess) -> DevProcess:
    return trellis_dev


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under pytest-xdist (./test.sh) the figure is a worker's: hand it to the controller
    (tests/conftest.py prints it)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["summaries"] = list(SUMMARIES)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for text in SUMMARIES:
        terminalreporter.write_line(text)

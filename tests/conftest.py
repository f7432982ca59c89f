"""Session-wide fixtures: one real nats-server (JetStream on) for the whole test session.
Tests isolate themselves with unique bucket, stream and subject names, never a server each."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings

from services.dev_launch import stop_process
from shared.localnet import free_port
from shared.nats_binary import MISSING as NATS_MISSING
from shared.nats_binary import find_nats_server

if TYPE_CHECKING:
    from tests.openbao import OpenBao
    from tests.procs import DevProcess

# Property tests run the same examples on every run (a derived seed, no example database):
# a rare input that fails is found by running more examples on purpose, not by a CI run at
# random. No wall-clock limits either: on a loaded 2-core machine a 200 ms per-example deadline
# or the too_slow health check fails tests that are merely slow. A test's own @settings still
# overrides single values.
settings.register_profile(
    "trellis",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("trellis")


def start_nats(
    store_dir: str, *, port: int | None = None, extra: list[str] | None = None
) -> tuple[subprocess.Popen[bytes], str, Path]:
    """Start nats-server with JetStream and wait until it reports ready."""
    binary = find_nats_server()
    if binary is None:
        raise RuntimeError(NATS_MISSING)
    port = port or free_port()
    log_path = Path(store_dir) / "nats.log"
    conf = Path(store_dir) / "nats.conf"
    conf.write_text(
        f'max_payload: 64MB\njetstream {{ store_dir: "{store_dir}/js", sync_interval: always }}\n'
    )
    logf = open(log_path, "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [binary, "-c", str(conf), "-a", "127.0.0.1", "-p", str(port), *(extra or [])],
        stdout=logf,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        if re.search(r"Server is ready", text):
            return proc, f"nats://127.0.0.1:{port}", log_path
        if proc.poll() is not None:
            raise RuntimeError(f"nats-server exited: {text}")
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("nats-server did not become ready in 20s")


@pytest.fixture(scope="session")
def nats_url() -> Iterator[str]:
    tmp = tempfile.mkdtemp(prefix="trellis-nats-")
    proc, url, _ = start_nats(tmp)
    os.environ.setdefault("TRELLIS_TEST_NATS_URL", url)
    try:
        yield url
    finally:
        stop_process(proc, signal.SIGTERM, 10)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def unique() -> str:
    """A short unique name for buckets, streams, subjects and resources of one test."""
    return "t" + uuid.uuid4().hex[:12]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Under ./test.sh (TRELLIS_REQUIRE_ALL=1) a skipped test is a failure: the script installs
    every tool the tests need, so a skip would only hide a missing real component."""
    outcome = yield
    report = outcome.get_result()
    if (
        report.skipped
        and os.environ.get("TRELLIS_REQUIRE_ALL") == "1"
        and not hasattr(report, "wasxfail")
    ):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"skipped under TRELLIS_REQUIRE_ALL=1: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):  # type: ignore[no-untyped-def]
    """The same for a module skipped as a whole (importorskip at import time)."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("TRELLIS_REQUIRE_ALL") == "1":
        report.outcome = "failed"


# ./test.sh runs the suite in two pytest-xdist workers (`-n 2 --dist loadgroup`), where a test
# file stays on one worker so its module fixtures start once; then, alone, the tests that load
# the machine most or hold it to a deadline (chaos drills, fuzzing, kill -9 and flood tests):
# marked `one_chain`, they never share the two cores with another test. Node-id prefixes: a
# file's other tests (no deadline of their own) stay in the parallel part.
ONE_CHAIN = (
    "tests/chaos/test_dr_failover.py",
    "tests/chaos/test_drill_",
    "tests/chaos/test_secrets_replica_kill.py",
    "tests/fuzz/",
    "tests/e2e/test_sched_blocking.py",
    "tests/e2e/test_supervision.py::test_kill_9_of_each_child_and_the_apis_come_back",
    "tests/e2e/test_gateway_processes.py",
)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    xdist = config.pluginmanager.hasplugin("xdist")
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if item.nodeid.startswith(ONE_CHAIN):
            item.add_marker(pytest.mark.one_chain)
        if xdist:
            item.add_marker(pytest.mark.xdist_group(path))


# What the xdist workers' conftests handed over in `workeroutput["summaries"]` (the
# conformance figure), printed at the end by the controller, which runs no test itself.
WORKER_SUMMARIES: list[str] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    WORKER_SUMMARIES.extend(getattr(node, "workeroutput", {}).get("summaries", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for text in WORKER_SUMMARIES:
        terminalreporter.write_line(text)


@pytest.fixture(scope="session")
def openbao() -> Iterator[OpenBao]:
    """One real OpenBao dev server for the session (tests/openbao.py): the oracle for tests that
    claim Trellis answers as OpenBao does. Use unique mount and entity names per test."""
    from tests.openbao import openbao_dev

    with openbao_dev() as bao:
        yield bao


@pytest.fixture(scope="session")
def trellis_dev() -> Iterator[DevProcess]:
    """One plain `trellis dev` for the session, Trellis's side beside `openbao`: the suites that
    compare the two (conformance, security, the bao CLI session, hostile bytes) share both
    servers, with unique mount, user and policy names, and so does test_sched_nomad_extras.py
    with job names of its own (not test_sched_day_two.py: it adds a second client node, and
    node-scoped calls then need a node id). Each start and stop costs seconds and ~10 s of CPU;
    idle, it costs little."""
    from tests.procs import dev

    with dev(default_replicas=True) as d:
        yield d

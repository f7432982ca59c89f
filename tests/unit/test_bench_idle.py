"""The pure parts of bench/idle.py (scheduler counters read from /proc, the per-process report)
and the wrk command it shares with bench/vs_openbao.py; neither wrk nor a server runs here."""

from __future__ import annotations

import os
import threading
import time

from bench.idle import Counters, Snapshot, machine, report, spent, threads
from bench.vs_openbao import WORKLOADS, Server, wrk_command


def test_threads_count_each_thread_of_a_process() -> None:
    spun = threading.Event()
    done = threading.Event()

    def spin() -> None:
        end = time.thread_time() + 0.05  # CPU time: the same work however busy the host is
        while time.thread_time() < end:
            pass
        spun.set()
        done.wait(10)

    before = threads(os.getpid())
    assert before is not None
    worker = threading.Thread(target=spin)
    worker.start()
    try:
        assert spun.wait(10)
        after = threads(os.getpid())
    finally:
        done.set()
        worker.join()
    assert after is not None
    assert worker.native_id in after and worker.native_id not in before
    done_by = spent(before, after)
    # The other thread's CPU counts in its process (each thread's counters, not the main one's).
    assert done_by.run_ns >= 50_000_000
    assert done_by.slices >= 1


def test_spent_ignores_threads_that_ended() -> None:
    before = {1: Counters(run_ns=500, wait_ns=50, slices=5), 2: Counters(run_ns=900)}
    after = {1: Counters(run_ns=800, wait_ns=70, slices=9, voluntary=2), 3: Counters(run_ns=40)}
    # Thread 2 ended (its time is gone, never negative); thread 3 is new (all of it counts).
    assert spent(before, after) == Counters(340, 20, 4, 2, 0)


def test_threads_of_a_missing_process() -> None:
    assert threads(2**22 + 12345) is None


def test_machine_reads_the_all_cpu_line() -> None:
    cpu = machine()
    assert {"user", "system", "idle", "steal"} <= cpu.keys()
    assert all(v >= 0 for v in cpu.values())


def test_report_splits_cores_and_waits_per_request() -> None:
    tick = os.sysconf("SC_CLK_TCK")
    first = Snapshot(10.0, {"user": 0, "system": 0, "idle": 0, "iowait": 0, "steal": 0})
    last = Snapshot(12.0, {"user": 3 * tick, "system": 0, "idle": tick, "iowait": 0, "steal": 0})
    first.procs = {1: ("gateway", {1: Counters()}), 2: ("gateway", {2: Counters(run_ns=10**9)})}
    last.procs = {
        1: ("gateway", {1: Counters(run_ns=10**9, wait_ns=2 * 10**8, slices=400, voluntary=100)}),
        2: ("gateway", {2: Counters(run_ns=2 * 10**9, slices=600, involuntary=200)}),
        3: ("secrets", {3: Counters(run_ns=6 * 10**8, wait_ns=10**8, slices=300)}),
    }
    lines = list(report(first, last, 1000, "kv-read trellis"))
    assert lines[0] == "kv-read trellis: 500 req/s"
    assert "busy 1.50  idle 0.50" in lines[1]
    gateway = next(line for line in lines if line.strip().startswith("gateway")).split()
    # Two processes, 2 s of CPU over 2 s, 0.2 s of run-queue wait; per request 2000 µs of CPU,
    # 200 µs waiting, one timeslice, 0.1 voluntary and 0.2 involuntary switches.
    assert gateway[1:] == ["2", "1.00", "0.10", "2000.0", "200.0", "1.00", "0.10", "0.20"]
    rest = next(line for line in lines if "rest of machine" in line).split()
    assert rest[-1] == "0.20"  # 1.5 busy cores minus 1.3 of ours


def test_wrk_command_keeps_the_token_off_the_command_line() -> None:
    s = Server("trellis", "http://127.0.0.1:8200", "root", 1, token="s.secret-token")
    kv_read = next(w for w in WORKLOADS if w.key == "kv-read")
    argv, env = wrk_command(s, kv_read, 3, 2)
    assert argv[0] == "wrk" and "-c16" in argv and "-d3s" in argv
    assert argv[-1] == "http://127.0.0.1:8200/v1/kv/data/bench"
    assert env["BENCH_TOKEN"] == "s.secret-token"
    assert not any("s.secret-token" in a for a in argv)

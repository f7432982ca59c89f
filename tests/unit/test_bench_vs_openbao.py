"""The pure parts of bench/vs_openbao.py (wrk output parsing, ratios and goals, the CPU split,
py-spy profile summaries), so the benchmark cannot rot unnoticed; wrk itself never runs here."""

from __future__ import annotations

import os

import pytest

from bench.vs_openbao import (
    CLK_TCK,
    LUA,
    WORKLOADS,
    Row,
    WrkResult,
    cpu_per_request,
    format_cpu,
    format_table,
    parse_duration_ms,
    parse_wrk,
    process_ticks,
    top_self,
)

# What wrk 4.1 prints with --latency and bench/wrk/vault.lua.
WRK_OUT = """Running 8s test @ http://127.0.0.1:41234/v1/kv/data/bench
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    11.52ms    4.01ms  63.20ms   80.12%
    Req/Sec   700.11     80.23     0.91k    70.00%
  Latency Distribution
     50%   10.80ms
     75%   13.01ms
     90%   16.40ms
     99%    1.21s
  11201 requests in 8.00s, 5.12MB read
  Socket errors: connect 0, read 1, write 0, timeout 2
Requests/sec:   1400.12
Transfer/sec:    655.10KB
Not-200 responses: 4
"""


def test_parse_wrk_reads_rate_p99_count_and_failures() -> None:
    r = parse_wrk(WRK_OUT)
    assert r.rps == pytest.approx(1400.12)
    assert r.p99_ms == pytest.approx(1210.0)
    assert r.requests == 11201
    assert r.not_200 == 4 + 1 + 2  # non-200 answers plus socket errors


def test_parse_wrk_falls_back_to_wrks_own_error_line() -> None:
    out = WRK_OUT.replace("Not-200 responses: 4\n", "  Non-2xx or 3xx responses: 9\n")
    out = out.replace("  Socket errors: connect 0, read 1, write 0, timeout 2\n", "")
    assert parse_wrk(out).not_200 == 9


def test_parse_wrk_refuses_output_without_figures() -> None:
    with pytest.raises(ValueError):
        parse_wrk("unable to connect to 127.0.0.1:1 Connection refused\n")


@pytest.mark.parametrize(
    ("text", "ms"), [("850.00us", 0.85), ("12.5ms", 12.5), ("1.21s", 1210.0), ("2.00m", 120_000)]
)
def test_durations(text: str, ms: float) -> None:
    assert parse_duration_ms(text) == pytest.approx(ms)


def result(rps: float, p99: float, bad: int = 0) -> WrkResult:
    return WrkResult(rps, p99, int(rps * 8), bad)


def test_ratios_and_goals() -> None:
    write = next(w for w in WORKLOADS if w.key == "kv-write")
    # Throughput at goal, p99 within 2x: met.
    row = Row(write, [result(1000, 10), result(1000, 30)], [result(900, 30), result(1100, 50)])
    assert row.throughput_ratio == pytest.approx(1.0)
    assert row.p99_ratio == pytest.approx(2.0)
    assert row.met
    # The p99 goal alone can fail a row.
    slow = Row(write, [result(1000, 10)], [result(2000, 21)])
    assert not slow.met
    # A single non-200 answer fails it whatever the figures.
    bad = Row(write, [result(1000, 10)], [result(2000, 10, bad=1)])
    assert not bad.all_200 and not bad.met
    read = next(w for w in WORKLOADS if w.key == "kv-read")
    assert read.goal_p99 is None
    assert Row(read, [result(1000, 10)], [result(800, 100)]).met  # no p99 goal: 0.8 is enough


def test_table_shows_each_goal_and_verdict() -> None:
    rows = [
        Row(w, [result(1000, 10)], [result(500 * (i % 3), 15)]) for i, w in enumerate(WORKLOADS)
    ]
    rows[0].trellis[0].cpu_ms = {"gateway": 0.2, "secrets": 0.3, "nats": 0.1}
    rows[0].bao[0].cpu_ms = {"bao": 0.4}
    text = format_table(rows)
    for w in WORKLOADS:
        assert w.title in text and w.goal in text
    assert "not met" in text and " met " in text
    cpu = format_cpu(rows)
    assert "gateway" in cpu and "0.600" in cpu and "0.400" in cpu


def test_table_matches_the_issue() -> None:
    # Issue 14's table: these goals, RSA at 4 connections, the rest at 16.
    goals = {w.key: (w.goal_ratio, w.goal_p99, w.connections) for w in WORKLOADS}
    assert goals == {
        "kv-read": (0.8, None, 16),
        "kv-write": (1.0, 2.0, 16),
        "lookup-self": (0.8, None, 16),
        "token-create": (1.0, 2.0, 16),
        "pki-ec": (0.8, None, 16),
        "pki-rsa": (1.0, None, 4),
        "health": (0.5, None, 16),
    }
    assert LUA.is_file()


def test_cpu_per_request_by_role() -> None:
    before = {1: ("gateway", 100), 2: ("secrets", 50)}
    # pid 3 started during the run: all of its ticks count.
    after = {1: ("gateway", 100 + CLK_TCK), 2: ("secrets", 50 + CLK_TCK // 2), 3: ("crypto", 0)}
    cpu = cpu_per_request(before, after, 1000)
    assert cpu["gateway"] == pytest.approx(1.0)  # 1 s over 1000 requests
    assert cpu["secrets"] == pytest.approx(0.5, rel=0.05)
    assert cpu["crypto"] == 0


def test_process_ticks_sees_this_process() -> None:
    ticks = process_ticks(os.getpid())
    assert os.getpid() in ticks and ticks[os.getpid()][1] >= 0


def test_top_self_counts_leaf_frames() -> None:
    profile = {
        "shared": {
            "frames": [
                {"name": "main", "file": "/x/app.py", "line": 1},
                {"name": "handle", "file": "/x/app.py", "line": 10},
                {"name": "encode", "file": "/x/codec.py", "line": 5},
            ]
        },
        "profiles": [
            {"samples": [[0, 1, 2], [0, 1, 2], [0, 1], []], "weights": [1, 1, 2, 1]},
            {"samples": [[0, 2]], "weights": [4]},
        ],
    }
    top = dict(top_self(profile))
    assert top["encode (codec.py:5)"] == pytest.approx(6 / 8)
    assert top["handle (app.py:10)"] == pytest.approx(2 / 8)
    assert "main (app.py:1)" not in top

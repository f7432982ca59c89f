"""Prometheus metrics of the gateway, registered once per process.

The per-request figures (requests by API, method and status; latency; requests in flight) are
plain integers in `RequestStats`, one per API, turned into Prometheus families only when
/metrics is scraped: the event loop is one thread, so counting needs no lock, and a request
costs a few additions instead of the client library's label lookups and locks."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

BUS_RETRIES = Counter(
    "trellis_gateway_bus_retries_total", "Requests re-sent because no replica answered", ["api"]
)


class RequestStats:
    """One API's request figures since the process started."""

    def __init__(self) -> None:
        self.in_flight = 0
        # sys/health, sys/seal-status, sys/leader answered from published state, not forwarded.
        self.local_answers = 0
        self.answered: dict[tuple[str, int], int] = {}  # (method, status) -> requests
        self.buckets = [0] * (len(BUCKETS) + 1)  # the last one: above every bound
        self.seconds = 0.0

    def done(self, method: str, status: int, seconds: float) -> None:
        key = (method, status)
        self.answered[key] = self.answered.get(key, 0) + 1
        self.buckets[bisect_left(BUCKETS, seconds)] += 1
        self.seconds += seconds


_STATS: dict[str, RequestStats] = {}


def stats_for(api: str) -> RequestStats:
    return _STATS.setdefault(api, RequestStats())


class _Collector:
    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "trellis_gateway_requests", "HTTP requests answered", labels=["api", "method", "status"]
        )
        latency = HistogramMetricFamily(
            "trellis_gateway_request_seconds",
            "Time from request received to response written",
            labels=["api"],
        )
        in_flight = GaugeMetricFamily(
            "trellis_gateway_in_flight", "Requests being forwarded", labels=["api"]
        )
        local = CounterMetricFamily(
            "trellis_gateway_local_answers",
            "sys/health, sys/seal-status and sys/leader answered from the secrets state",
            labels=["api"],
        )
        for api, st in list(_STATS.items()):
            for (method, status), count in list(st.answered.items()):
                requests.add_metric([api, method, str(status)], count)
            cumulative, total = [], 0
            for bound, count in zip(
                (*map(floatToGoString, BUCKETS), "+Inf"), st.buckets, strict=True
            ):
                total += count
                cumulative.append((bound, total))
            latency.add_metric([api], cumulative, sum_value=st.seconds)
            in_flight.add_metric([api], st.in_flight)
            local.add_metric([api], st.local_answers)
        yield requests
        yield latency
        yield in_flight
        yield local


REGISTRY.register(_Collector())  # type: ignore[arg-type]

"""Prometheus metrics of the gateway, registered once per process."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter(
    "trellis_gateway_requests_total", "HTTP requests answered", ["api", "method", "status"]
)
LATENCY = Histogram(
    "trellis_gateway_request_seconds",
    "Time from request received to response written",
    ["api"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
IN_FLIGHT = Gauge("trellis_gateway_in_flight", "Requests being forwarded", ["api"])
BUS_RETRIES = Counter(
    "trellis_gateway_bus_retries_total", "Requests re-sent because no replica answered", ["api"]
)

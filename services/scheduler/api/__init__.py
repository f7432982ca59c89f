"""The scheduler's HTTP API (Nomad's /v1 routes), served from HttpRequest envelopes the gateway
forwards: routing, query options and blocking queries, rendering, ACL checks."""

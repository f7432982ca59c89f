"""API fuzzing: schemathesis against the three OpenAPI documents Trellis serves, through a
live in-process gateway on a real nats-server."""

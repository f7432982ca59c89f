"""The Trellis services: one package per process kind (gateway, secrets, crypto, replication,
workspace, scheduler), each with its entry point, handlers and domain logic."""

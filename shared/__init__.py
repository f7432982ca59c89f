"""Code every Trellis service shares: the bus, the subject catalogue, storage, the replicated
log, settings and logging."""

"""DR replication: the primary ships its barrier's WAL (the secrets KV stream, still encrypted) to
secondaries over a pinned-TLS cluster channel; Merkle sync, operation tokens, promote and demote."""

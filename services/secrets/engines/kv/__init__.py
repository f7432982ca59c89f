"""The `kv` secrets engine: version 1 (plain key/value) and version 2 (versioned, with metadata,
check-and-set and soft deletes), with the v1 -> v2 upgrade; `backend.py` is the entry point."""

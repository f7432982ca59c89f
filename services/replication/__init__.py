"""The replication service."""

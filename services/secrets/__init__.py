"""The secrets service."""

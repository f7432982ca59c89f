"""Vault's go-glob matching: auth methods' allowed-name lists and PKI role names."""

from __future__ import annotations


def glob(pattern: str, value: str) -> bool:
    """Vault's go-glob: `*` matches any run of characters; nothing else is special."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return pattern == value
    if not value.startswith(parts[0]):
        return False
    pos = len(parts[0])
    for middle in parts[1:-1]:
        found = value.find(middle, pos)
        if found < 0:
            return False
        pos = found + len(middle)
    last = parts[-1]
    return len(value) - pos >= len(last) and value.endswith(last)

"""Password generation: every character is drawn uniformly from the merged charset (random
bytes with rejection of the biased tail), and whole candidates that break a rule are rejected,
so each password is uniform over all strings obeying the policy. Time is bounded: a policy
whose rules are almost never met fails instead of spinning."""

from __future__ import annotations

import secrets
import time

from services.secrets.passwords.policy import PasswordPolicy

# Vault gives up after one second.
DEFAULT_TIMEOUT = 1.0


class GenerationTimeout(Exception):
    """No password obeying the rules was found in time (the rules are too restrictive)."""


def _candidate(charset: str, length: int) -> str:
    n = len(charset)
    # Bytes >= limit would favour the first (256 % n) characters: drop them.
    limit = 256 - 256 % n
    out: list[str] = []
    while len(out) < length:
        for b in secrets.token_bytes(length - len(out) + 8):
            if b < limit:
                out.append(charset[b % n])
                if len(out) == length:
                    break
    return "".join(out)


def satisfies(policy: PasswordPolicy, password: str) -> bool:
    if len(password) != policy.length:
        return False
    for rule in policy.rules:
        if rule.min_chars and sum(1 for c in password if c in rule.charset) < rule.min_chars:
            return False
    return True


def generate(policy: PasswordPolicy, timeout: float = DEFAULT_TIMEOUT) -> str:
    deadline = time.monotonic() + timeout
    while True:
        # Check the clock every few hundred tries: monotonic() is cheap but not free.
        for _ in range(256):
            pw = _candidate(policy.charset, policy.length)
            if satisfies(policy, pw):
                return pw
        if time.monotonic() >= deadline:
            raise GenerationTimeout(
                "unable to generate a password from the policy in time: are the rules impossible?"
            )

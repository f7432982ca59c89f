"""Times as KV v2 shows them: Go's RFC3339Nano in UTC ("2018-03-22T02:24:06.945319214Z", the
fraction's trailing zeros trimmed). Stored times are integer nanoseconds since the epoch."""

from __future__ import annotations

import time
from functools import lru_cache

NS = 1_000_000_000


def now_ns() -> int:
    return time.time_ns()


@lru_cache(maxsize=4096)  # a version's times are formatted again on every read of it
def rfc3339(ns: int) -> str:
    secs, frac = divmod(ns, NS)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return text + "Z"


def optional_rfc3339(ns: int) -> str:
    """ "" for an unset time (0), as Vault shows a version that is not deleted."""
    return rfc3339(ns) if ns else ""

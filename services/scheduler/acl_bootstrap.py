"""ACL bootstrap happens once (Nomad's rule). The first bootstrap, or a management token in the
configuration, sets the bootstrap index; after that `POST /v1/acl/bootstrap` answers 400 unless
an operator with access to the server's data dir writes that index into its `acl-bootstrap-reset`
file, which allows exactly one more bootstrap (the new one gets a new index). Pure, apart from
reading that file."""

from __future__ import annotations

import os
import re

RESET_FILE = "acl-bootstrap-reset"

_LEADING_INT = re.compile(r"\s*(\d+)")


class BootstrapRefused(Exception):
    """400, with Nomad's text."""


def parse_reset(text: str) -> int:
    """The reset index in the file, read as Go's Sscanf("%d") does: leading spaces, digits;
    0 (no reset) when there is none."""
    m = _LEADING_INT.match(text)
    return int(m.group(1)) if m else 0


def read_reset_file(server_dir: str) -> int:
    """The index written in <server data dir>/acl-bootstrap-reset, or 0."""
    if not server_dir:
        return 0
    try:
        with open(os.path.join(server_dir, RESET_FILE), encoding="utf-8", errors="replace") as f:
            return parse_reset(f.read(64))
    except OSError:
        return 0


def reset_index_for(bootstrap_index: int, file_index: int) -> int:
    """What the server sends with a bootstrap request (Nomad's ACL.Bootstrap): 0 when no bootstrap
    happened yet; the current bootstrap index when the reset file names it; else refused."""
    if not bootstrap_index:
        return 0
    if not file_index:
        raise BootstrapRefused(f"ACL bootstrap already done (reset index: {bootstrap_index})")
    if file_index != bootstrap_index:
        raise BootstrapRefused(
            f"Invalid bootstrap reset index (specified {file_index}, "
            f"reset index: {bootstrap_index})"
        )
    return bootstrap_index


def apply_refusal(bootstrap_index: int, reset_index: int) -> str:
    """The log's own check when it applies a bootstrap (state store's BootstrapACLTokens), so two
    racing bootstraps through the log agree on one winner. "" means accept."""
    if not bootstrap_index:
        return ""
    if not reset_index:
        return f"ACL bootstrap already done (reset index: {bootstrap_index})"
    if reset_index != bootstrap_index:
        return "Invalid reset index for ACL bootstrap"
    return ""

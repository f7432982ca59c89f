"""schemathesis hooks for Trellis runs (loaded through SCHEMATHESIS_HOOKS=tests.fuzz.hooks):
the `trellis_no_server_error` check, which is `not_a_server_error` except that a 503 saying
the secrets service is sealed is the documented answer, not a bug."""

from __future__ import annotations

import schemathesis


@schemathesis.check
def trellis_no_server_error(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case
) -> bool | None:
    status = response.status_code
    if status < 500:
        return None
    if status == 503 and b"sealed" in response.content:
        return None
    raise AssertionError(
        f"server error {status} for {case.method} {case.formatted_path}: {response.content[:300]!r}"
    )

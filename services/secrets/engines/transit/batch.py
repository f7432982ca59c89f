"""batch_input as Vault runs it: each item on its own, failures reported in place with the
item's `reference`; the status says whether some, all or none failed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec

from services.secrets.engines.transit.fastfields import plain_fields
from services.secrets.engines.transit.policy import TransitError
from services.secrets.errors import bad_request
from services.secrets.framework.fields import FieldError, decode_fields
from services.secrets.framework.request import Response, ok

T = TypeVar("T", bound=msgspec.Struct)
MAX_ITEMS = 100_000


async def run_items(
    items: list[Any],
    kind: type[T],
    fn: Callable[[T], Awaitable[dict[str, Any]]],
    on_error: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Each item's result; a failed item reads {**on_error, "error": ...}."""
    if not items:
        raise bad_request("missing batch input to process")
    if len(items) > MAX_ITEMS:
        raise bad_request(f"batch_input holds more than {MAX_ITEMS} items")
    out: list[dict[str, Any]] = []
    for raw in items:
        ref = raw.get("reference", "") if isinstance(raw, dict) else ""
        ref = ref if isinstance(ref, str) else str(ref)
        try:
            if not isinstance(raw, dict):
                raise TransitError("a batch_input item must be an object")
            item = plain_fields(kind, raw, {}) or decode_fields(kind, raw, {})[0]
            result = await fn(item)  # type: ignore[arg-type]
        except (TransitError, FieldError) as exc:
            result = {**(on_error or {}), "error": str(exc)}
        except Exception as exc:  # a SecretsError from a worker: the item fails, not the batch
            message = getattr(exc, "message", None)
            if message is None:
                raise
            result = {**(on_error or {}), "error": message}
        result["reference"] = ref
        out.append(result)
    return out


def batch_response(
    results: list[dict[str, Any]], partial_code: int = 0, *, strict: bool = True
) -> Response:
    """Encrypt-like batches (strict) fail with 400 when an item fails; sign, verify and hmac
    batches answer 200 with the failures in place, as Vault."""
    if not strict:
        return ok({"batch_results": results})
    failed = sum(1 for r in results if "error" in r)
    status = None
    if failed == len(results):
        status = 400
    elif failed:
        status = partial_code or 400
    return ok({"batch_results": results}, status=status)

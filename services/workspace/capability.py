"""One-time upload URLs (HCP Terraform's signed URLs): the URL carries a random capability, the
state keeps only its digest, and the upload is served only for the matching capability."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Protocol, TypeVar

from services.workspace.jsonapi import not_found

UPLOAD_PARAM = "upload-token"


def new_capability() -> tuple[str, str]:
    """A fresh capability (for the URL) and its digest (for the state)."""
    capability = secrets.token_urlsafe(32)
    return capability, hashlib.sha256(capability.encode()).hexdigest()


class _Uploadable(Protocol):
    upload_digest: str


T = TypeVar("T", bound=_Uploadable)


def require_upload(query: dict[str, str], obj: T | None) -> T:
    """`obj`, when the query's capability matches its upload digest; otherwise 404, as for an
    unknown URL (no such object, or its upload is done: the digest is cleared)."""
    capability = query.get(UPLOAD_PARAM, "")
    if obj is None or not obj.upload_digest or not capability:
        raise not_found("upload")
    given = hashlib.sha256(capability.encode()).hexdigest()
    if not hmac.compare_digest(given.encode(), obj.upload_digest.encode()):
        raise not_found("upload")
    return obj

"""Errors of the secrets service; each maps to a status and an `errors` message."""

from __future__ import annotations

from shared.errors import ServiceError


class SecretsError(ServiceError):
    """A client-facing failure with its HTTP status."""


def bad_request(message: str) -> SecretsError:
    return SecretsError(400, message)


def permission_denied() -> SecretsError:
    return SecretsError(403, "permission denied")


def not_found(message: str = "") -> SecretsError:
    return SecretsError(404, message)


def unsupported_path(path: str) -> SecretsError:
    return SecretsError(404, f"unsupported path: {path}")


def unsupported_operation() -> SecretsError:
    return SecretsError(405, "unsupported operation")


def sealed() -> SecretsError:
    return SecretsError(503, "the secrets service is sealed")


def upstream(message: str) -> SecretsError:
    return SecretsError(502, message)

"""Typed failures that travel across the bus. The code is HTTP-like so each edge maps it to its
own API's status without a translation table."""

from __future__ import annotations


class ServiceError(Exception):
    """A failure a handler reports on purpose; its message is safe to show to the caller."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class NoResponders(ServiceError):
    """Nobody serves the subject right now (no replica up): the request was never delivered."""

    def __init__(self, subject: str) -> None:
        super().__init__(503, f"no replica of the service for {subject} is available")


class BusTimeout(ServiceError):
    """The request may or may not have been handled: the reply did not arrive in time."""

    def __init__(self, subject: str, timeout: float) -> None:
        super().__init__(504, f"no reply on {subject} within {timeout:g}s")

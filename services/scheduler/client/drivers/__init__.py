"""Task drivers: start a task, wait for it to exit, kill it."""

from __future__ import annotations

from services.scheduler.client.drivers.base import Driver, DriverError, ExitResult, TaskHandle
from services.scheduler.client.drivers.mock import MockDriver
from services.scheduler.client.drivers.raw_exec import RawExecDriver

__all__ = ["Driver", "DriverError", "ExitResult", "MockDriver", "RawExecDriver", "TaskHandle"]

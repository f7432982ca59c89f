"""What the bus tests share: a `trellis dev` with a known data dir, its NATS address, plain NATS
clients under a chosen identity (none, or a service's credentials read from the data dir), and
polling a log or a state with a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import requests
from nats.aio.client import Client

from tests.procs import DevProcess, dev


@dataclass
class DevBusTarget:
    dev: DevProcess
    data_dir: Path
    nats_url: str

    def creds(self, user: str) -> tuple[str, str]:
        data = json.loads((self.data_dir / "nats-users" / f"{user}.json").read_text())
        return data["user"], data["password"]

    def log(self, name: str) -> str:
        """What every process of that kind logged (`secrets.log`, `secrets#2.log`, ...):
        the queue group picks which replica refuses a request."""
        logs = sorted(self.data_dir.joinpath("logs").glob(f"{name}*.log"))
        mine = [p for p in logs if p.stem == name or p.stem.startswith(f"{name}#")]
        return "".join(p.read_text(errors="replace") for p in mine)

    def get(self, path: str, token: str | None = None) -> requests.Response:
        tok = self.dev.root_token if token is None else token
        return requests.get(self.dev.secrets + path, headers={"X-Vault-Token": tok}, timeout=30)

    def post(self, path: str, body: Any, token: str | None = None) -> requests.Response:
        tok = self.dev.root_token if token is None else token
        return requests.post(
            self.dev.secrets + path, json=body, headers={"X-Vault-Token": tok}, timeout=60
        )

    def sealed(self) -> bool:
        return bool(
            requests.get(self.dev.secrets + "/v1/sys/seal-status", timeout=10).json()["sealed"]
        )


@contextlib.contextmanager
def dev_with_data(tmp: Path, *args: str) -> Iterator[DevBusTarget]:
    data = tmp / "data"
    with dev("--data-dir", str(data), *args) as d:
        yield DevBusTarget(d, data, d.nats_url)


class Errors:
    """The asynchronous errors NATS sends a client (permission violations among them)."""

    def __init__(self) -> None:
        self.items: list[str] = []

    async def record(self, exc: Exception) -> None:
        self.items.append(str(exc))

    async def wait_for(self, text: str, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in e for e in self.items):
                return True
            await asyncio.sleep(0.02)
        return False


async def connect_as(
    url: str, user: str = "", password: str = "", errors: Errors | None = None
) -> Client:
    options: dict[str, Any] = {"allow_reconnect": False, "max_reconnect_attempts": 0}
    if user:
        options.update(user=user, password=password)
    if errors is not None:
        options["error_cb"] = errors.record
    return await nats.connect(url, connect_timeout=5, **options)


def wait_until(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")

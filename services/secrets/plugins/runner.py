"""Running a plugin: check the binary's SHA-256 against the catalog, start it with the bus
address and its mount's subject prefix, and wait until it says which paths it serves."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from typing import TYPE_CHECKING

import msgspec
import nats.errors
import structlog

from services.secrets.errors import SecretsError, bad_request, upstream
from shared.plugin_sdk import (
    ENV_CREDENTIALS,
    ENV_NATS_URL,
    ENV_SUBJECT,
    Hello,
    PluginInfo,
    hello_subject,
)

if TYPE_CHECKING:
    from nats.aio.client import Client as NatsClient

    from services.secrets.plugins.catalog import CatalogEntry

log = structlog.get_logger("plugins")

START_TIMEOUT = 20.0
_enc = msgspec.msgpack.Encoder()
_info = msgspec.msgpack.Decoder(PluginInfo)


def _sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


async def verify_sha256(entry: CatalogEntry, full: str) -> str:
    """The binary's SHA-256 if it matches the catalog; a 400 otherwise (it must not run)."""
    try:
        actual = await asyncio.to_thread(_sha256_file, full)
    except OSError as exc:
        raise bad_request(
            f"cannot read plugin {entry.name!r} ({entry.command}): {exc.strerror}"
        ) from None
    if actual != entry.sha256:
        raise bad_request(
            f"plugin {entry.name!r}: the SHA-256 of {entry.command} does not "
            f"match the catalog (expected {entry.sha256}, found {actual}); "
            "refusing to run it"
        )
    return actual


def plugin_env(
    entry: CatalogEntry, nats_url: str, prefix: str, credentials: str = ""
) -> dict[str, str]:
    # The server's own TRELLIS_* settings (seal keys among them) never reach a plugin.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_")}
    for item in entry.env:
        key, _, value = item.partition("=")
        env[key] = value
    env[ENV_NATS_URL] = nats_url
    env[ENV_SUBJECT] = prefix
    if credentials:  # the plugin NATS user's file, never the secrets service's own
        env[ENV_CREDENTIALS] = credentials
    return env


class PluginProcess:
    def __init__(self, proc: asyncio.subprocess.Process, info: PluginInfo, sha256: str) -> None:
        self.proc = proc
        self.info = info
        self.sha256 = sha256
        self.started = time.monotonic()

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    async def settle(self, limit: float) -> None:
        """Wait up to `limit` for the process to end: a plugin killed a moment ago is reaped
        by the kernel before asyncio reports its exit, and looks alive until then."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proc.wait(), limit)

    async def stop(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(Exception):
                self.proc.stdin.close()  # the SDK exits on EOF
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()


async def start(
    nc: NatsClient,
    entry: CatalogEntry,
    full: str,
    nats_url: str,
    prefix: str,
    credentials: str = "",
) -> PluginProcess:
    """Verify, start, and wait for the plugin's hello. 400 when the binary is refused, 502 when
    it starts but does not come up."""
    sha = await verify_sha256(entry, full)
    try:
        proc = await asyncio.create_subprocess_exec(
            full,
            *entry.args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            env=plugin_env(entry, nats_url, prefix, credentials),
            cwd=os.path.dirname(full),
            start_new_session=True,
        )
    except PermissionError:
        raise bad_request(f"plugin {entry.name!r}: {entry.command} is not executable") from None
    except OSError as exc:
        raise bad_request(
            f"plugin {entry.name!r}: cannot run {entry.command}: {exc.strerror}"
        ) from None
    running = PluginProcess(proc, PluginInfo(), sha)
    try:
        running.info = await _hello(nc, entry, proc, prefix)
    except BaseException:
        await running.stop()
        raise
    log.info("plugin started", plugin=entry.name, pid=proc.pid, subject=prefix)
    return running


async def _hello(
    nc: NatsClient, entry: CatalogEntry, proc: asyncio.subprocess.Process, prefix: str
) -> PluginInfo:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise upstream(
                f"plugin {entry.name!r} exited with code {proc.returncode} before it was ready"
            )
        try:
            msg = await nc.request(hello_subject(prefix), _enc.encode(Hello()), timeout=0.5)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            await asyncio.sleep(0.05)
            continue
        try:
            return _info.decode(msg.data)
        except msgspec.DecodeError:
            raise upstream(f"plugin {entry.name!r} answered hello with garbage") from None
    raise SecretsError(502, f"plugin {entry.name!r} did not come up within {START_TIMEOUT:g}s")

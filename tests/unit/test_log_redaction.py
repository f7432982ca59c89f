"""Logs hold no secret (issue 19 item 5): tracebacks carry no local variables in either
renderer, and credential fields and token-shaped text are redacted at the source."""

from __future__ import annotations

import io
import logging
import sys

import pytest
import structlog

from shared.logging import configure_logging
from shared.redact import REDACTED, mask, scrub, sensitive

ROOT_TOKEN = "r00t-t0ken-kept-in-a-local"
SERVICE_TOKEN = "hvs.CAESIJ0aBcDeFgHiJkLmNoPqRsTuVwXyZ"


def _fail(headers: dict[str, str]) -> None:
    management_token = ROOT_TOKEN  # noqa: F841 - a local the traceback must not show
    raise ValueError("the handler broke")


@pytest.fixture(params=[False, True], ids=["console", "json"])
def captured(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    structlog.reset_defaults()
    configure_logging(json=request.param, level="debug")
    yield out
    structlog.reset_defaults()
    logging.getLogger().handlers.clear()


def test_a_traceback_shows_no_locals(captured: io.StringIO) -> None:
    log = structlog.get_logger("t")
    headers = {"x-nomad-token": ROOT_TOKEN, "authorization": f"Bearer {ROOT_TOKEN}"}
    try:
        _fail(headers)
    except ValueError:
        log.exception("handler failed")
    text = captured.getvalue()
    assert "the handler broke" in text and "_fail" in text  # the traceback is there...
    assert ROOT_TOKEN not in text  # ...without the frames' variables
    assert "'x-nomad-token'" not in text and "management_token" not in text


def test_stdlib_tracebacks_show_no_locals(
    captured: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Earlier tests in the session may have quietened aiohttp's logger; this one needs it.
    server_log = logging.getLogger("aiohttp.server")
    monkeypatch.setattr(server_log, "disabled", False)
    monkeypatch.setattr(server_log, "propagate", True)
    monkeypatch.setattr(server_log, "level", logging.NOTSET)
    try:
        _fail({"x-vault-token": ROOT_TOKEN})
    except ValueError:
        server_log.exception("Error handling request")
    text = captured.getvalue()
    assert "the handler broke" in text and ROOT_TOKEN not in text


def test_credential_fields_are_redacted(captured: io.StringIO) -> None:
    log = structlog.get_logger("t")
    log.warning(
        "request",
        headers={"X-Vault-Token": ROOT_TOKEN, "Authorization": f"Bearer {ROOT_TOKEN}"},
        password="hunter2-password",
        secret_id="approle-secret-id-value",
        note=f"client sent {SERVICE_TOKEN}",
        path="secret/data/app",
    )
    text = captured.getvalue()
    for secret in (ROOT_TOKEN, "hunter2-password", "approle-secret-id-value", SERVICE_TOKEN):
        assert secret not in text
    assert "secret/data/app" in text and REDACTED in text


def test_scrub_and_mask() -> None:
    assert sensitive("X-Nomad-Token") and sensitive("client_token") and sensitive("unseal_keys")
    assert not sensitive("path") and not sensitive("token_ttl") and not sensitive("accessor")
    got = scrub({"a": [{"private_key": "k"}], "b": ("Basic dXNlcjpwYXNz",), "n": 3})
    assert got == {"a": [{"private_key": REDACTED}], "b": [REDACTED], "n": 3}
    pem = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----"
    assert mask(f"key: {pem} end") == f"key: {REDACTED} end"

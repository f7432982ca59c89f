"""The console's routes on a bare aiohttp server (a stand-in API answers where they decline):
pages, assets, headers, and the proxy's rewrite of `/ui/api/<api>/...` to the path the API
itself is asked for (odd bytes included)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import RawTestServer, TestClient
from aiohttp.web_request import BaseRequest

from services.gateway import ui
from services.gateway.apis import WORKSPACE

seen: list[tuple[str, str, str, str]] = []


async def fake_secrets(request: BaseRequest) -> web.Response:
    seen.append(
        (
            request.method,
            request.raw_path.split("?", 1)[0],  # as the gateway's proxy reads it
            request.query_string,
            request.headers.get("X-Vault-Token", ""),
        )
    )
    return web.json_response({"ok": True})


@pytest.fixture
async def client() -> AsyncIterator[TestClient]:
    route = ui.console(WORKSPACE, {"secrets": fake_secrets})

    async def handle(request: BaseRequest) -> web.StreamResponse:
        page = route(request.method, request.rel_url.path_safe)
        if page is None:
            return web.Response(status=404, text="the API's")
        return await page(request)

    async with TestClient(RawTestServer(handle)) as c:
        yield c
    seen.clear()


async def test_pages_get_the_app_with_strict_headers(client: TestClient) -> None:
    for path in ("/ui/", "/ui/secrets/kv/a/b", "/ui/jobs/x%0Ay", "/ui/%ZZ"):
        r = await client.get(path)
        assert r.status == 200, path
        assert '<div id="app">' in await r.text()
        assert r.headers["X-Frame-Options"] == "DENY"
        assert "default-src 'self'" in r.headers["Content-Security-Policy"]
        assert r.headers["Cache-Control"] == "no-store"
    r = await client.get("/ui", allow_redirects=False)
    assert r.status == 302 and r.headers["Location"] == "/ui/"


async def test_assets_and_missing_assets(client: TestClient) -> None:
    r = await client.get("/ui/assets/app.css")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/css")
    for path in ("/ui/assets/missing.js", "/ui/assets/../../app.py", "/ui/assets/%2e%2e%2fapp.py"):
        assert (await client.get(path)).status == 404, path


async def test_proxy_rewrites_the_path_and_keeps_query_and_token(client: TestClient) -> None:
    r = await client.get(
        "/ui/api/secrets/v1/kv/data/a%2Fb%0A?version=2", headers={"X-Vault-Token": "t0k"}
    )
    assert r.status == 200
    assert seen == [("GET", "/v1/kv/data/a%2Fb%0A", "version=2", "t0k")]
    assert r.headers["Cache-Control"] == "no-store"


async def test_proxy_refusals_are_4xx_in_the_right_shape(client: TestClient) -> None:
    # An API not served (yet) on this gateway: its own error shape, 503.
    r = await client.get("/ui/api/scheduler/v1/jobs")
    assert r.status == 503 and "scheduler" in await r.text()
    r = await client.get("/ui/api/bogus/v1/x")
    assert r.status == 404 and (await r.json())["errors"][0]["status"] == "404"
    r = await client.request("TRACE", "/ui/api/secrets/v1/sys/health")
    assert r.status == 405 and "Allow" in r.headers
    assert seen == []


async def test_other_methods_on_pages_are_the_apis(client: TestClient) -> None:
    for method, path in (("POST", "/ui"), ("PUT", "/ui/secrets"), ("DELETE", "/ui/")):
        r = await client.request(method, path)
        assert await r.text() == "the API's", (method, path)
    assert (await client.head("/ui/")).status == 200
    # The console API takes any method (and refuses the ones it does not proxy itself).
    assert (await client.request("PATCH", "/ui/api/secrets/v1/x")).status == 200

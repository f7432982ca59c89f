"""The web console at `/ui/` on every listener: static assets shipped inside the package, and a
same-origin proxy (`/ui/api/<secrets|workspace|scheduler>/...`) so the page on any listener
reaches all three APIs through the same forwarding code, with the user's own token."""

from __future__ import annotations

import mimetypes
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from aiohttp.web_request import BaseRequest
from yarl import URL

from services.gateway.apis import SCHEDULER, SECRETS, WORKSPACE, ApiSpec

Handler = Callable[[BaseRequest], Awaitable[web.StreamResponse]]

STATIC_DIR = Path(__file__).parent / "ui_static"
PREFIX = "/ui"
API_PREFIX = "/ui/api/"
APIS: dict[str, ApiSpec] = {a.name: a for a in (SECRETS, WORKSPACE, SCHEDULER)}
# What the console sends; the secrets API's `LIST` verb is spelled `?list=true` by the page.
PROXY_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"})
# The pages and the redirect answer these; other methods there are the API's.
_GET = frozenset({"GET", "HEAD"})

# The page loads its own script and stylesheet and talks to its own origin, nothing else.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def load_assets(root: Path = STATIC_DIR) -> dict[str, tuple[bytes, str]]:
    """Every built file, read once: the set of servable names is fixed, so no request path can
    reach outside the directory."""
    assets: dict[str, tuple[bytes, str]] = {}
    if not root.is_dir():
        return assets
    for path in sorted(root.rglob("*")):
        if path.is_file():
            name = path.relative_to(root).as_posix()
            ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
            if ctype.startswith("text/") or ctype in ("application/javascript", "image/svg+xml"):
                ctype += "; charset=utf-8"
            assets[name] = (path.read_bytes(), ctype)
    return assets


def upstream_target(raw_path: str, query_string: str) -> tuple[str, URL] | None:
    """`/ui/api/<api>/<rest>` -> (api name, the path the API itself would be asked for)."""
    if not raw_path.startswith(API_PREFIX):
        return None
    name, sep, rest = raw_path[len(API_PREFIX) :].partition("/")
    if name not in APIS or not sep:
        return None
    return name, URL.build(path="/" + rest, query_string=query_string, encoded=True)


def console(api: ApiSpec, proxies: dict[str, Handler]) -> Callable[[str, str], Handler | None]:
    """The console's routes on `api`'s listener, as a function of (method, path) to the handler
    for it, or None where the listener's API answers instead. `path` is decoded but for `%2F`
    and `%25` (aiohttp's `path_safe`). `proxies` maps each API's name to the gateway's
    forwarding handler for it; it is read per request, so the gateway may fill it as its
    listeners come up."""
    assets = load_assets()
    index = assets.get("index.html")

    def secured(resp: web.Response) -> web.Response:
        resp.headers.update(SECURITY_HEADERS)
        return resp

    async def page(request: BaseRequest) -> web.Response:
        tail = request.path[len(PREFIX) + 1 :]
        if tail in assets and tail != "index.html":
            body, ctype = assets[tail]
            resp = web.Response(body=body, headers={"Content-Type": ctype})
            # Asset names carry no hash: revalidate rather than serve a stale console.
            resp.headers["Cache-Control"] = "no-cache"
            return secured(resp)
        if tail.startswith("assets/") or index is None:
            text = "not found" if index else "the console assets are not built into this package"
            return secured(web.Response(status=404, text=text))
        # Every other path is a page of the single-page app: deep links load the app.
        resp = web.Response(body=index[0], headers={"Content-Type": index[1]})
        resp.headers["Cache-Control"] = "no-store"
        return secured(resp)

    async def to_root(_: BaseRequest) -> web.Response:
        raise web.HTTPFound(PREFIX + "/")

    async def api_proxy(request: BaseRequest) -> web.StreamResponse:
        found = upstream_target(request.raw_path.split("?", 1)[0], request.query_string)
        if found is None:
            body, ctype = api.format_error(404, "no such console API: use /ui/api/<api>/<path>")
            return secured(web.Response(status=404, body=body, headers={"Content-Type": ctype}))
        name, url = found
        target = APIS[name]
        handler = proxies.get(name)
        if request.method not in PROXY_METHODS:
            allow = ", ".join(sorted(PROXY_METHODS))
            body, ctype = target.format_error(405, f"method {request.method[:32]} is not allowed")
            return web.Response(
                status=405, body=body, headers={"Content-Type": ctype, "Allow": allow}
            )
        if handler is None:
            body, ctype = target.format_error(503, f"the {name} API is not served here yet")
            return web.Response(status=503, body=body, headers={"Content-Type": ctype})
        resp = await handler(request.clone(rel_url=url))
        resp.headers["Referrer-Policy"] = "no-referrer"
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["Cache-Control"] = "no-store"
        return resp

    def route(method: str, path: str) -> Handler | None:
        if path.startswith(API_PREFIX):
            return api_proxy
        if method not in _GET:
            return None
        if path == PREFIX:
            return to_root
        return page if path.startswith(PREFIX + "/") else None

    return route

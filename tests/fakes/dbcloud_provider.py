"""An emulator of the cloud-database provider's admin API for programmatic API keys, with HTTP
digest auth, run in its own process by the tests:

    python -m tests.fakes.dbcloud_provider --public-key PUB --private-key PRIV \
        --org ORG1 --project PROJ1=ORG1

It prints `listening on <port>` once ready. Besides the provider's routes it has one of its own,
`GET /_emulator/keys` (no auth), so a test can see which keys exist.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import re
import secrets
import sys
import uuid
from http import HTTPStatus
from typing import Any

from aiohttp import web

API = "/api/atlas/v1.0"
REALM = "MMS Public API"
ORG_ROLES = {"ORG_OWNER", "ORG_MEMBER", "ORG_GROUP_CREATOR", "ORG_BILLING_ADMIN", "ORG_READ_ONLY"}
PROJECT_ROLES = {
    "GROUP_OWNER",
    "GROUP_READ_ONLY",
    "GROUP_DATA_ACCESS_ADMIN",
    "GROUP_DATA_ACCESS_READ_WRITE",
    "GROUP_DATA_ACCESS_READ_ONLY",
    "GROUP_CLUSTER_MANAGER",
}
_PARAM = re.compile(r'(\w+)=(?:"([^"]*)"|([^\s,]+))')


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def _error(status: int, code: str, detail: str) -> web.Response:
    return web.json_response(
        {"detail": detail, "error": status, "errorCode": code, "reason": HTTPStatus(status).phrase},
        status=status,
    )


class Provider:
    def __init__(
        self, public_key: str, private_key: str, orgs: set[str], projects: dict[str, str]
    ) -> None:
        self.public_key = public_key
        self.private_key = private_key
        self.orgs = orgs
        self.projects = projects
        self.fail_access_list = False
        self.nonces: set[str] = set()
        # key id -> {id, desc, publicKey, privateKey, orgId, projects, roles, accessList}
        self.keys: dict[str, dict[str, Any]] = {}

    # ---- digest auth (RFC 7616, MD5, qop=auth) ----------------------------------------------
    def _challenge(self) -> web.Response:
        nonce = secrets.token_hex(16)
        self.nonces.add(nonce)
        hdr = (
            f'Digest realm="{REALM}", domain="", nonce="{nonce}", algorithm=MD5, '
            'qop="auth", stale=false'
        )
        return web.json_response(
            {"detail": "authentication required", "error": 401, "errorCode": "UNAUTHORIZED"},
            status=401,
            headers={"WWW-Authenticate": hdr},
        )

    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Digest "):
            return False
        p = {
            m.group(1): m.group(2) if m.group(2) is not None else m.group(3)
            for m in _PARAM.finditer(header[7:])
        }
        if p.get("username") != self.public_key or p.get("nonce") not in self.nonces:
            return False
        ha1 = _md5(f"{self.public_key}:{REALM}:{self.private_key}")
        ha2 = _md5(f"{request.method}:{p.get('uri', '')}")
        if p.get("qop") == "auth":
            want = _md5(f"{ha1}:{p['nonce']}:{p.get('nc', '')}:{p.get('cnonce', '')}:auth:{ha2}")
        else:
            want = _md5(f"{ha1}:{p['nonce']}:{ha2}")
        return secrets.compare_digest(want, p.get("response", ""))

    @web.middleware
    async def auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path.startswith("/_emulator/"):
            return await handler(request)
        if not self._authorized(request):
            return self._challenge()
        return await handler(request)

    # ---- routes -----------------------------------------------------------------------------
    def _new_key(self, desc: str, org_id: str, roles: list[dict[str, str]]) -> dict[str, Any]:
        key = {
            "id": uuid.uuid4().hex[:24],
            "desc": desc,
            "publicKey": secrets.token_hex(4),
            "privateKey": str(uuid.uuid4()),
            "orgId": org_id,
            "projects": [],
            "roles": roles,
            "accessList": [],
        }
        self.keys[key["id"]] = key
        return key

    @staticmethod
    def _public(key: dict[str, Any]) -> dict[str, Any]:
        return {k: key[k] for k in ("id", "desc", "publicKey", "privateKey", "roles")}

    async def create_org_key(self, request: web.Request) -> web.Response:
        org = request.match_info["org"]
        if org not in self.orgs:
            return _error(404, "ORG_NOT_FOUND", f"No organization with ID {org} exists.")
        body = await request.json()
        roles = body.get("roles") or []
        bad = [r for r in roles if r not in ORG_ROLES]
        if not roles or bad:
            return _error(400, "INVALID_ROLE", f"Invalid organization roles: {bad or roles}")
        key = self._new_key(
            body.get("desc", ""), org, [{"orgId": org, "roleName": r} for r in roles]
        )
        return web.json_response(self._public(key))

    async def create_project_key(self, request: web.Request) -> web.Response:
        project = request.match_info["group"]
        if project not in self.projects:
            return _error(404, "GROUP_NOT_FOUND", f"No group with ID {project} exists.")
        body = await request.json()
        roles = body.get("roles") or []
        bad = [r for r in roles if r not in PROJECT_ROLES]
        if not roles or bad:
            return _error(400, "INVALID_ROLE", f"Invalid project roles: {bad or roles}")
        org = self.projects[project]
        key = self._new_key(
            body.get("desc", ""), org, [{"groupId": project, "roleName": r} for r in roles]
        )
        key["projects"].append(project)
        return web.json_response(self._public(key))

    async def get_group(self, request: web.Request) -> web.Response:
        project = request.match_info["group"]
        if project not in self.projects:
            return _error(404, "GROUP_NOT_FOUND", f"No group with ID {project} exists.")
        return web.json_response({"id": project, "orgId": self.projects[project]})

    def _org_key(self, request: web.Request) -> dict[str, Any] | None:
        key = self.keys.get(request.match_info["key"])
        if key is None or key["orgId"] != request.match_info["org"]:
            return None
        return key

    async def access_list(self, request: web.Request) -> web.Response:
        if self.fail_access_list:
            return _error(503, "SERVICE_UNAVAILABLE", "access lists are down for maintenance")
        key = self._org_key(request)
        if key is None:
            return _error(404, "API_KEY_NOT_FOUND", "No API key with that ID exists.")
        entries = await request.json()
        if not isinstance(entries, list):
            return _error(400, "INVALID_JSON", "expected a list")
        key["accessList"] += entries
        return web.json_response(
            {"results": key["accessList"], "totalCount": len(key["accessList"])}, status=201
        )

    async def delete_org_key(self, request: web.Request) -> web.Response:
        key = self._org_key(request)
        if key is None:
            return _error(404, "API_KEY_NOT_FOUND", "No API key with that ID exists.")
        del self.keys[key["id"]]
        return web.Response(status=204)

    async def unassign_project_key(self, request: web.Request) -> web.Response:
        key = self.keys.get(request.match_info["key"])
        project = request.match_info["group"]
        if key is None or project not in key["projects"]:
            return _error(404, "API_KEY_NOT_FOUND", "No API key with that ID exists.")
        key["projects"].remove(project)
        key["roles"] = [r for r in key["roles"] if r.get("groupId") != project]
        return web.Response(status=204)

    async def list_keys(self, request: web.Request) -> web.Response:
        return web.json_response(
            [
                {
                    "id": k["id"],
                    "desc": k["desc"],
                    "publicKey": k["publicKey"],
                    "orgId": k["orgId"],
                    "projects": k["projects"],
                    "accessList": k["accessList"],
                    "roles": [r["roleName"] for r in k["roles"]],
                }
                for k in self.keys.values()
            ]
        )

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.auth])
        app.router.add_post(API + "/orgs/{org}/apiKeys", self.create_org_key)
        app.router.add_post(API + "/groups/{group}/apiKeys", self.create_project_key)
        app.router.add_get(API + "/groups/{group}", self.get_group)
        app.router.add_post(API + "/orgs/{org}/apiKeys/{key}/accessList", self.access_list)
        app.router.add_delete(API + "/orgs/{org}/apiKeys/{key}", self.delete_org_key)
        app.router.add_delete(API + "/groups/{group}/apiKeys/{key}", self.unassign_project_key)
        app.router.add_get("/_emulator/keys", self.list_keys)
        return app


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--public-key", required=True)
    parser.add_argument("--private-key", required=True)
    parser.add_argument("--org", action="append", default=[])
    parser.add_argument("--project", action="append", default=[], help="PROJECT=ORG")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--fail-access-list",
        action="store_true",
        help="answer access-list calls with 503 (a partial outage)",
    )
    args = parser.parse_args(argv)
    projects = dict(p.split("=", 1) for p in args.project)
    provider = Provider(
        args.public_key, args.private_key, set(args.org) | set(projects.values()), projects
    )
    provider.fail_access_list = args.fail_access_list
    runner = web.AppRunner(provider.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port)
    await site.start()
    port = runner.addresses[0][1]
    print(f"listening on {port}", flush=True)
    # Exit when the test that started us goes away (stdin closes).
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(1024):
        pass
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))

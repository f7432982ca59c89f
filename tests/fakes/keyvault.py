"""An emulator of a cloud key vault's REST API (login, get key, create key, sign, verify) for
the `cloudbkeyvault` managed keys, run in its own process by the tests:

    python -m tests.fakes.keyvault --tenant T --client-id C --client-secret S

It prints `listening on <port>`; the login endpoint and the vault share that port, so a
managed key reaches it with `environment` and `resource` set to the emulator's URL.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import secrets
import sys
import uuid
from typing import Any

from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa, utils


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _int_b64(n: int) -> str:
    return _b64url(n.to_bytes((n.bit_length() + 7) // 8, "big"))


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


_PSS = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32)


class Vault:
    def __init__(self, tenant: str, client_id: str, client_secret: str) -> None:
        self.tenant = tenant
        self.client_id = client_id
        self.client_secret = client_secret
        self.tokens: set[str] = set()
        # name -> (version, private key)
        self.keys: dict[str, tuple[str, rsa.RSAPrivateKey]] = {}

    def _jwk(self, request: web.Request, name: str) -> dict[str, Any]:
        version, key = self.keys[name]
        pub = key.public_key().public_numbers()
        kid = f"{request.scheme}://{request.host}/keys/{name}/{version}"
        return {
            "key": {
                "kid": kid,
                "kty": "RSA",
                "key_ops": ["sign", "verify"],
                "n": _int_b64(pub.n),
                "e": _int_b64(pub.e),
            },
            "attributes": {"enabled": True},
        }

    async def login(self, request: web.Request) -> web.Response:
        form = await request.post()
        if request.match_info["tenant"] != self.tenant:
            return web.json_response(
                {"error": "invalid_tenant", "error_description": "unknown tenant"}, status=400
            )
        if (
            form.get("grant_type") != "client_credentials"
            or form.get("client_id") != self.client_id
            or not secrets.compare_digest(str(form.get("client_secret", "")), self.client_secret)
        ):
            return web.json_response(
                {"error": "invalid_client", "error_description": "bad client credentials"},
                status=401,
            )
        token = secrets.token_urlsafe(24)
        self.tokens.add(token)
        return web.json_response(
            {"token_type": "Bearer", "expires_in": 3599, "access_token": token}
        )

    @web.middleware
    async def auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path.startswith("/keys"):
            header = request.headers.get("Authorization", "")
            if not header.startswith("Bearer ") or header[7:] not in self.tokens:
                return _error(401, "Unauthorized", "AKV10000: request is missing a bearer token")
            if request.query.get("api-version") is None:
                return _error(400, "BadParameter", "api-version is required")
        return await handler(request)

    async def get_key(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.keys:
            return _error(404, "KeyNotFound", f"A key with (name/id) {name} was not found")
        return web.json_response(self._jwk(request, name))

    async def create_key(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = await request.json()
        if body.get("kty") not in ("RSA", "RSA-HSM"):
            return _error(400, "BadParameter", "only RSA keys are supported here")
        size = int(body.get("key_size") or 2048)
        if size not in (2048, 3072, 4096):
            return _error(400, "BadParameter", f"unsupported key size {size}")
        key = rsa.generate_private_key(public_exponent=65537, key_size=size)
        self.keys[name] = (uuid.uuid4().hex, key)
        return web.json_response(self._jwk(request, name))

    def _versioned(self, request: web.Request) -> rsa.RSAPrivateKey | None:
        found = self.keys.get(request.match_info["name"])
        if found is None or found[0] != request.match_info["version"]:
            return None
        return found[1]

    async def sign(self, request: web.Request) -> web.Response:
        key = self._versioned(request)
        if key is None:
            return _error(404, "KeyNotFound", "no such key version")
        body = await request.json()
        if body.get("alg") != "PS256":
            return _error(400, "BadParameter", "only PS256 is supported here")
        digest = _unb64url(body["value"])
        sig = key.sign(digest, _PSS, utils.Prehashed(hashes.SHA256()))
        return web.json_response({"kid": request.path.rsplit("/sign", 1)[0], "value": _b64url(sig)})

    async def verify(self, request: web.Request) -> web.Response:
        key = self._versioned(request)
        if key is None:
            return _error(404, "KeyNotFound", "no such key version")
        body = await request.json()
        try:
            key.public_key().verify(
                _unb64url(body["value"]),
                _unb64url(body["digest"]),
                _PSS,
                utils.Prehashed(hashes.SHA256()),
            )
            ok = True
        except InvalidSignature:
            ok = False
        return web.json_response({"value": ok})

    async def list_keys(self, request: web.Request) -> web.Response:
        return web.json_response({"keys": sorted(self.keys)})

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.auth])
        app.router.add_post("/{tenant}/oauth2/v2.0/token", self.login)
        app.router.add_get("/keys/{name}", self.get_key)
        app.router.add_post("/keys/{name}/create", self.create_key)
        app.router.add_post("/keys/{name}/{version}/sign", self.sign)
        app.router.add_post("/keys/{name}/{version}/verify", self.verify)
        app.router.add_get("/_emulator/keys", self.list_keys)
        return app


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--client-secret", required=True)
    args = parser.parse_args(argv)
    runner = web.AppRunner(
        Vault(args.tenant, args.client_id, args.client_secret).app(), access_log=None
    )
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    print(f"listening on {runner.addresses[0][1]}", flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(1024):
        pass
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))

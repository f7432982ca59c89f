"""sys/wrapping: wrap, unwrap, lookup, rewrap."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from services.secrets.core.wrapping import WRAPPING_POLICY
from services.secrets.errors import bad_request, permission_denied
from services.secrets.framework.path import Path, write
from services.secrets.framework.request import RawResponse, Request, Response

if TYPE_CHECKING:
    from services.secrets.core.core import Core


class TokenField(msgspec.Struct, kw_only=True):
    token: str = ""


def _token(req: Request, f: TokenField) -> str:
    """The wrapping token comes in the body, or as the client token itself."""
    tok = f.token or req.client_token
    if not tok:
        raise bad_request("a wrapping token is required")
    return tok


def paths(core: Core) -> list[Path]:
    async def wrap(req: Request, _: Any) -> Response:
        # The dispatcher wraps any response when the wrap TTL header is set.
        if not (req.headers.get("x-svc-wrap-ttl") or req.headers.get("x-vault-wrap-ttl")):
            raise bad_request("endpoint requires response wrapping to be used")
        # An empty body wraps an empty object, as OpenBao does (hvac's wrap with no data).
        return Response(data=dict(req.data or {}))

    async def unwrap(req: Request, f: TokenField) -> Response:
        tok = _token(req, f)
        if req.token is not None and req.token.id == tok and WRAPPING_POLICY in req.token.policies:
            pass  # the caller presented the wrapping token itself
        body = await core.wrapping.unwrap(tok)
        return Response(raw=RawResponse(status=200, body=body))

    async def lookup(req: Request, f: TokenField) -> Response:
        # Unauthenticated, but not anonymous: with no token at all OpenBao answers 403.
        if not (f.token or req.client_token):
            raise permission_denied()
        return Response(data=await core.wrapping.lookup(_token(req, f)))

    async def rewrap(req: Request, f: TokenField) -> Response:
        info = await core.wrapping.rewrap(_token(req, f))
        return Response(extra={"wrap_info": info})

    return [
        Path(
            "wrapping/wrap",
            write(wrap, "Wrap the request body"),
            TokenField,
            arbitrary_input=True,
            synopsis="Wrap arbitrary data in a wrapping token.",
        ),
        Path(
            "wrapping/unwrap",
            write(unwrap, "Unwrap"),
            TokenField,
            synopsis="Return the wrapped response and spend the token.",
        ),
        Path(
            "wrapping/lookup",
            write(lookup, "Look up a wrapping token", unauthenticated=True),
            TokenField,
            synopsis="Read a wrapping token's creation data.",
        ),
        Path(
            "wrapping/rewrap",
            write(rewrap, "Rewrap"),
            TokenField,
            synopsis="Move a wrapped response into a new wrapping token.",
        ),
    ]

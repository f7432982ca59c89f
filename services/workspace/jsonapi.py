"""JSON:API plumbing: the error type handlers raise, response documents, timestamps, and the
readers that turn a request body into checked Python values (every mistake a 422 that says
which member is wrong, never a 500)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec

from shared import jsonbody
from shared.messages import HttpResponse

MEDIA_TYPE = "application/vnd.api+json"
API_VERSION = "2.5"  # TFP-API-Version; go-tfe based clients need >= 2.5

TITLES = {
    400: "bad request",
    401: "unauthorized",
    404: "not found",
    405: "method not allowed",
    409: "conflict",
    413: "payload too large",
    415: "unsupported media type",
    422: "invalid attribute",
    500: "internal error",
    503: "service unavailable",
    504: "gateway timeout",
}

_json = msgspec.json.Encoder()


class ApiError(Exception):
    """A client mistake (or a refusal) rendered as a JSON:API error object."""

    def __init__(
        self, status: int, detail: str, pointer: str | None = None, title: str | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.pointer = pointer
        self.title = title or TITLES.get(status, "error")

    def response(self) -> HttpResponse:
        err: dict[str, Any] = {
            "status": str(self.status),
            "title": self.title,
            "detail": self.detail,
        }
        if self.pointer:
            err["source"] = {"pointer": self.pointer}
        return respond(self.status, {"errors": [err]})


def not_found(what: str = "resource") -> ApiError:
    return ApiError(404, f"{what} not found")


def respond(
    status: int, doc: Any | None = None, headers: dict[str, str] | None = None
) -> HttpResponse:
    hdrs = {"content-type": MEDIA_TYPE, "tfp-api-version": API_VERSION}
    if headers:
        hdrs.update(headers)
    return HttpResponse(status=status, headers=hdrs, body=b"" if doc is None else _json.encode(doc))


def iso(t: float | None) -> str | None:
    """ISO 8601 in UTC with milliseconds, as HCP Terraform writes it."""
    if t is None:
        return None
    d = dt.datetime.fromtimestamp(t, tz=dt.UTC)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"


def parse_time(value: Any, pointer: str) -> str | None:
    """Accept an ISO 8601 timestamp (or null) and normalise it to the same form we write."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ApiError(422, "must be an ISO 8601 timestamp or null", pointer)
    try:
        d = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(422, f"{value!r} is not an ISO 8601 timestamp", pointer) from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=dt.UTC)
    return iso(d.timestamp())


# --- reading request documents ---


def decode_body(body: bytes) -> Any:
    if not body.strip():
        raise ApiError(422, "request body is empty; a JSON:API document is required")
    try:
        # The shared policy; TFC answers a malformed body with 422 like any invalid one.
        return jsonbody.decode(body)
    except jsonbody.BodyError as exc:
        raise ApiError(422, f"malformed JSON: {exc.detail}") from None


def data_object(body: bytes, type_: str) -> dict[str, Any]:
    """The `data` object of a single-resource document of type `type_`."""
    doc = decode_body(body)
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
        raise ApiError(422, "the document must have a data object", "/data")
    data = doc["data"]
    if data.get("type") != type_:
        raise ApiError(422, f"data.type must be {type_!r}, got {data.get('type')!r}", "/data/type")
    for member in ("attributes", "relationships"):
        if data.get(member) is None:
            data[member] = {}
        if not isinstance(data[member], dict):
            raise ApiError(422, f"data.{member} must be an object", f"/data/{member}")
    return data


def data_list(body: bytes, type_: str) -> list[dict[str, Any]]:
    """The `data` array of a relationship document; each item of type `type_`. Everything but
    type, id and attributes is ignored (some clients send whole resources)."""
    doc = decode_body(body)
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise ApiError(422, "the document must have a data array", "/data")
    for i, item in enumerate(doc["data"]):
        if not isinstance(item, dict):
            raise ApiError(422, "each data item must be an object", f"/data/{i}")
        if item.get("type") != type_:
            raise ApiError(
                422, f"type must be {type_!r}, got {item.get('type')!r}", f"/data/{i}/type"
            )
    return doc["data"]


def ids_of(items: list[dict[str, Any]]) -> list[str]:
    out = []
    for i, item in enumerate(items):
        if not isinstance(item.get("id"), str) or not item["id"]:
            raise ApiError(422, "id is required", f"/data/{i}/id")
        out.append(item["id"])
    return out


_MISSING = object()


class Attrs:
    """Typed access to `data.attributes`, each failure a 422 pointing at the member."""

    def __init__(self, attrs: dict[str, Any], base: str = "/data/attributes") -> None:
        self.attrs = attrs
        self.base = base

    def __contains__(self, key: str) -> bool:
        return key in self.attrs

    def pointer(self, key: str) -> str:
        return f"{self.base}/{key}"

    def _get(self, key: str, kinds: tuple[type, ...], what: str, nullable: bool) -> Any:
        v = self.attrs.get(key, _MISSING)
        if v is _MISSING:
            return _MISSING
        if v is None and nullable:
            return None
        # bool is an int in Python: keep integers and booleans apart.
        if not isinstance(v, kinds) or (bool not in kinds and isinstance(v, bool)):
            raise ApiError(422, f"{key} must be {what}", self.pointer(key))
        return v

    def str(self, key: str, *, nullable: bool = False) -> Any:
        return self._get(key, (str,), "a string", nullable)

    def bool(self, key: str, *, nullable: bool = False) -> Any:
        return self._get(key, (bool,), "a boolean", nullable)

    def int(self, key: str, *, nullable: bool = False) -> Any:
        return self._get(key, (int,), "an integer", nullable)

    def obj(self, key: str, *, nullable: bool = False) -> Any:
        return self._get(key, (dict,), "an object", nullable)

    def str_list(self, key: str) -> Any:
        v = self._get(key, (list,), "an array of strings", False)
        if v is not _MISSING and not all(isinstance(x, str) for x in v):
            raise ApiError(422, f"{key} must be an array of strings", self.pointer(key))
        return v

    def required_str(self, key: str) -> str:
        v = self.str(key)
        if v is _MISSING or not v:
            raise ApiError(422, f"{key} is required", self.pointer(key))
        return v


def present(v: Any) -> bool:
    return v is not _MISSING


def relationship_ids(
    rels: dict[str, Any], name: str, type_: str, *, many: bool
) -> list[str] | str | object | None:
    """ids named by `relationships.<name>.data`: a list (many) or one id / None; _MISSING when
    the relationship is absent."""
    if name not in rels:
        return _MISSING
    rel = rels[name]
    ptr = f"/data/relationships/{name}"
    if not isinstance(rel, dict) or "data" not in rel:
        raise ApiError(422, f"relationships.{name} must be an object with data", ptr)
    data = rel["data"]
    if many:
        if not isinstance(data, list):
            raise ApiError(422, f"relationships.{name}.data must be an array", ptr)
        out = []
        for i, item in enumerate(data):
            if (
                not isinstance(item, dict)
                or item.get("type") != type_
                or not isinstance(item.get("id"), str)
            ):
                raise ApiError(422, f"each item must be {{type: {type_}, id}}", f"{ptr}/{i}")
            out.append(item["id"])
        return out
    if data is None:
        return None
    if (
        not isinstance(data, dict)
        or data.get("type") != type_
        or not isinstance(data.get("id"), str)
    ):
        raise ApiError(422, f"relationships.{name}.data must be {{type: {type_}, id}}", ptr)
    return data["id"]

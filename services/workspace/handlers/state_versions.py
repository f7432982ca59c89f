"""State versions as HCP Terraform serves them to the `remote` backend: create (inline state
or an upload URL), show, list, the current version, download, and their outputs. State files
and output values are sealed before they leave this process (sealing.py): JetStream and the
log only ever hold ciphertext."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import msgspec

from services.workspace import render_state, tfstate
from services.workspace.capability import UPLOAD_PARAM, new_capability, require_upload
from services.workspace.context import Req
from services.workspace.handlers.runs import public_base
from services.workspace.jsonapi import (
    ApiError,
    Attrs,
    data_object,
    not_found,
    present,
    relationship_ids,
    respond,
)
from services.workspace.model import StateVersion, Workspace
from services.workspace.query import include_param
from services.workspace.sealing import STATE_KEY, seal, unseal
from services.workspace.validate import new_id
from shared.messages import HttpResponse

_mp = msgspec.msgpack.Encoder()
_mp_dec = msgspec.msgpack.Decoder(dict[str, bytes])

# Output values up to this size ride in the log entry; larger ones go to the blob store, so
# that the log, every replica's memory and the snapshots stay small.
MAX_LOGGED_VALUES = 64 * 1024


def _values_blob(sv_id: str) -> str:
    return f"{sv_id}.outputs"


def _state_aad(sv_id: str) -> str:
    return f"state:{sv_id}"


def _outputs_aad(sv_id: str) -> str:
    return f"outputs:{sv_id}"


def _b64(a: Attrs, key: str) -> bytes | None:
    v = a.str(key)
    if not present(v):
        return None
    try:
        return base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(422, f"{key} must be base64", a.pointer(key)) from None


async def _contents(r: Req, sv_id: str, raw: bytes, serial: int, lineage: str) -> dict[str, Any]:
    """Parse and seal a state file; store the sealed file. Returns the log fields it adds."""
    parsed = tfstate.parse(raw)
    if parsed.serial != serial:
        raise ApiError(
            422,
            f"serial {serial} does not match the state's serial {parsed.serial}",
            "/data/attributes/serial",
        )
    if lineage and parsed.lineage and parsed.lineage != lineage:
        raise ApiError(
            422, "lineage does not match the state's lineage", "/data/attributes/lineage"
        )
    key = await r.key_store.get(STATE_KEY)
    outputs = []
    values: dict[str, bytes] = {}
    for o in parsed.outputs:
        oid = new_id("wsout")
        outputs.append(
            {"id": oid, "name": o.name, "sensitive": o.sensitive, "type_json": o.type_json}
        )
        values[oid] = o.value_json
    await r.blob_store.put(sv_id, seal(key, raw, _state_aad(sv_id)))
    resources = tfstate.resource_summary(parsed.resources)
    sealed_values = seal(key, _mp.encode(values), _outputs_aad(sv_id))
    in_blob = len(sealed_values) > MAX_LOGGED_VALUES
    if in_blob:
        await r.blob_store.put(_values_blob(sv_id), sealed_values)
    return {
        "size": len(raw),
        "state_format": parsed.version,
        "terraform_version": parsed.terraform_version,
        "resource_count": sum(x["count"] for x in resources),
        "resources_json": msgspec.json.encode(resources),
        "outputs": outputs,
        "sealed_values": b"" if in_blob else sealed_values,
        "values_in_blob": in_blob,
    }


async def create(r: Req) -> HttpResponse:
    ws, _ = r.workspace(r.params["id"], "write-state")
    data = data_object(r.http.body, "state-versions")
    a = Attrs(data["attributes"])
    serial = a.int("serial")
    if not present(serial) or not 0 <= serial <= tfstate.MAX_SERIAL:
        raise ApiError(
            422,
            f"serial is required (an integer from 0 to {tfstate.MAX_SERIAL})",
            a.pointer("serial"),
        )
    md5 = a.str("md5")
    if not present(md5) or len(md5) != 32 or any(c not in "0123456789abcdefABCDEF" for c in md5):
        raise ApiError(422, "md5 is required (32 hexadecimal digits)", a.pointer("md5"))
    lineage = a.str("lineage", nullable=True)
    lineage = lineage if present(lineage) and lineage else ""
    if len(lineage) > tfstate.MAX_LINEAGE:
        raise ApiError(422, "lineage is too long", a.pointer("lineage"))
    force = a.bool("force")
    raw = _b64(a, "state")
    # Accepted for compatibility; this service derives everything from the state itself.
    _b64(a, "json-state")
    _b64(a, "json-state-outputs")
    run_id = relationship_ids(data["relationships"], "run", "runs", many=False)
    sv_id = new_id("sv")
    payload: dict[str, Any] = {
        "id": sv_id,
        "workspace_id": ws.id,
        "serial": serial,
        "lineage": lineage,
        "md5": md5.lower(),
        "force": force is True,
        "by": list(r.who.lock_holder),
        "run_id": run_id if isinstance(run_id, str) else None,
    }
    # Apply decides (another writer may lock first); this only spares sealing and storing a
    # state that is bound to be refused.
    refusal = r.state.lock_refusal(ws, r.who.lock_holder)
    if refusal is not None:
        raise ApiError(refusal.code, refusal.message)
    upload_url = None
    if raw is not None:
        tfstate.check_md5(raw, md5)
        payload.update(await _contents(r, sv_id, raw, serial, lineage), status="finalized")
    else:
        # No state inline: the client PUTs it to a one-time upload URL (HCP's signed URL).
        capability, upload_digest = new_capability()
        payload.update(status="pending", upload_digest=upload_digest)
        upload_url = (
            f"{public_base(r)}{render_state.API}/state-versions/{sv_id}/content"
            f"?{UPLOAD_PARAM}={capability}"
        )
    try:
        await r.write("sv.create", payload)
    except ApiError:
        if raw is not None:
            await r.blob_store.delete(sv_id)
            await r.blob_store.delete(_values_blob(sv_id))
        raise
    sv = r.state.state_versions[sv_id]
    return respond(201, {"data": render_state.state_version(sv, public_base(r), upload_url)})


async def upload(r: Req) -> HttpResponse:
    """PUT of the raw state to a pending version's upload URL; the URL is the credential."""
    await r.log.barrier()  # a public route: the service did not wait for the log
    sv = require_upload(r.query, r.state.state_versions.get(r.params["id"]))
    raw = r.http.body
    tfstate.check_md5(raw, sv.md5)
    fields = await _contents(r, sv.id, raw, sv.serial, sv.lineage)
    try:
        await r.write("sv.finalize", {"id": sv.id, **fields})
    except ApiError:
        # Another upload of the same version may have won: its blobs (same names) stay.
        now = r.state.state_versions.get(sv.id)
        if now is None or now.status == "pending":
            await r.blob_store.delete(sv.id)
            await r.blob_store.delete(_values_blob(sv.id))
        raise
    return respond(200)


def _version(r: Req, need: str = "read-state") -> tuple[StateVersion, Workspace]:
    sv = r.state.state_versions.get(r.params["id"])
    if sv is None:
        raise not_found("state version")
    try:
        ws, _ = r.workspace(sv.workspace_id, need)
    except ApiError:
        raise not_found("state version") from None
    return sv, ws


def _current(r: Req, need: str) -> StateVersion:
    ws, _ = r.workspace(r.params["id"], need)
    sv = r.state.current_state(ws.id)
    if sv is None:
        raise not_found("current state version")
    return sv


INCLUDES = ("outputs", "created_by", "run", "run.created_by", "run.configuration_version")


async def _one(r: Req, sv: StateVersion) -> HttpResponse:
    """A state version, with `include=outputs` (sensitive values withheld) if asked for; the
    other documented includes name resources this service does not have yet (runs)."""
    doc: dict[str, Any] = {"data": render_state.state_version(sv, public_base(r))}
    inc = include_param(r.query, INCLUDES)
    if inc:
        doc["included"] = []
    if "outputs" in inc:
        caps = r.ws_caps(r.state.workspaces[sv.workspace_id])
        if "read-state-outputs" in caps:
            values = await _values(r, sv)
            doc["included"] = [
                render_state.output(o, _shown(o, values, caps, False)) for o in sv.outputs
            ]
    return respond(200, doc)


async def show(r: Req) -> HttpResponse:
    sv, _ = _version(r)
    return await _one(r, sv)


async def current(r: Req) -> HttpResponse:
    return await _one(r, _current(r, "read-state"))


async def list_(r: Req) -> HttpResponse:
    ws = r.workspace_filtered("read-state")
    # Newest first, as HCP Terraform lists them.
    items = [r.state.state_versions[i] for i in reversed(r.state.sv_by_ws.get(ws.id, []))]
    base = public_base(r)
    return respond(200, r.list_doc(items, lambda sv: render_state.state_version(sv, base)))


async def download(r: Req) -> HttpResponse:
    sv, _ = _version(r)
    if sv.status != "finalized":
        raise not_found("state")
    raw = await r.open_blob(sv.id, _state_aad(sv.id), "state")
    return HttpResponse(status=200, headers={"content-type": "application/json"}, body=raw)


# --- outputs ---


async def _values(r: Req, sv: StateVersion) -> dict[str, bytes]:
    sealed = sv.sealed_values
    if sv.values_in_blob:
        sealed = await r.blob_store.get(_values_blob(sv.id)) or b""
    if not sealed:
        return {}
    key = await r.key_store.get(STATE_KEY)
    try:
        return _mp_dec.decode(unseal(key, sealed, _outputs_aad(sv.id)))
    except (ValueError, msgspec.DecodeError):
        raise ApiError(500, "the stored outputs do not authenticate") from None


def _shown(o: Any, values: dict[str, bytes], caps: frozenset[str], single: bool) -> bytes | None:
    """Sensitive values: only on a single output's page, to whoever may read the whole state
    (they could download it anyway); lists always withhold them, as HCP Terraform does."""
    if o.sensitive and (not single or "read-state" not in caps):
        return None
    return values.get(o.id)


async def _output_list(r: Req, sv: StateVersion, caps: frozenset[str]) -> HttpResponse:
    values = await _values(r, sv)
    docs = [render_state.output(o, _shown(o, values, caps, False)) for o in sv.outputs]
    return respond(200, r.list_doc(docs, lambda d: d))


async def list_outputs(r: Req) -> HttpResponse:
    sv, ws = _version(r, "read-state-outputs")
    return await _output_list(r, sv, r.ws_caps(ws))


async def current_outputs(r: Req) -> HttpResponse:
    sv = _current(r, "read-state-outputs")
    return await _output_list(r, sv, r.ws_caps(r.state.workspaces[sv.workspace_id]))


async def show_output(r: Req) -> HttpResponse:
    sv_id = r.state.output_sv.get(r.params["id"])
    if sv_id is None:
        raise not_found("state version output")
    sv = r.state.state_versions[sv_id]
    try:
        _, caps = r.workspace(sv.workspace_id, "read-state-outputs")
    except ApiError:
        raise not_found("state version output") from None
    o = next(o for o in sv.outputs if o.id == r.params["id"])
    values = await _values(r, sv)
    return respond(200, {"data": render_state.output(o, _shown(o, values, caps, True))})


async def workspace_outputs(r: Req, sv: StateVersion) -> list[dict[str, Any]]:
    """The workspace's `outputs` include: `workspace-outputs`, sensitive values withheld."""
    values = await _values(r, sv)
    docs = []
    for o in sv.outputs:
        doc = render_state.output(o, None if o.sensitive else values.get(o.id))
        attrs = doc["attributes"]
        attrs["output-type"] = attrs.pop("type")
        docs.append({**doc, "type": "workspace-outputs", "links": {}})
    return docs


async def drop_blobs(r: Req, sv_ids: list[str]) -> None:
    """After a workspace (or organization) is deleted: its sealed state files go too."""
    for sv_id in sv_ids:
        await r.blob_store.delete(sv_id)
        await r.blob_store.delete(_values_blob(sv_id))

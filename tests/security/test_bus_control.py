"""Issue 19 (6): the bus takes orders only from the cluster. Through a real `trellis dev`:

- a NATS client holding another service's valid credentials (the workspace user's, read from
  the data dir) cannot fetch the keyring, answer secrets API requests, seal, or read shares;
  with the workspace's service key too, it gets the workspace's data key and no other;
- a client holding the secrets user's own NATS credentials, but not the cluster key, is
  ignored by the receivers: its seal notice does not seal, its hand-off request gets no
  keyring, and its answers to API requests are rejected by the gateway (which never shows
  them to the client) while the requests it receives hold no token.

The cluster's state is checked afterwards: still unsealed, still serving the genuine data.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import time
import uuid

import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from shared import bus_batch
from shared.datakeys import DataKeyReply, DataKeyRequest, new_request, open_reply
from shared.messages import BusError
from shared.service_identity import ServiceKey, read_service_key
from tests.security.bus_clients import DevBusTarget, Errors, connect_as, wait_until

pytestmark = pytest.mark.e2e

SEALED = "trellis.secrets.seal.sealed"
SHARE = "trellis.secrets.seal.share"
HANDOFF = "trellis.secrets.seal.handoff"
API = "trellis.api.secrets"


class SealNotice(msgspec.Struct):
    origin: str


class UnsealShare(msgspec.Struct):
    share: bytes
    origin: str


class HandoffRequest(msgspec.Struct):
    public_key: bytes
    origin: str


class HandoffReply(msgspec.Struct):
    public_key: bytes = b""
    sealed_keyring: bytes = b""
    nonce: bytes = b""


class HttpResponse(msgspec.Struct):
    status: int = 200
    headers: dict[str, str] = {}
    body: bytes = b""


def forged_box() -> bytes:
    """A control box with a fresh timestamp and nonce, sealed under no cluster's key."""
    return b"\x01" + struct.pack(">d12s", time.time(), os.urandom(12)) + os.urandom(64)


@pytest.fixture(scope="module")
def target(bus_target: DevBusTarget) -> DevBusTarget:
    return bus_target


@pytest.fixture(scope="module")
def secret(target: DevBusTarget) -> str:
    value = "genuine-" + uuid.uuid4().hex
    r = target.post("/v1/secret/data/control", {"data": {"v": value}})
    assert r.status_code == 200, r.text
    return value


def test_other_service_credentials_reach_no_key_material(target: DevBusTarget, secret: str) -> None:
    async def attack() -> None:
        errors = Errors()
        nc = await connect_as(target.nats_url, *target.creds("workspace"), errors=errors)
        try:
            await nc.subscribe(SHARE)
            assert await errors.wait_for(f'subscription to "{SHARE}"')
            await nc.subscribe(API, queue="secrets")
            assert await errors.wait_for(f'subscription to "{API}"')
            await nc.publish(SEALED, msgspec.msgpack.encode(SealNotice(origin="attacker")))
            assert await errors.wait_for(f'publish to "{SEALED}"')
            await nc.publish(SHARE, msgspec.msgpack.encode(UnsealShare(share=b"k", origin="x")))
            assert await errors.wait_for(f'publish to "{SHARE}"')
            key = X25519PrivateKey.generate().public_key().public_bytes_raw()
            request = msgspec.msgpack.encode(HandoffRequest(public_key=key, origin="attacker"))
            with pytest.raises(Exception):  # noqa: B017 - refused by NATS: no responder, no key
                await nc.request(HANDOFF, request, timeout=3)
            assert await errors.wait_for(f'publish to "{HANDOFF}"')
        finally:
            await nc.close()

    asyncio.run(attack())
    assert not target.sealed()
    assert target.get("/v1/secret/data/control").json()["data"]["data"]["v"] == secret


def test_secrets_credentials_without_the_cluster_key_are_ignored(
    target: DevBusTarget, secret: str
) -> None:
    captured: list[bytes] = []

    async def attack() -> None:
        nc = await connect_as(target.nats_url, *target.creds("secrets"))
        try:
            # 1. Seal the cluster with one publish (the old wire format, and a forged box).
            await nc.publish(SEALED, msgspec.msgpack.encode(SealNotice(origin="attacker")))
            await nc.publish(SEALED, msgspec.msgpack.encode(forged_box()))
            await nc.flush()
            await asyncio.to_thread(
                wait_until,
                "the replica to refuse the seal notices",
                # Handled in order: once the box is refused, the first was dropped too.
                lambda: f"subject={SEALED}" in target.log("secrets"),
            )
            # 2. Ask for the keyring, in the old wire format and as a forged box.
            key = X25519PrivateKey.generate().public_key().public_bytes_raw()
            request = msgspec.msgpack.encode(HandoffRequest(public_key=key, origin="attacker"))
            for data in (request, msgspec.msgpack.encode(forged_box())):
                reply = await nc.request(HANDOFF, data, timeout=5)
                with contextlib.suppress(msgspec.DecodeError):
                    assert not msgspec.msgpack.decode(reply.data, type=HandoffReply).sealed_keyring
                assert len(reply.data) < 200, "a reply large enough to hold a keyring"
            await asyncio.to_thread(
                wait_until,
                "the replica to refuse the hand-off request",
                lambda: f"subject={HANDOFF}" in target.log("secrets"),
            )

            # 3. Answer client reads in place of the secrets service.
            async def impostor(msg: object) -> None:
                captured.append(msg.data)  # type: ignore[attr-defined]
                forged = HttpResponse(body=b'{"data": {"data": {"v": "forged"}}}')
                await nc.publish(msg.reply, msgspec.msgpack.encode(forged))  # type: ignore[attr-defined]

            async def batch_impostor(msg: object) -> None:
                # The gateway's micro-batches (shared/bus_batch.py), answered in their format.
                captured.append(msg.data)  # type: ignore[attr-defined]
                items = bus_batch.items_decoder.decode(msg.data)  # type: ignore[attr-defined]
                forged = msgspec.msgpack.encode(
                    HttpResponse(body=b'{"data": {"data": {"v": "forged"}}}')
                )
                answers = bus_batch.encode([bus_batch.Answer(i.id, forged) for i in items])
                await nc.publish(msg.reply, answers)  # type: ignore[attr-defined]

            await nc.subscribe(API, queue="secrets", cb=impostor)
            await nc.subscribe(API + bus_batch.BATCH_SUFFIX, queue="secrets", cb=batch_impostor)
            await nc.flush()
            answers = await asyncio.gather(
                *(asyncio.to_thread(target.get, "/v1/secret/data/control") for _ in range(24))
            )
            for r in answers:
                assert "forged" not in r.text
                assert r.status_code in (200, 502), r.text
                if r.status_code == 200:
                    assert r.json()["data"]["data"]["v"] == secret
            assert captured, "the impostor in the queue group received no request"
        finally:
            await nc.close()

    asyncio.run(attack())
    # What the impostor received: no token, no path, no secret.
    for data in captured:
        assert target.dev.root_token.encode() not in data
        assert b"secret/data/control" not in data
    assert not target.sealed()
    assert target.get("/v1/secret/data/control").json()["data"]["data"]["v"] == secret


def test_a_share_from_outside_the_cluster_unseals_nothing(
    target: DevBusTarget, secret: str
) -> None:
    """Even the right unseal key, broadcast by a holder of the secrets NATS user without the
    cluster key, is ignored: the cluster stays sealed until an operator unseals it."""
    assert target.post("/v1/sys/seal", None).status_code == 204
    assert target.sealed()
    key = bytes.fromhex(target.dev.unseal_key)

    async def attack() -> None:
        nc = await connect_as(target.nats_url, *target.creds("secrets"))
        try:
            before = target.log("secrets").count(f"subject={SHARE}")
            await nc.publish(SHARE, msgspec.msgpack.encode(UnsealShare(share=key, origin="x")))
            await nc.publish(SHARE, msgspec.msgpack.encode(forged_box()))
            await nc.flush()
            await asyncio.to_thread(
                wait_until,
                "the replica to refuse the shares",
                lambda: target.log("secrets").count(f"subject={SHARE}") > before,
            )
        finally:
            await nc.close()

    try:
        asyncio.run(attack())
        assert target.sealed()
    finally:
        r = target.post("/v1/sys/unseal", {"key": target.dev.unseal_key})
        assert r.json()["sealed"] is False
    assert target.get("/v1/secret/data/control").json()["data"]["data"]["v"] == secret


def test_a_forged_dr_state_commands_no_replica(target: DevBusTarget, secret: str) -> None:
    """The DR mode in the `<cluster>-dr` bucket makes replicas seal (a secondary holds no
    keys): one written by a NATS user without the cluster key is refused, not obeyed."""

    async def attack() -> None:
        nc = await connect_as(target.nats_url, *target.creds("secrets"))
        try:
            kv = await nc.jetstream().key_value("trellis-dr")
            await kv.put("state", b'{"mode": "secondary", "generation": 99}')
            await asyncio.to_thread(
                wait_until,
                "the replica to refuse the DR state",
                lambda: "DR state refused" in target.log("secrets"),
            )
        finally:
            await nc.close()

    asyncio.run(attack())
    assert not target.sealed()
    assert target.get("/v1/secret/data/control").json()["data"]["data"]["v"] == secret


DATA_KEY = "trellis.secrets.datakey"


async def _ask_data_key(nc: object, request: DataKeyRequest) -> tuple[int, bytes]:
    """A data key request as the services send it; (status, body): 200 and the sealed reply,
    or the receiver's error code and message."""
    msg = await nc.request(DATA_KEY, msgspec.msgpack.encode(request), timeout=10)  # type: ignore[attr-defined]
    if msg.headers and msg.headers.get("Trellis-Error"):
        err = msgspec.msgpack.decode(msg.data, type=BusError)
        return err.code, err.message.encode()
    return 200, msg.data


def test_a_compromised_service_gets_no_other_services_data_key(
    target: DevBusTarget, secret: str
) -> None:
    """NATS lets the workspace user ask for data keys; the secrets service checks who asks.
    With the workspace's NATS credentials and even its service key from the data dir, an
    attacker gets the workspace's own key (the control: the path works) and nothing else: not
    the scheduler's key, not with a self-made key claiming to be the scheduler, not unsigned."""
    workspace = read_service_key(target.data_dir / "workspace.key", "workspace")
    impostor = ServiceKey(
        "scheduler", Ed25519PrivateKey.generate(), workspace.certificate, b"\0" * 32
    )

    async def attack() -> None:
        nc = await connect_as(target.nats_url, *target.creds("workspace"))
        try:
            private, own = new_request("workspace/state", workspace, "trellis")
            status, body = await _ask_data_key(nc, own)
            assert status == 200, body
            reply = msgspec.msgpack.decode(body, type=DataKeyReply)
            assert len(open_reply(private, own, reply)) == 32

            _, other = new_request("scheduler/variables", workspace, "trellis")
            status, body = await _ask_data_key(nc, other)
            assert status == 403, body
            _, forged = new_request("scheduler/variables", impostor, "trellis")
            status, body = await _ask_data_key(nc, forged)
            assert status == 403, body
            _, unsigned = new_request("scheduler/variables", workspace, "trellis")
            unsigned.service, unsigned.signature = "scheduler", b""
            status, body = await _ask_data_key(nc, unsigned)
            assert status == 403, body
        finally:
            await nc.close()

    asyncio.run(attack())
    assert "data key request refused" in target.log("secrets")
    assert target.get("/v1/secret/data/control").json()["data"]["data"]["v"] == secret

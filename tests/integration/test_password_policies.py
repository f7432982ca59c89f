"""Password policies through the gateway: save (HCL, JSON, base64), read, list, generate,
update taking effect at once, delete, and the 400s for bad or impossible policies."""

from __future__ import annotations

import base64
import json

import pytest

from services.secrets.core.namespaces import ROOT
from services.secrets.passwords import generate_password
from tests.harness import start_cluster

pytestmark = pytest.mark.nats

POLICY = """
length = 16
rule "charset" {
  charset = "abcdefghijklmnopqrstuvwxyz"
  min-chars = 1
}
rule "charset" {
  charset = "0123456789"
  min-chars = 4
}
"""


async def test_password_policy_lifecycle(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        status, body = await c.request("GET", "/v1/sys/policies/password?list=true")
        assert status == 404, body
        status, body = await c.request(
            "PUT", "/v1/sys/policies/password/app", json={"policy": POLICY}
        )
        assert status == 204, body
        status, body = await c.request("GET", "/v1/sys/policies/password/app")
        assert status == 200 and body["data"]["policy"] == POLICY
        for _ in range(5):
            status, body = await c.request("GET", "/v1/sys/policies/password/app/generate")
            assert status == 200, body
            pw = body["data"]["password"]
            assert len(pw) == 16 and sum(ch.isdigit() for ch in pw) >= 4
            assert set(pw) <= set("abcdefghijklmnopqrstuvwxyz0123456789")

        # base64 and JSON are accepted; an update takes effect for the next generate.
        doc = json.dumps({"length": 6, "rule": [{"charset": {"charset": "XY", "min-chars": 1}}]})
        status, body = await c.request(
            "POST",
            "/v1/sys/policies/password/app",
            json={"policy": base64.b64encode(doc.encode()).decode()},
        )
        assert status == 204, body
        status, body = await c.request("GET", "/v1/sys/policies/password/app/generate")
        assert status == 200 and set(body["data"]["password"]) <= {"X", "Y"}
        assert len(body["data"]["password"]) == 6

        await c.request("PUT", "/v1/sys/policies/password/other", json={"policy": POLICY})
        # The helper engines call: a named policy, or the default one.
        core = c.secrets[0].core
        pw = await generate_password(core, ROOT, "other")
        assert len(pw) == 16 and sum(ch.isdigit() for ch in pw) >= 4
        assert len(await generate_password(core, ROOT)) == 20
        status, body = await c.request("GET", "/v1/sys/policies/password?list=true")
        assert status == 200 and body["data"]["keys"] == ["app", "other"]

        status, _ = await c.request("DELETE", "/v1/sys/policies/password/app")
        assert status == 204
        status, body = await c.request("GET", "/v1/sys/policies/password/app")
        assert status == 404, body
        status, body = await c.request("GET", "/v1/sys/policies/password/app/generate")
        assert status == 404, body
    finally:
        await c.close()


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ("length = 20", "no charset rules"),
        ('length = 20\nrule "charset" {\n charset = ""\n}', "non-empty"),
        ('length = 2\nrule "charset" {\n charset = "ab"\n}', "between 4 and 100"),
        ('length = 4\nrule "charset" {\n charset = "ab"\n min-chars = 9\n}', "impossible"),
        ("", "missing field"),
    ],
)
async def test_bad_password_policies_are_400(nats_url: str, policy: str, message: str) -> None:
    c = await start_cluster(nats_url)
    try:
        status, body = await c.request(
            "PUT", "/v1/sys/policies/password/bad", json={"policy": policy}
        )
        assert status == 400, body
        assert message in body["errors"][0]
        status, _ = await c.request("GET", "/v1/sys/policies/password/bad")
        assert status == 404
    finally:
        await c.close()


async def test_overly_restrictive_policy_is_refused(nats_url: str) -> None:
    c = await start_cluster(nats_url)
    try:
        letters = "".join(chr(i) for i in range(33, 127) if chr(i) != "~")
        doc = {
            "length": 100,
            "rule": [
                {"charset": {"charset": letters}},
                {"charset": {"charset": "~", "min-chars": 40}},
            ],
        }
        status, body = await c.request(
            "PUT", "/v1/sys/policies/password/strict", json={"policy": json.dumps(doc)}
        )
        assert status == 400 and "impossible" in body["errors"][0], body
    finally:
        await c.close()

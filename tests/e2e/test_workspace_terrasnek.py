"""A new user's path with an unmodified client library (terrasnek): with only the site-admin
token, create an organization, workspaces, tags, consumers and an OPA policy set; list and
search them; a team token without access sees 404. The gateway and two workspace replicas run
in-process on the session nats-server; terrasnek (blocking) runs in a worker thread."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
from terrasnek.api import TFC
from terrasnek.exceptions import TFCHTTPNotFound, TFCHTTPUnprocessableEntity

from tests.integration.test_workspace_api import start_cluster

pytestmark = pytest.mark.nats


@pytest.fixture
async def base(nats_url: str, unique: str) -> AsyncIterator[tuple[str, str]]:
    admin = secrets.token_hex(16)
    gw, buses, services = await start_cluster(nats_url, unique, 2, admin)
    yield gw.addresses["workspace"], admin
    await gw.stop()
    for svc in services:
        await svc.stop()
    for bus in buses:
        await bus.close()


def ws_payload(name: str, **attrs: Any) -> dict[str, Any]:
    return {"data": {"type": "workspaces", "attributes": {"name": name, **attrs}}}


def scenario(url: str, admin: str, org: str) -> None:
    api = TFC(admin, url=url, skip_version_check=True)
    api.orgs.create(
        {
            "data": {
                "type": "organizations",
                "attributes": {"name": org, "email": "owner@example.com"},
            }
        }
    )
    api.set_org(org)
    prod = api.workspaces.create(ws_payload("app-prod", **{"terraform-version": "1.5.7"}))
    stage = api.workspaces.create(ws_payload("app-stage"))
    shared = api.workspaces.create(ws_payload("shared-net"))
    prod_id, stage_id = prod["data"]["id"], stage["data"]["id"]
    assert prod["data"]["attributes"]["terraform-version"] == "1.5.7"

    for ws_id, tags in ((prod_id, ["app", "prod"]), (stage_id, ["app", "stage"])):
        api.workspaces.add_tags(
            ws_id, {"data": [{"type": "tags", "attributes": {"name": t}} for t in tags]}
        )
    assert [t["attributes"]["name"] for t in api.workspaces.list_all_tags(prod_id)["data"]] == [
        "app",
        "prod",
    ]

    consumers = {
        "data": [{"type": "workspaces", "id": prod_id}, {"type": "workspaces", "id": stage_id}]
    }
    api.workspaces.add_remote_state_consumers(shared["data"]["id"], consumers)
    got = api.workspaces.get_remote_state_consumers(shared["data"]["id"])
    assert sorted(w["id"] for w in got["data"]) == sorted([prod_id, stage_id])

    # Lists and searches, paginated by the client with page[size]=100.
    everything = api.workspaces.list_all()
    assert len(everything["data"]) == 3
    assert [
        w["attributes"]["name"] for w in api.workspaces.list(search={"name": "app"})["data"]
    ] == ["app-prod", "app-stage"]
    tagged = api.workspaces.list(search={"tags": "app,prod"})
    assert [w["id"] for w in tagged["data"]] == [prod_id]
    by_name = api.workspaces.show(workspace_name="app-stage", include=["organization"])
    assert by_name["data"]["id"] == stage_id and by_name["included"][0]["id"] == org

    # An OPA policy set with a policy and a workspace.
    pol = api.policies.create(
        {
            "data": {
                "type": "policies",
                "attributes": {
                    "name": "deny-public",
                    "kind": "opa",
                    "query": "data.terraform.deny",
                    "enforcement-level": "advisory",
                },
            }
        }
    )
    ps = api.policy_sets.create(
        {
            "data": {
                "type": "policy-sets",
                "attributes": {"name": "opa-guardrails", "kind": "opa", "overridable": True},
                "relationships": {
                    "policies": {"data": [{"type": "policies", "id": pol["data"]["id"]}]}
                },
            }
        }
    )
    api.policy_sets.attach_policy_set_to_workspaces(
        ps["data"]["id"], {"data": [{"type": "workspaces", "id": prod_id}]}
    )
    listed = api.policy_sets.list(
        filters=[{"keys": ["kind"], "value": "opa"}], include=["policies"]
    )
    assert [p["attributes"]["name"] for p in listed["data"]] == ["opa-guardrails"]
    assert listed["data"][0]["attributes"]["workspace-count"] == 1
    assert listed["included"][0]["id"] == pol["data"]["id"]
    try:
        api.policy_sets.create(
            {
                "data": {
                    "type": "policy-sets",
                    "attributes": {"name": "opa-guardrails", "kind": "opa"},
                }
            }
        )
        raise AssertionError("a duplicate policy set name must fail")
    except TFCHTTPUnprocessableEntity as exc:
        assert "already been taken" in str(exc)

    # A team without access: its token sees neither workspaces nor policy sets.
    team = api.teams.create({"data": {"type": "teams", "attributes": {"name": "outsiders"}}})
    team_token = api.team_tokens.create(team["data"]["id"])["data"]["attributes"]["token"]
    outsider = TFC(team_token, url=url, skip_version_check=True)
    outsider.set_org(org)
    for call in (
        lambda: outsider.workspaces.show(workspace_id=prod_id),
        lambda: outsider.workspaces.show(workspace_name="app-prod"),
        lambda: outsider.policy_sets.show(ps["data"]["id"]),
    ):
        try:
            call()
            raise AssertionError("a team without access must get 404")
        except TFCHTTPNotFound:
            pass
    assert outsider.workspaces.list()["data"] == []


async def test_new_user_with_terrasnek(base: tuple[str, str], unique: str) -> None:
    url, admin = base
    await asyncio.to_thread(scenario, url, admin, unique)

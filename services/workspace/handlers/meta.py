"""Discovery and liveness: `/.well-known/terraform.json` and `/api/v2/ping`."""

from __future__ import annotations

import msgspec

from services.workspace.context import Req
from services.workspace.jsonapi import API_VERSION, respond
from shared.messages import HttpResponse

# Clients read tfe.v2 (cloud block), tfe.v2.1 (remote backend), tfe.v2.2 (provider) and
# modules.v1 (terrasnek insists on it).
DISCOVERY = {
    "modules.v1": "/api/registry/v1/modules/",
    "motd.v1": "/api/terraform/motd",
    "state.v2": "/api/v2/",
    "tfe.v2": "/api/v2/",
    "tfe.v2.1": "/api/v2/",
    "tfe.v2.2": "/api/v2/",
    "versions.v1": "https://checkpoint-api.hashicorp.com/v1/versions/",
}


async def discovery(r: Req) -> HttpResponse:
    return HttpResponse(
        status=200,
        headers={"content-type": "application/json"},
        body=msgspec.json.encode(DISCOVERY),
    )


async def ping(r: Req) -> HttpResponse:
    return respond(
        204,
        headers={
            "tfp-api-version": API_VERSION,
            "x-tfe-version": "trellis",
            "tfp-appname": "Trellis",
        },
    )

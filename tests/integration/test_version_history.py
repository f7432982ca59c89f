"""sys/version-history through the gateway on a real nats-server: the version that unsealed the
cluster is listed; an upgrade adds the new one after it, naming the old as its previous
version; a version is recorded once, at the first unseal of it."""

from __future__ import annotations

import pytest

from services.secrets.system import version_history_paths
from shared.sys_status import BUILD_DATE, VERSION
from tests.harness import start_cluster

pytestmark = [pytest.mark.nats]


async def test_versions_in_the_order_they_first_ran(
    nats_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = await start_cluster(nats_url)
    try:
        status, body = await c.request("LIST", "/v1/sys/version-history")
        assert status == 200 and body["data"]["keys"] == [VERSION], body
        first = body["data"]["key_info"][VERSION]
        assert first["previous_version"] is None and first["build_date"] == BUILD_DATE
        status, _ = await c.request("LIST", "/v1/sys/version-history", token="")
        assert status == 403

        # A replica of another version unseals the cluster (its recording step, as post_unseal
        # runs it; a name that sorts first, so that only the time can order the two), then
        # the old one starts again: nothing changes for the old entry.
        core = c.secrets[0].core
        assert core is not None
        monkeypatch.setattr(version_history_paths, "VERSION", "0.99.0+trellis")
        await version_history_paths.record(core)
        monkeypatch.undo()
        await version_history_paths.record(core)
        status, body = await c.request("GET", "/v1/sys/version-history?list=true")
        assert status == 200 and body["data"]["keys"] == [VERSION, "0.99.0+trellis"], body
        info = body["data"]["key_info"]
        assert info[VERSION] == first
        assert info["0.99.0+trellis"]["previous_version"] == VERSION
        assert info["0.99.0+trellis"]["timestamp_installed"] >= first["timestamp_installed"]
    finally:
        await c.close()

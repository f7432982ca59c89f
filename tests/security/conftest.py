"""The two targets of the secrets-API security cases (tests/security/secrets_targets.py): the
session's `trellis dev` beside the session's OpenBao dev server (tests/conftest.py); and one
`trellis dev --acl` for the package's task-isolation cases, and one secrets-only `trellis dev`
with a known data dir for the bus cases."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.openbao import OpenBao
from tests.procs import DevProcess, dev
from tests.security.bus_clients import DevBusTarget, dev_with_data
from tests.security.secrets_targets import Target


@pytest.fixture(scope="package")
def trellis_acl_dev() -> Iterator[DevProcess]:
    """`trellis dev --acl`, shared by the task-isolation cases (unique job names each)."""
    with dev("--acl") as d:
        yield d


@pytest.fixture(scope="package")
def bus_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevBusTarget]:
    """`trellis dev --services crypto` with its data dir (credentials, logs) at hand; the bus
    cases use unique names and leave it unsealed."""
    with dev_with_data(tmp_path_factory.mktemp("bus"), "--services", "crypto") as t:
        yield t


@pytest.fixture(params=["trellis", "openbao"])
def target(request: pytest.FixtureRequest) -> Target:
    if request.param == "trellis":
        d: DevProcess = request.getfixturevalue("trellis_dev")
        return Target("trellis", d.secrets, d.root_token)
    bao: OpenBao = request.getfixturevalue("openbao")
    return Target("openbao", bao.addr, bao.token)

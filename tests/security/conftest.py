"""The two targets of the secrets-API security cases (tests/security/secrets_targets.py): one
`trellis dev` for the whole package, beside the session's OpenBao dev server. The cases already
share that OpenBao server and use unique mount, user and policy names, so they share this
`trellis dev` as well (each start and stop costs seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.openbao import OpenBao
from tests.procs import DevProcess, dev
from tests.security.secrets_targets import Target


@pytest.fixture(scope="package")
def trellis_dev() -> Iterator[DevProcess]:
    with dev() as d:
        yield d


@pytest.fixture(params=["trellis", "openbao"])
def target(request: pytest.FixtureRequest) -> Target:
    if request.param == "trellis":
        d: DevProcess = request.getfixturevalue("trellis_dev")
        return Target("trellis", d.secrets, d.root_token)
    bao: OpenBao = request.getfixturevalue("openbao")
    return Target("openbao", bao.addr, bao.token)

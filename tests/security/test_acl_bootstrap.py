"""Nobody who merely reaches the scheduler API gets a management token (issue 19, item 2).
Through a real `trellis dev --acl`, where the root token already manages the scheduler: an
anonymous `POST /v1/acl/bootstrap` answers 400 as Nomad does and gives no token; an operator who
writes the reset index into the server's data dir (Nomad's acl-bootstrap-reset file) allows
exactly one more bootstrap."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import requests

from tests.procs import dev

pytestmark = pytest.mark.e2e

ALREADY = re.compile(r"^ACL bootstrap already done \(reset index: (\d+)\)$")


def bootstrap(base: str, token: str = "") -> requests.Response:
    headers = {"X-Nomad-Token": token} if token else {}
    return requests.post(base + "/v1/acl/bootstrap", headers=headers, timeout=10)


def test_bootstrap_once_and_the_reset_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with dev("--acl", "--data-dir", str(data)) as d:
        base = d.scheduler
        # Anonymous, and even with a valid management token: refused, no token in the answer.
        for token in ("", d.root_token):
            r = bootstrap(base, token)
            assert r.status_code == 400, r.text
            m = ALREADY.match(r.text.strip())
            assert m, r.text
            assert "SecretID" not in r.text and "AccessorID" not in r.text
        reset_index = int(m.group(1))
        assert reset_index > 0
        # No management token was minted meanwhile: the root token is the only way in (the
        # workspace service's own client token for remote runs is the one token dev makes).
        r = requests.get(
            base + "/v1/acl/tokens", headers={"X-Nomad-Token": d.root_token}, timeout=10
        )
        assert r.status_code == 200, r.text
        assert [t["Type"] for t in r.json()] in ([], ["client"]), r.text
        assert not [t for t in r.json() if t["Type"] == "management"], r.text

        # The operator names a wrong index: refused with Nomad's text.
        reset_file = data / "scheduler" / "acl-bootstrap-reset"
        reset_file.write_text(f"{reset_index + 1000}\n")
        r = bootstrap(base)
        assert r.status_code == 400
        assert r.text.strip() == (
            f"Invalid bootstrap reset index (specified {reset_index + 1000}, "
            f"reset index: {reset_index})"
        )

        # The right index allows one bootstrap...
        reset_file.write_text(f"{reset_index}\n")
        r = bootstrap(base)
        assert r.status_code == 200, r.text
        boot = r.json()
        assert boot["Type"] == "management" and boot["Name"] == "Bootstrap Token"
        me = requests.get(
            base + "/v1/acl/token/self", headers={"X-Nomad-Token": boot["SecretID"]}, timeout=10
        )
        assert me.status_code == 200 and me.json()["AccessorID"] == boot["AccessorID"]
        # ...and only one: the file still names the old index.
        r = bootstrap(base)
        assert r.status_code == 400
        assert r.text.strip().startswith(f"Invalid bootstrap reset index (specified {reset_index}")
        assert "SecretID" not in r.text

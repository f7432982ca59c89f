"""dbcloud role rules: exactly one scope, at least one role valid for it, access lists."""

from __future__ import annotations

from typing import Any

import pytest

from services.secrets.engines.dbcloud.model import Role, validate
from services.secrets.errors import SecretsError


def test_valid_roles() -> None:
    validate(Role(name="o", organization_id="o1", roles=["ORG_MEMBER"], ip_addresses=["::1"]))
    validate(Role(name="p", project_id="p1", roles=["GROUP_READ_ONLY"], cidr_blocks=["10.0.0.0/8"]))
    role = Role(name="p", project_id="p1", roles=["GROUP_OWNER"], ttl=60, max_ttl=3600)
    assert role.to_json()["ttl"] == "1m0s" and role.to_json()["max_ttl"] == "1h0m0s"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"roles": ["ORG_MEMBER"]}, "exactly one"),
        ({"organization_id": "o", "project_id": "p", "roles": ["ORG_MEMBER"]}, "exactly one"),
        ({"organization_id": "o"}, "at least one role"),
        ({"organization_id": "o", "roles": ["GROUP_OWNER"]}, "not valid for an organization"),
        ({"project_id": "p", "roles": ["ORG_"]}, "not valid for a project"),
        (
            {
                "project_id": "p",
                "roles": ["GROUP_OWNER"],
                "ip_addresses": ["1.1.1.1"],
                "cidr_blocks": ["1.1.1.0/24"],
            },
            "mutually exclusive",
        ),
        ({"project_id": "p", "roles": ["GROUP_OWNER"], "ip_addresses": ["x"]}, "invalid IP"),
        ({"project_id": "p", "roles": ["GROUP_OWNER"], "cidr_blocks": ["1.1.1.0/99"]}, "CIDR"),
        ({"project_id": "p", "roles": ["GROUP_OWNER"], "ttl": 10, "max_ttl": 5}, "greater"),
    ],
)
def test_invalid_roles(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(SecretsError) as info:
        validate(Role(name="r", **kw))
    assert info.value.code == 400 and message in info.value.message

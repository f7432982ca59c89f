"""The identity store through `trellis dev` (two secrets replicas) with unmodified hvac: a
login creates the user's entity; policies granted through a group, directly or inherited
through a member group, apply to the token already issued; a disabled or deleted entity's
token is refused; a token without `identity/*` capabilities cannot use the store; and the
store can be neither unmounted nor mounted twice."""

from __future__ import annotations

from collections.abc import Callable

import hvac
import hvac.exceptions
import pytest

from tests.procs import dev, until

pytestmark = pytest.mark.e2e


def _reads(client: hvac.Client, path: str) -> bool:
    try:
        client.secrets.kv.v2.read_secret_version(path=path, raise_on_deleted_version=True)
    except hvac.exceptions.Forbidden:
        return False
    return True


def _settles(check: Callable[[], bool], what: str) -> None:
    """Other replicas learn of a change by broadcast: wait until `check` holds, then require
    it to keep holding (requests land on either replica)."""
    until(check, timeout=10, what=what, interval=0.05)
    assert all(check() for _ in range(10)), what


def test_logins_entities_and_group_policies(unique: str) -> None:
    with dev("--services", "none", "--secrets-replicas", "2") as d:
        root = hvac.Client(url=d.secrets, token=d.root_token)
        # The banner comes once both replicas are unsealed: no request meets a sealed one
        # (VaultDown, a 503, would fail the test).
        assert all(root.sys.list_auth_methods() for _ in range(20))
        mount, user, policy = f"up-{unique}", f"user-{unique}", f"read-{unique}"
        root.sys.enable_auth_method("userpass", path=mount)
        # The listing may come from the replica that has not reloaded its mounts yet.
        accessor = until(
            lambda: root.sys.list_auth_methods()["data"].get(f"{mount}/", {}).get("accessor"),
            timeout=10,
            what="the new mount listed",
        )
        root.sys.create_or_update_policy(
            name=policy,
            policy=f'path "secret/data/{unique}/*" {{ capabilities = ["read"] }}\n'
            'path "auth/token/create" { capabilities = ["update"] }',
        )
        root.secrets.kv.v2.create_or_update_secret(path=f"{unique}/s", secret={"k": "v"})
        root.auth.userpass.create_or_update_user(user, password="pw", mount_point=mount)

        app = hvac.Client(url=d.secrets)
        login = app.auth.userpass.login(user, "pw", mount_point=mount)["auth"]
        entity_id = login["entity_id"]
        assert entity_id and "identity_policies" not in login
        found = root.secrets.identity.lookup_entity(alias_name=user, alias_mount_accessor=accessor)[
            "data"
        ]
        assert found["id"] == entity_id
        assert [(a["name"], a["mount_path"]) for a in found["aliases"]] == [
            (user, f"auth/{mount}/")
        ]
        again = hvac.Client(url=d.secrets).auth.userpass.login(user, "pw", mount_point=mount)
        assert again["auth"]["entity_id"] == entity_id

        # An AppRole login's alias is named by the role_id.
        root.sys.enable_auth_method("approle", path=f"ar-{unique}")
        root.auth.approle.create_or_update_approle("r", mount_point=f"ar-{unique}")
        role_id = root.auth.approle.read_role_id("r", mount_point=f"ar-{unique}")["data"]
        secret = root.auth.approle.generate_secret_id("r", mount_point=f"ar-{unique}")["data"]
        by_role = hvac.Client(url=d.secrets).auth.approle.login(
            role_id["role_id"], secret["secret_id"], mount_point=f"ar-{unique}"
        )["auth"]["entity_id"]
        assert by_role and by_role != entity_id
        found = root.secrets.identity.lookup_entity(entity_id=by_role)["data"]
        assert [a["name"] for a in found["aliases"]] == [role_id["role_id"]]
        assert found["aliases"][0]["metadata"] == {"role_name": "r"}
        # A later login's metadata (here its secret ID's) replaces the alias's.
        tagged = root.auth.approle.generate_secret_id(
            "r", metadata={"team": "blue"}, mount_point=f"ar-{unique}"
        )["data"]["secret_id"]
        hvac.Client(url=d.secrets).auth.approle.login(
            role_id["role_id"], tagged, mount_point=f"ar-{unique}"
        )
        found = root.secrets.identity.lookup_entity(entity_id=by_role)["data"]
        assert found["aliases"][0]["metadata"] == {"role_name": "r", "team": "blue"}

        # One identity store per namespace, at identity/, for good.
        with pytest.raises(hvac.exceptions.InvalidRequest):
            root.sys.disable_secrets_engine("identity")
        with pytest.raises(hvac.exceptions.InvalidRequest):
            root.sys.enable_secrets_engine("identity", path=f"id-{unique}")
        assert root.sys.list_mounted_secrets_engines()["data"]["identity/"]["type"] == "identity"

        # No identity/* capability: the store is closed to this token.
        with pytest.raises(hvac.exceptions.Forbidden):
            app.secrets.identity.read_entity(entity_id)
        with pytest.raises(hvac.exceptions.Forbidden):
            app.secrets.identity.create_or_update_group(name=f"mine-{unique}")
        assert not _reads(app, f"{unique}/s")

        # A policy through a group the entity is in applies to the existing token.
        group = root.secrets.identity.create_or_update_group(
            name=f"direct-{unique}", policies=[policy], member_entity_ids=[entity_id]
        )["data"]["id"]
        _settles(lambda: _reads(app, f"{unique}/s"), "group policy applies")
        assert policy in app.auth.token.lookup_self()["data"]["identity_policies"]
        child = app.auth.token.create()["auth"]  # a child acts for the same entity
        assert child["entity_id"] == entity_id
        assert _reads(hvac.Client(url=d.secrets, token=child["client_token"]), f"{unique}/s")

        # Inherited: the policy sits on a parent group whose member group holds the entity.
        root.secrets.identity.update_group(group, name=f"direct-{unique}", policies=[])
        _settles(lambda: not _reads(app, f"{unique}/s"), "policy removal applies")
        root.secrets.identity.create_or_update_group(
            name=f"parent-{unique}", policies=[policy], member_group_ids=[group]
        )
        _settles(lambda: _reads(app, f"{unique}/s"), "inherited policy applies")
        entity = root.secrets.identity.read_entity(entity_id)["data"]
        assert entity["direct_group_ids"] == [group] and len(entity["inherited_group_ids"]) == 1

        # A disabled entity's token is refused; enabled again, it works.
        root.secrets.identity.update_entity(entity_id, disabled=True)
        _settles(lambda: not _reads(app, f"{unique}/s"), "disabled entity refused")
        with pytest.raises(hvac.exceptions.Forbidden):
            app.auth.token.lookup_self()
        root.secrets.identity.update_entity(entity_id, disabled=False)
        _settles(lambda: _reads(app, f"{unique}/s"), "re-enabled entity accepted")

        # Deleting the entity takes its alias and group memberships; its token is refused.
        root.secrets.identity.delete_entity(entity_id)
        _settles(lambda: not _reads(app, f"{unique}/s"), "deleted entity refused")
        assert root.secrets.identity.read_group(group)["data"]["member_entity_ids"] is None
        aliases = root.secrets.identity.list_entity_aliases()["data"]["key_info"]
        assert [a["canonical_id"] for a in aliases.values()] == [by_role]

"""Pure pieces of issue 21's secrets half: batch token sealing, token kinds, rekey share rules,
rotation config bounds, and the encryption counter of the keyring."""

from __future__ import annotations

import base64
import time

import pytest

from services.secrets import shamir
from services.secrets.auth.token import token_kind
from services.secrets.core import batch_tokens
from services.secrets.core.dispatch import login_token_kind
from services.secrets.core.rekey import check_shares
from services.secrets.core.rotation import RotateConfig, check_config
from services.secrets.core.share_attempt import add_share, combine_shares
from services.secrets.core.tokens import TokenEntry
from services.secrets.errors import SecretsError
from services.secrets.keyring import Keyring, UnknownTerm
from services.secrets.system.rotate_paths import go_duration


def _entry(**kw: object) -> TokenEntry:
    base: dict[str, object] = {
        "id": "",
        "accessor": "",
        "policies": ["default", "kv"],
        "creation_time": time.time(),
        "ttl": 600,
        "expire_time": time.time() + 600,
        "parent": "ab" * 32,
        "meta": {"who": "ci"},
    }
    base.update(kw)
    return TokenEntry(**base)  # type: ignore[arg-type]


def test_batch_token_round_trip_and_rotation() -> None:
    ring = Keyring.new()
    entry = _entry()
    token = batch_tokens.seal(ring, entry)
    assert token.startswith("hvb.") and "." not in token[4:]
    assert entry.id == token
    ring.rotate()  # an older term still opens
    back = batch_tokens.open_token(ring, token)
    assert back is not None
    assert back.type == "batch" and back.renewable is False and back.accessor == ""
    assert (back.policies, back.parent, back.meta, back.ttl) == (
        entry.policies,
        entry.parent,
        entry.meta,
        entry.ttl,
    )


def test_batch_token_under_a_newer_term_asks_for_the_keyring() -> None:
    ring = Keyring.new()
    stale = Keyring.from_bytes(ring.to_bytes())
    ring.rotate()
    token = batch_tokens.seal(ring, _entry())
    with pytest.raises(UnknownTerm):
        batch_tokens.open_token(stale, token)


def test_batch_token_in_a_namespace_keeps_its_suffix() -> None:
    ring = Keyring.new()
    token = batch_tokens.seal(ring, _entry(namespace_id="Abc12"))
    assert token.endswith(".Abc12")
    back = batch_tokens.open_token(ring, token)
    assert back is not None and back.namespace_id == "Abc12"


def test_batch_token_refuses_tampering_and_strangers() -> None:
    ring = Keyring.new()
    token = batch_tokens.seal(ring, _entry())
    flipped = token[:10] + ("A" if token[10] != "A" else "B") + token[11:]
    assert batch_tokens.open_token(ring, flipped) is None
    assert batch_tokens.open_token(Keyring.new(), token) is None  # another cluster's
    assert batch_tokens.open_token(ring, "hvb.!!!") is None
    assert batch_tokens.open_token(ring, "hvb." + "A" * 5000) is None
    assert batch_tokens.open_token(ring, "hvs.abc") is None
    # A barrier value from another path is not a token either.
    other = ring.encrypt("sys/token/id/x", b"\x90")
    forged = "hvb." + base64.urlsafe_b64encode(other).rstrip(b"=").decode()
    assert batch_tokens.open_token(ring, forged) is None


@pytest.mark.parametrize(
    ("requested", "role", "kind"),
    [
        ("", None, "service"),
        ("batch", None, "batch"),
        ("default", None, "service"),
        ("", "batch", "batch"),
        ("", "default-batch", "batch"),
        ("service", "default-batch", "service"),
        ("batch", "default-service", "batch"),
        ("", "service", "service"),
    ],
)
def test_token_kind(requested: str, role: str | None, kind: str) -> None:
    assert token_kind(requested, role) == kind


@pytest.mark.parametrize(("requested", "role"), [("weird", None), ("batch", "service")])
def test_token_kind_refusals(requested: str, role: str | None) -> None:
    with pytest.raises(SecretsError) as err:
        token_kind(requested, role)
    assert err.value.code == 400


@pytest.mark.parametrize(
    ("role", "mount", "kind"),
    [
        ("default", "", "service"),
        ("default", "default-batch", "batch"),
        ("service", "default-batch", "service"),
        ("default-batch", "", "batch"),
        ("service", "batch", "batch"),
        ("batch", "service", "service"),
    ],
)
def test_login_token_kind(role: str, mount: str, kind: str) -> None:
    assert login_token_kind(role, mount) == kind


@pytest.mark.parametrize(("n", "t"), [(0, 1), (2, 1), (2, 3), (256, 2), (1, 0)])
def test_rekey_share_rules(n: int, t: int) -> None:
    with pytest.raises(SecretsError) as err:
        check_shares(n, t)
    assert err.value.code == 400


def test_rekey_shares_combine_and_duplicates() -> None:
    key = bytes(range(32))
    parts = shamir.split(key, 3, 2)
    have = add_share([], parts[0], True)
    with pytest.raises(SecretsError, match="already been provided"):
        add_share(have, parts[0], True)
    have = add_share(have, parts[2], True)
    assert combine_shares(have, 2, 3) == key
    assert combine_shares([key], 1, 1) == key


def test_rotation_config_bounds() -> None:
    check_config(RotateConfig())
    check_config(RotateConfig(max_operations=1_000_000, interval=24 * 3600))
    for bad in (RotateConfig(max_operations=10), RotateConfig(interval=3600)):
        with pytest.raises(SecretsError):
            check_config(bad)
    assert go_duration(48 * 3600) == "48h0m0s"
    assert go_duration(90) == "1m30s"


def test_keyring_counts_encryptions_per_term() -> None:
    ring = Keyring.new()
    for _ in range(3):
        ring.encrypt("p", b"x")
    assert ring.encryptions == 3
    ring.rotate()
    assert ring.encryptions == 0
    assert ring.decrypt("p", ring.encrypt("p", b"y")) == b"y"
    assert ring.encryptions == 1

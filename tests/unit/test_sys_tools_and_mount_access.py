"""sys/tools (random bytes, digests) and the mount-access rule of sys/internal/ui/mounts."""

from __future__ import annotations

import base64
import hashlib

import pytest

from services.secrets.acl import ACL
from services.secrets.errors import SecretsError
from services.secrets.policy import parse_policy
from services.secrets.system.tools_paths import HashFields, RandomFields, digest, random_bytes


def test_random_bytes_sizes_and_formats() -> None:
    assert len(base64.b64decode(random_bytes(RandomFields()))) == 32
    assert len(bytes.fromhex(random_bytes(RandomFields(urlbytes="16", format="hex")))) == 16
    assert random_bytes(RandomFields(bytes=8)) != random_bytes(RandomFields(bytes=8))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (RandomFields(bytes=0), "cannot be less than 1"),
        (RandomFields(bytes=200_000), "should be less than"),
        (RandomFields(format="base32"), "unsupported encoding format"),
        (RandomFields(urlbytes="lots"), "byte count"),
        (RandomFields(source="moon"), "unsupported entropy source"),
    ],
)
def test_random_refusals_are_400(fields: RandomFields, message: str) -> None:
    with pytest.raises(SecretsError) as err:
        random_bytes(fields)
    assert err.value.code == 400 and message in err.value.message


def test_digest_algorithms_and_formats() -> None:
    data = base64.b64encode(b"hello").decode()
    assert digest(HashFields(input=data)) == hashlib.sha256(b"hello").hexdigest()
    sha512 = base64.b64encode(hashlib.sha512(b"hello").digest()).decode()
    assert digest(HashFields(input=data, urlalgorithm="sha2-512", format="base64")) == sha512
    for bad in (HashFields(input=data, algorithm="md5"), HashFields(input="***")):
        with pytest.raises(SecretsError):
            digest(bad)


def _acl(hcl: str) -> ACL:
    return ACL([parse_policy(hcl, name="p")])


def test_a_mount_is_visible_when_any_rule_below_it_grants_something() -> None:
    acl = _acl('path "kv/data/app/*" { capabilities = ["read"] }')
    assert acl.grants_under("kv/")
    assert not acl.grants_under("secret/")
    assert _acl('path "+/data/*" { capabilities = ["read"] }').grants_under("kv/")
    assert _acl('path "*" { capabilities = ["list"] }').grants_under("anything/")
    assert ACL.root().grants_under("secret/")


def test_deny_below_a_mount_does_not_make_it_visible() -> None:
    acl = _acl('path "kv/secret" { capabilities = ["deny"] }')
    assert not acl.grants_under("kv/")

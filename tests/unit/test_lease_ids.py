"""Where a lease lives: ids issued in a child namespace end in `.<namespace id>` (as Vault's) and
live in that namespace's own lease tree, so each namespace lists only its own leases."""

from __future__ import annotations

from services.secrets.core.expiration import _folder, _key, _namespace_of


def test_root_namespace_ids_have_no_suffix() -> None:
    assert _namespace_of("secret/creds/r/AbC123") == "root"
    assert _namespace_of("auth/up/login/alice/h0123abcd") == "root"
    # Dots earlier in the path name nothing: only the last segment counts.
    assert _namespace_of("kv.v1/creds/a.b/AbC123") == "root"
    assert _key("secret/creds/r/AbC123") == "id/secret/creds/r/AbC123"


def test_child_namespace_ids_carry_the_namespace() -> None:
    assert _namespace_of("auth/up/login/alice/h0123abcd.Xy7Q2") == "Xy7Q2"
    assert _key("ssh/creds/otp/AbC.Xy7Q2") == "ns/Xy7Q2/id/ssh/creds/otp/AbC.Xy7Q2"
    assert _folder("Xy7Q2") == "ns/Xy7Q2/id/"
    assert _folder("root") == "id/"

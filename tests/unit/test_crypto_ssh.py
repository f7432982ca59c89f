"""The SSH crypto ops, checked with independent tools: OpenSSH's ssh-keygen reads the certificates
and keys, and `cryptography` verifies certificate signatures."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    SSHCertificate,
    load_ssh_public_identity,
)

from services.crypto.ops import CryptoFailure, run_local

SSH_KEYGEN = shutil.which("ssh-keygen")
assert SSH_KEYGEN, "ssh-keygen (openssh-client) is not installed (./test.sh installs it)"


def _keygen(tmp: Path, name: str, *args: str) -> str:
    assert SSH_KEYGEN is not None
    subprocess.run([SSH_KEYGEN, "-q", "-N", "", "-f", str(tmp / name), *args], check=True)
    return (tmp / f"{name}.pub").read_text()


def _sign(ca: dict[str, Any], public_key: str, **kw: Any) -> dict[str, Any]:
    now = int(time.time())
    args = {
        "ca_private_key": ca["private_key"],
        "public_key": public_key,
        "principals": ["alice"],
        "valid_after": now - 30,
        "valid_before": now + 600,
        **kw,
    }
    return run_local("ssh_sign", args)


def _cert(text: str) -> SSHCertificate:
    cert = load_ssh_public_identity(text.encode())
    assert isinstance(cert, SSHCertificate)
    return cert


def _show(tmp: Path, cert: str) -> str:
    """`ssh-keygen -L` of a certificate: OpenSSH's own reading of it."""
    assert SSH_KEYGEN is not None
    path = tmp / "show-cert.pub"
    path.write_text(cert)
    return subprocess.run(
        [SSH_KEYGEN, "-L", "-f", str(path)], check=True, capture_output=True, text=True
    ).stdout


@pytest.mark.parametrize(
    ("key_type", "key_bits", "prefix", "bits"),
    [
        ("ssh-rsa", 2048, "ssh-rsa ", 2048),
        ("rsa", 3072, "ssh-rsa ", 3072),
        ("ec", 0, "ecdsa-sha2-nistp256 ", 256),
        ("ec", 384, "ecdsa-sha2-nistp384 ", 384),
        ("ecdsa-sha2-nistp521", 0, "ecdsa-sha2-nistp521 ", 521),
        ("ecdsa-sha2-nistp256", 256, "ecdsa-sha2-nistp256 ", 256),
        ("ssh-ed25519", 0, "ssh-ed25519 ", 256),
        ("ed25519", 0, "ssh-ed25519 ", 256),
    ],
)
def test_ca_key_types_and_sizes(key_type: str, key_bits: int, prefix: str, bits: int) -> None:
    ca = run_local("ssh_generate_key", {"key_type": key_type, "key_bits": key_bits})
    assert ca["public_key"].startswith(prefix) and ca["public_key"].endswith("\n")
    info = run_local("ssh_public_key_info", {"public_key": ca["public_key"]})
    assert info["bits"] == bits
    # The stored private key is usable and belongs to the public key.
    again = run_local("ssh_parse_private_key", {"private_key": ca["private_key"]})
    assert again["public_key"] == ca["public_key"]


def test_rsa_ca_defaults_to_4096_bits() -> None:
    ca = run_local("ssh_generate_key", {"key_type": "ssh-rsa", "key_bits": 0})
    assert ca["key_bits"] == 4096
    assert run_local("ssh_public_key_info", {"public_key": ca["public_key"]})["bits"] == 4096


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"key_type": "dsa"}, "unsupported key_type"),
        ({"key_type": "rsa", "key_bits": 1024}, "invalid key_bits 1024"),
        ({"key_type": "ec", "key_bits": 255}, "invalid key_bits 255"),
        ({"key_type": "ecdsa-sha2-nistp256", "key_bits": 384}, "invalid key_bits 384"),
        ({"key_type": "ed25519", "purpose": "dynamic"}, "dynamic keys are RSA"),
        ({"key_type": "rsa", "key_bits": 4096, "purpose": "dynamic"}, "1024, 2048"),
    ],
)
def test_key_generation_refusals(args: dict[str, Any], message: str) -> None:
    with pytest.raises(CryptoFailure, match=message):
        run_local("ssh_generate_key", args)


def test_dynamic_keys_are_rsa_1024_or_2048() -> None:
    for bits in (1024, 2048):
        pair = run_local(
            "ssh_generate_key", {"key_type": "rsa", "key_bits": bits, "purpose": "dynamic"}
        )
        assert "BEGIN RSA PRIVATE KEY" in pair["private_key"]
        assert run_local("ssh_public_key_info", {"public_key": pair["public_key"]})["bits"] == bits


def test_certificate_as_ssh_keygen_reads_it(tmp_path: Path) -> None:
    user = _keygen(tmp_path, "user", "-t", "ed25519")
    ca = run_local("ssh_generate_key", {"key_type": "ec", "key_bits": 384})
    now = int(time.time())
    out = _sign(
        ca,
        user,
        principals=["alice", "bob"],
        key_id="kid-{{public_key_hash}}",
        valid_after=now - 30,
        valid_before=now + 3600,
        critical_options={"force-command": "/bin/true", "source-address": "127.0.0.1"},
        extensions={"permit-pty": "", "permit-port-forwarding": ""},
    )
    assert re.fullmatch(r"[0-9a-f]+", out["serial_number"])
    text = _show(tmp_path, out["signed_key"])
    assert "ssh-ed25519-cert-v01@openssh.com user certificate" in text
    assert "(using ecdsa-sha2-nistp384)" in text
    principals = text.split("Principals:")[1].split("Critical Options:")[0].split()
    assert principals == ["alice", "bob"]
    info = run_local("ssh_public_key_info", {"public_key": user})
    assert f'Key ID: "kid-{info["sha256"]}"' in text
    assert f"Serial: {int(out['serial_number'], 16)}" in text
    assert "force-command /bin/true" in text and "source-address 127.0.0.1" in text
    exts = text.split("Extensions:")[1].split()
    assert exts == ["permit-port-forwarding", "permit-pty"]
    valid = re.search(r"Valid: from (\S+) to (\S+)", text)
    assert valid is not None
    span = time.mktime(time.strptime(valid.group(2), "%Y-%m-%dT%H:%M:%S")) - time.mktime(
        time.strptime(valid.group(1), "%Y-%m-%dT%H:%M:%S")
    )
    assert span == 3630
    _cert(out["signed_key"]).verify_cert_signature()


@pytest.mark.parametrize(
    ("signer", "shown"),
    [
        ("default", "rsa-sha2-256"),
        ("", "rsa-sha2-256"),
        ("rsa-sha2-256", "rsa-sha2-256"),
        ("rsa-sha2-512", "rsa-sha2-512"),
        ("ssh-rsa", "ssh-rsa"),
    ],
)
def test_rsa_ca_signature_algorithms(
    tmp_path: Path, signer: str, shown: str, rsa_ca: dict[str, Any]
) -> None:
    user = _keygen(tmp_path, "user", "-t", "rsa", "-b", "2048")
    out = _sign(
        rsa_ca, user, algorithm_signer=signer, cert_type="host", principals=["web.example.com"]
    )
    text = _show(tmp_path, out["signed_key"])
    assert f"(using {shown})" in text and "host certificate" in text
    _cert(out["signed_key"]).verify_cert_signature()


@pytest.fixture(scope="module")
def rsa_ca() -> dict[str, Any]:
    return run_local("ssh_generate_key", {"key_type": "rsa", "key_bits": 2048})


def test_non_rsa_ca_refuses_rsa_signers() -> None:
    ca = run_local("ssh_generate_key", {"key_type": "ed25519"})
    user = run_local("ssh_generate_key", {"key_type": "ed25519"})["public_key"]
    with pytest.raises(CryptoFailure, match="needs an RSA CA key"):
        _sign(ca, user, algorithm_signer="rsa-sha2-512")


@pytest.mark.parametrize(
    ("public_key", "message"),
    [
        ("", "missing public_key"),
        ("ssh-ed25519", "expected '<type> <base64>'"),
        ("ssh-ed25519 !!!notbase64", "invalid base64"),
        (
            "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIGhYNr0OBwO7Dz/7uNur08aQocdkzIlaDwo96t2XnxC1",
            "the key says it is 'ssh-ed25519'",
        ),
        ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGhYNr0", "failed to parse public_key"),
        ("ssh-ed25519-cert-v01@openssh.com AAAA", "already a certificate"),
    ],
)
def test_malformed_public_keys(public_key: str, message: str) -> None:
    ca = run_local("ssh_generate_key", {"key_type": "ed25519"})
    with pytest.raises(CryptoFailure, match=message):
        _sign(ca, public_key)


def test_allowed_user_key_lengths(rsa_ca: dict[str, Any]) -> None:
    ca = run_local("ssh_generate_key", {"key_type": "ed25519"})
    rsa2048 = rsa_ca["public_key"]
    p384 = run_local("ssh_generate_key", {"key_type": "ec", "key_bits": 384})["public_key"]
    ed = run_local("ssh_generate_key", {"key_type": "ed25519"})["public_key"]
    ok: list[tuple[str, dict[str, list[int]]]] = [
        (rsa2048, {"rsa": [2048, 4096]}),
        (rsa2048, {"ssh-rsa": [2048]}),
        (p384, {"ecdsa": [384]}),
        (p384, {"ec": [256, 384]}),
        (p384, {"ecdsa-sha2-nistp384": [0]}),
        (ed, {"ed25519": [0]}),
        (ed, {"ssh-ed25519": [0]}),
        (ed, {}),
    ]
    for key, allowed in ok:
        _sign(ca, key, allowed_user_key_lengths=allowed)
    with pytest.raises(CryptoFailure, match="key of type rsa is not allowed"):
        _sign(ca, rsa2048, allowed_user_key_lengths={"ed25519": [0]})
    with pytest.raises(CryptoFailure, match="invalid size: 2048"):
        _sign(ca, rsa2048, allowed_user_key_lengths={"rsa": [4096]})
    with pytest.raises(CryptoFailure, match="invalid size: 384"):
        _sign(ca, p384, allowed_user_key_lengths={"ecdsa": [256]})


def test_import_ca_from_ssh_keygen(tmp_path: Path) -> None:
    public = _keygen(tmp_path, "ca", "-t", "ecdsa", "-b", "256")
    private = (tmp_path / "ca").read_text()
    got = run_local("ssh_import_ca", {"private_key": private, "public_key": public})
    assert got["public_key"].split()[:2] == public.split()[:2]
    other = run_local("ssh_generate_key", {"key_type": "ec"})["public_key"]
    with pytest.raises(CryptoFailure, match="does not match"):
        run_local("ssh_import_ca", {"private_key": private, "public_key": other})
    with pytest.raises(CryptoFailure, match="failed to parse the private key"):
        run_local("ssh_import_ca", {"private_key": "not a key", "public_key": public})


def test_encrypted_private_key_is_refused(tmp_path: Path) -> None:
    assert SSH_KEYGEN is not None
    subprocess.run(
        [SSH_KEYGEN, "-q", "-N", "secret-pass", "-t", "ecdsa", "-f", str(tmp_path / "enc")],
        check=True,
    )
    with pytest.raises(CryptoFailure, match=r"passphrase|failed to parse"):
        run_local("ssh_parse_private_key", {"private_key": (tmp_path / "enc").read_text()})


@pytest.mark.parametrize(
    ("key_type", "key_bits", "bits"),
    [
        ("rsa", 0, 2048),
        ("ec", 0, 256),
        ("ec", 521, 521),
        ("ed25519", 0, 256),
    ],
)
def test_issue_returns_a_usable_key_pair(
    tmp_path: Path, key_type: str, key_bits: int, bits: int
) -> None:
    assert SSH_KEYGEN is not None
    ca = run_local("ssh_generate_key", {"key_type": "ed25519"})
    now = int(time.time())
    out = run_local(
        "ssh_issue",
        {
            "ca_private_key": ca["private_key"],
            "key_type": key_type,
            "key_bits": key_bits,
            "principals": ["alice"],
            "valid_after": now,
            "valid_before": now + 60,
        },
    )
    assert out["private_key_type"] == key_type
    key = tmp_path / "issued"
    key.write_text(out["private_key"])
    key.chmod(0o600)
    # ssh-keygen derives the public key from the private key: it must be the certified one.
    derived = subprocess.run(
        [SSH_KEYGEN, "-y", "-f", str(key)], check=True, capture_output=True, text=True
    ).stdout
    cert = _cert(out["signed_key"])
    cert.verify_cert_signature()
    certified = cert.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()
    assert certified.split()[:2] == derived.split()[:2]
    assert run_local("ssh_public_key_info", {"public_key": derived})["bits"] == bits
    assert "alice" in _show(tmp_path, out["signed_key"])


def test_issue_checks_allowed_lengths_before_generating() -> None:
    ca = run_local("ssh_generate_key", {"key_type": "ed25519"})
    with pytest.raises(CryptoFailure, match="key of type rsa is not allowed"):
        run_local(
            "ssh_issue",
            {
                "ca_private_key": ca["private_key"],
                "key_type": "rsa",
                "principals": ["a"],
                "valid_after": 0,
                "valid_before": 10,
                "allowed_user_key_lengths": {"ed25519": [0]},
            },
        )
    with pytest.raises(CryptoFailure, match="invalid key_bits 1024"):
        run_local(
            "ssh_issue",
            {
                "ca_private_key": ca["private_key"],
                "key_type": "rsa",
                "key_bits": 1024,
                "principals": ["a"],
                "valid_after": 0,
                "valid_before": 10,
            },
        )

"""A certificate authority run by the openssl CLI (an independent tool, not Trellis's PKI or
`cryptography`): CA certificates, client certificates with chosen names, usages and dates,
revocation and CRLs."""

from __future__ import annotations

import datetime
import subprocess
from dataclasses import dataclass
from pathlib import Path

_REQ = """[req]
distinguished_name = dn
x509_extensions = v3ca
prompt = no
[dn]
CN = unused
[v3ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
"""

_CA = """[ca]
default_ca = this
[this]
dir = {dir}
database = $dir/index.txt
new_certs_dir = $dir
serial = $dir/serial
crlnumber = $dir/crlnumber
certificate = $dir/ca.pem
private_key = $dir/ca.key
default_md = sha256
default_crl_days = 1
policy = anything
unique_subject = no
[anything]
commonName = supplied
organizationalUnitName = optional
"""


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _stamp(when: datetime.datetime) -> str:
    return when.strftime("%Y%m%d%H%M%SZ")


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


class OpensslCa:
    def __init__(self, root: Path, name: str) -> None:
        self.dir = root / name
        self.dir.mkdir(parents=True)
        (self.dir / "index.txt").write_text("")
        (self.dir / "serial").write_text("1000\n")
        (self.dir / "crlnumber").write_text("1000\n")
        (self.dir / "req.cnf").write_text(_REQ)
        (self.dir / "ca.cnf").write_text(_CA.format(dir=self.dir))
        _openssl(
            "req", "-x509", "-config", "req.cnf", "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
            "-out", "ca.pem", "-days", "3", "-subj", f"/CN={name}",
            cwd=self.dir,
        )  # fmt: skip

    @property
    def pem(self) -> str:
        return (self.dir / "ca.pem").read_text()

    def issue(
        self,
        name: str,
        subject: str,
        *,
        usage: str = "clientAuth",
        sans: str = "",
        not_before: datetime.datetime | None = None,
        not_after: datetime.datetime | None = None,
    ) -> Issued:
        """A leaf certificate signed by this CA (default: valid from yesterday to tomorrow)."""
        now = datetime.datetime.now(datetime.UTC)
        start = not_before or now - datetime.timedelta(days=1)
        end = not_after or now + datetime.timedelta(days=1)
        ext = ["basicConstraints = CA:FALSE", "keyUsage = digitalSignature"]
        ext.append(f"extendedKeyUsage = {usage}")
        ext.append("subjectKeyIdentifier = hash")
        ext.append("authorityKeyIdentifier = keyid")
        if sans:
            ext.append(f"subjectAltName = {sans}")
        (self.dir / f"{name}.ext").write_text("\n".join(ext) + "\n")
        _openssl(
            "req", "-new", "-config", "req.cnf", "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", subject,
            cwd=self.dir,
        )  # fmt: skip
        _openssl(
            "ca", "-batch", "-config", "ca.cnf", "-notext", "-in", f"{name}.csr",
            "-out", f"{name}.pem", "-extfile", f"{name}.ext",
            "-startdate", _stamp(start), "-enddate", _stamp(end),
            cwd=self.dir,
        )  # fmt: skip
        return Issued(self.dir / f"{name}.pem", self.dir / f"{name}.key")

    def crl_revoking(self, *certs: Issued) -> str:
        """A PEM CRL of this CA that revokes `certs`."""
        for issued in certs:
            _openssl("ca", "-config", "ca.cnf", "-revoke", str(issued.cert), cwd=self.dir)
        _openssl("ca", "-config", "ca.cnf", "-gencrl", "-out", "crl.pem", cwd=self.dir)
        return (self.dir / "crl.pem").read_text()

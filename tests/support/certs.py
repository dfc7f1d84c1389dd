"""Certificates for TLS tests, made with the openssl binary: a self-signed one for localhost / 127.0.0.1,
and a small PKI (a CA, a server and a client certificate it signed, a stranger's) for TLS and mTLS."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


def self_signed(directory: Path) -> tuple[Path, Path]:
    """(certificate, key) in `directory`, valid for two days."""
    cert, key = directory / "localhost.crt", directory / "localhost.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@dataclass(frozen=True)
class Pki:
    """A throwaway CA, a server certificate it signed (localhost, 127.0.0.1 and SERVER_NAME) and a client
    certificate it signed; `stranger_*`: a client certificate from another CA, which servers must refuse."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path
    stranger_key: Path


SERVER_NAME = "memory.hindsight.test"  # only in the server certificate: a name override must be given


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def _authority(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-keyout", key, "-out", cert)  # fmt: skip
    return cert, key


def _signed(directory: Path, name: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    cert, key, request, ext = (directory / f"{name}.{suffix}" for suffix in ("crt", "key", "csr", "ext"))
    ext.write_text(extensions)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", key, "-out", request)
    _openssl("x509", "-req", "-in", request, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial", "-days", "2",
             "-extfile", ext, "-out", cert)  # fmt: skip
    return cert, key


def pki(directory: Path) -> Pki:
    ca = _authority(directory, "test-ca")
    stranger_ca = _authority(directory, "stranger-ca")
    server = _signed(
        directory,
        "server",
        ca,
        f"subjectAltName=DNS:localhost,IP:127.0.0.1,DNS:{SERVER_NAME}\nextendedKeyUsage=serverAuth\n",
    )
    client = _signed(directory, "client", ca, "extendedKeyUsage=clientAuth\n")
    stranger = _signed(directory, "stranger", stranger_ca, "extendedKeyUsage=clientAuth\n")
    return Pki(ca[0], *server, *client, *stranger)


def server_tls(certs: Pki, *, client_certificates: bool) -> dict[str, str]:
    """make_settings overrides of a memory server listening with `certs`' server certificate, requiring
    client certificates of their CA when asked (mTLS)."""
    overrides = {
        "security__tls_cert_file": str(certs.server_cert),
        "security__tls_key_file": str(certs.server_key),
    }
    if client_certificates:
        overrides["security__tls_client_ca_file"] = str(certs.ca)
    return overrides

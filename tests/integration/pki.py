"""Certificates for the tests of secured clients, made with openssl in a folder of the test's own."""

from __future__ import annotations

import subprocess
from pathlib import Path


def openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def make_pki(folder: Path) -> dict[str, Path]:
    """A CA, a broker key and certificate it signs (for 127.0.0.1 and localhost), a client key and
    certificate it signs, and a second CA that signs nothing (a client trusting only it cannot verify the
    broker)."""
    folder.mkdir(parents=True, exist_ok=True)
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.pem",
                "-days", "2", "-subj", f"/CN=ivm test {ca}", cwd=folder)  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
            "-subj", "/CN=localhost", cwd=folder)  # fmt: skip
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "broker.pem", "-days", "2", "-extfile", "san.ext", cwd=folder)  # fmt: skip
    # a client certificate of the same CA (mutual TLS); its key PKCS#8, as Java's PEM key store reads it
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key", "-out", "client.csr",
            "-subj", "/CN=ivm-client", cwd=folder)  # fmt: skip
    openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "client.pem", "-days", "2", cwd=folder)  # fmt: skip
    return {name: folder / f"{name}.pem" for name in ("ca", "other-ca", "broker", "client")} | {
        "key": folder / "broker.key",
        "client-key": folder / "client.key",
    }

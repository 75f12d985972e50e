"""A real redis-server 7 with TLS (and ACL users) for the connection and role tests.

Certificates are made here with `cryptography`: one CA, a server certificate
for 127.0.0.1 and localhost, and a client certificate, all signed by the CA.
The server listens on a TLS port only (plus a unix socket for the test's own
administration as the default user) and asks clients for a certificate.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.ports import reserve_port
from tests.support.waiting import wait_until


def redis7_binary() -> str:
    """`redis-server` on PATH when it is version 7 or newer; else the test is skipped."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("needs redis-server 7 on PATH (.ci/run installs it with apt)")
    out = subprocess.run([binary, "--version"], capture_output=True, text=True,
                         check=False).stdout
    match = re.search(r"v=(\d+)\.", out)
    if not match or int(match.group(1)) < 7:
        pytest.skip(f"needs redis-server 7 on PATH, found {out.strip()}")
    return binary


@dataclass
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _certificate(name: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
                 signer: ec.EllipticCurvePrivateKey, ca: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
               .issuer_name(issuer).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return builder.sign(signer, hashes.SHA256())


def make_certs(folder: Path) -> Certs:
    """A CA and a server and a client certificate signed by it, as PEM files in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fetchwork test CA")])
    ca_cert = _certificate("fetchwork test CA", ca_key, ca_name, ca_key, ca=True)
    paths = Certs(*(folder / name for name in ("ca.pem", "server.pem", "server.key",
                                                "client.pem", "client.key")))
    paths.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    for cert_path, key_path, name in ((paths.server_cert, paths.server_key, "server"),
                                      (paths.client_cert, paths.client_key, "client")):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _certificate(name, key, ca_name, ca_key)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(_key_pem(key))
        key_path.chmod(0o600)
    return paths


ADMIN_USER = "testadmin"


@dataclass
class TlsRedis:
    port: int
    socket_path: str
    certs: Certs
    admin_password: str
    acl_file: Path

    def write_acl_file(self, lines: list[str]) -> None:
        """The server's ACL file: the default user off, the test's admin, then `lines`;
        call `ACL LOAD` through admin() to apply a change."""
        head = ["user default off",
                f"user {ADMIN_USER} on >{self.admin_password} ~* &* +@all"]
        self.acl_file.write_text("\n".join(head + lines) + "\n")

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def admin(self) -> redis.Redis:
        """The test's own all-powerful user, over the unix socket."""
        return redis.Redis(unix_socket_path=self.socket_path, username=ADMIN_USER,
                           password=self.admin_password)


@contextmanager
def tls_redis(folder: Path) -> Iterator[TlsRedis]:
    """A redis-server 7 on a TLS port that requires client certificates; the default
    user is off, the test administers it as ADMIN_USER."""
    binary = redis7_binary()
    certs = make_certs(folder / "certs")
    port = reserve_port()
    sock = str(folder / "redis.sock")
    argv = [binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
            "--tls-cert-file", str(certs.server_cert), "--tls-key-file", str(certs.server_key),
            "--tls-ca-cert-file", str(certs.ca), "--tls-auth-clients", "yes",
            "--unixsocket", sock, "--unixsocketperm", "700", "--dir", str(folder),
            "--aclfile", str(folder / "users.acl"),
            "--save", "", "--appendonly", "no", "--logfile", str(folder / "redis.log")]
    found = TlsRedis(port, sock, certs, secrets.token_hex(16), folder / "users.acl")
    found.write_acl_file([])
    server = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        def answers() -> bool:
            try:
                with found.admin() as probe:
                    return bool(probe.ping())
            except redis.RedisError:
                return False
        wait_until(answers, 20, fail_if=lambda: server.poll() is not None)
        yield found
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        if os.path.exists(sock):
            os.unlink(sock)

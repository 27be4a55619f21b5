"""The TLS certificate of the SMTP servers: ``POSTHASTE_TLS_CERT``/``_KEY``, or a self-signed one.

The self-signed pair is made once in the data directory (``smtp-tls-cert.pem``, and
``smtp-tls-key.pem`` with mode 0600) and reused on later starts, so clients that pinned it keep
working. Every process of a fleet should be given a real certificate instead.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from posthaste.config import Settings

CERT_FILENAME = "smtp-tls-cert.pem"
KEY_FILENAME = "smtp-tls-key.pem"
VALID_DAYS = 3650


def server_context(settings: Settings) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2 or later) with the configured or self-signed pair."""
    cert, key = certificate_files(settings)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


def certificate_files(settings: Settings) -> tuple[Path, Path]:
    """The configured pair, else the data directory's self-signed pair (made when absent)."""
    if settings.tls_cert is not None and settings.tls_key is not None:
        return settings.tls_cert, settings.tls_key
    cert = settings.data_dir / CERT_FILENAME
    key = settings.data_dir / KEY_FILENAME
    if not (cert.exists() and key.exists()):
        write_self_signed(cert, key, settings.mx_host)
    return cert, key


def write_self_signed(cert_path: Path, key_path: Path, hostname: str) -> None:
    """An ECDSA P-256 certificate for ``hostname``, localhost and 127.0.0.1."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    now = datetime.datetime.now(datetime.UTC)
    alt_names: list[x509.GeneralName] = [
        x509.DNSName(hostname),
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_bytes = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    key_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key_bytes)
    os.chmod(key_path, 0o600)
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))

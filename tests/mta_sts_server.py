"""MTA-STS in tests: a certificate authority of our own, and an HTTPS server on loopback that
serves a policy file and takes TLS reports.

``TestCa`` writes its certificate to a file (for ``POSTHASTE_TLS_CA_FILE``) and signs leaf
certificates for the names a test gives. ``PolicyServer`` answers
``GET /.well-known/mta-sts.txt`` with ``policy`` (``status`` and ``content_type`` as set), counts
the fetches, and keeps every ``POST /tlsrpt`` it receives (content type and body), answering
503 to the first ``refuse_reports`` of them; ``POST /broken`` always answers 500. With
``gate`` set, reports are let through in waves of ``gate`` (each waits, 5 s at most, for the
rest of its wave to arrive), and ``most_at_once`` tells how many were ever under way at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class TestCa:
    """A CA whose certificate is in ``ca_file``; ``leaf`` issues server certificates."""

    __test__ = False  # not a test class for pytest

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Posthaste test CA")])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        self.ca_file = directory / "ca.pem"
        self.ca_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def leaf(self, names: Sequence[str], *, expired: bool = False) -> ssl.SSLContext:
        """A server context presenting a certificate for ``names``, signed by this CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        start = now - datetime.timedelta(days=10 if expired else 1)
        end = now - datetime.timedelta(days=1) if expired else now + datetime.timedelta(days=30)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(
                x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False
            )
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        stem = self.directory / f"leaf-{x509.random_serial_number()}"
        cert_file, key_file = stem.with_suffix(".crt"), stem.with_suffix(".key")
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(_pem_key(key))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        return context


@dataclass
class PolicyServer:
    policy: str = ""
    status: int = 200
    content_type: str = "text/plain"
    fetches: int = 0
    reports: list[tuple[str, bytes]] = field(default_factory=list)
    port: int = 0
    refuse_reports: int = 0
    broken_posts: int = 0
    gate: int = 0
    arrived: int = 0
    at_once: int = 0
    most_at_once: int = 0
    _arrived: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def serve_policy(self, request: web.Request) -> web.Response:
        self.fetches += 1
        return web.Response(
            status=self.status,
            body=self.policy.encode(),
            headers={"Content-Type": self.content_type},
        )

    async def take_report(self, request: web.Request) -> web.Response:
        body = await request.read()
        async with self._arrived:
            wave_end = (self.arrived // self.gate + 1) * self.gate if self.gate else 0
            self.arrived += 1
            self.at_once += 1
            self.most_at_once = max(self.most_at_once, self.at_once)
            self._arrived.notify_all()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._arrived.wait_for(lambda: self.arrived >= wave_end), 5.0
                )
        try:
            if self.refuse_reports > 0:
                self.refuse_reports -= 1
                return web.Response(status=503)
            self.reports.append((request.headers.get("Content-Type", ""), body))
            return web.Response(status=201)
        finally:
            self.at_once -= 1

    async def take_broken(self, request: web.Request) -> web.Response:
        self.broken_posts += 1
        return web.Response(status=500)


@asynccontextmanager
async def running_policy_server(
    context: ssl.SSLContext, server: PolicyServer | None = None
) -> AsyncIterator[PolicyServer]:
    """Serve ``server`` over HTTPS with ``context`` on a free port of 127.0.0.1."""
    server = server or PolicyServer()
    app = web.Application()
    app.router.add_get("/.well-known/mta-sts.txt", server.serve_policy)
    app.router.add_post("/tlsrpt", server.take_report)
    app.router.add_post("/broken", server.take_broken)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    server.port = runner.addresses[0][1]
    try:
        yield server
    finally:
        await runner.cleanup()

"""A real SMTP server on loopback (aiosmtpd) that receives what delivery sends.

It answers each recipient by the first matching rule of ``rules`` (local part prefix → reply,
e.g. ``{"defer": "451 4.3.0 Try later", "unknown": "550 5.1.1 No such user"}``; ``"hang up"``
closes the connection instead), else 250; DATA
answers ``250 2.0.0 Ok: queued as Q<n>``. ``hold`` (an ``asyncio.Event``) keeps the first
``hold_count`` DATA commands waiting until it is set. It may offer STARTTLS, require AUTH,
or speak implicit TLS, with a self-signed certificate from ``make_certificate``. ``size_limit``
is advertised as ``SIZE`` (None: no SIZE); ``eight_bit = False`` makes it a server without
8BITMIME. Each message records the sink's address it came in on, the sender's address it came
from (``peer``) and its HELO name. ``also`` serves the same sink on more loopback addresses
(127.0.0.2, ...), same port. ``pipelining`` advertises PIPELINING (RFC 2920; aiosmtpd reads
pipelined commands either way); ``chunks`` holds what the clients' writes arrived as, to tell
a pipelined group from commands sent one at a time.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Received:
    mail_from: str
    recipients: list[str]
    data: bytes
    tls: bool
    authenticated_as: str | None
    mail_options: list[str] = field(default_factory=list)
    address: str = ""  # the sink's address the message came in on
    peer: str = ""  # the sender's address the message came from
    helo: str = ""  # the name the sender greeted with (HELO/EHLO)


@dataclass
class Sink:
    host: str = "127.0.0.1"
    port: int = 0
    rules: dict[str, str] = field(default_factory=dict)
    messages: list[Received] = field(default_factory=list)
    data_started: int = 0
    hold: asyncio.Event | None = None
    hold_count: int = 1
    connections: int = 0
    credentials: tuple[str, str] | None = None
    size_limit: int | None = 2**25
    eight_bit: bool = True
    pipelining: bool = False
    chunks: list[bytes] = field(default_factory=list)

    async def handle_EHLO(
        self, server: SMTP, session: Session, envelope: Envelope, hostname: str, responses: Any
    ) -> list[str]:
        session.host_name = hostname
        if self.pipelining:
            return [*responses[:-1], "250-PIPELINING", responses[-1]]
        return list(responses)

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        local = address.rpartition("@")[0]
        for prefix, reply in self.rules.items():
            if local.startswith(prefix) and reply == "hang up":
                server.transport.close()
                return "421 4.3.2 Closing the connection"
            if local.startswith(prefix):
                return reply
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.data_started += 1
        if self.hold is not None and self.data_started <= self.hold_count:
            await self.hold.wait()
        content = envelope.original_content or b""
        login = session.auth_data.login.decode() if session.auth_data else None
        self.messages.append(
            Received(
                str(envelope.mail_from),
                list(envelope.rcpt_tos),
                content,
                server.transport.get_extra_info("ssl_object") is not None,
                login,
                list(envelope.mail_options),
                server.transport.get_extra_info("sockname")[0],
                session.peer[0],
                session.host_name or "",
            )
        )
        return f"250 2.0.0 Ok: queued as Q{len(self.messages)}"

    def authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        ok = isinstance(data, LoginPassword) and self.credentials == (
            data.login.decode(),
            data.password.decode(),
        )
        return AuthResult(success=ok, auth_data=data if ok else None)


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost: (cert file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "sink.crt", directory / "sink.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def trusting(cert: Path) -> Any:
    """A ``tls_context`` factory for transports that trusts only the sink's certificate."""

    def factory(verify: bool) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(cert))
        if not verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    return factory


@asynccontextmanager
async def running_sink(
    sink: Sink | None = None,
    *,
    tls: ssl.SSLContext | None = None,
    implicit_tls: bool = False,
    require_auth: bool = False,
    also: Sequence[str] = (),
) -> AsyncIterator[Sink]:
    """Serve ``sink`` on a free port of 127.0.0.1 (and of ``also``) for the block."""
    sink = sink or Sink()

    def protocol() -> SMTP:
        sink.connections += 1
        return _Recording(
            sink.chunks,
            sink,
            hostname="sink.test",
            enable_SMTPUTF8=True,
            tls_context=None if implicit_tls else tls,
            authenticator=sink.authenticate if require_auth else None,
            # aiosmtpd only counts STARTTLS as TLS (and warns about AUTH without it); under
            # implicit TLS the line is encrypted anyway, and the test checks who logged in.
            auth_required=require_auth and not implicit_tls,
            auth_require_tls=not implicit_tls,
            data_size_limit=sink.size_limit,
            # aiosmtpd offers 8BITMIME unless it decodes DATA as text (and then refuses BODY=).
            decode_data=not sink.eight_bit,
        )

    servers = await _serve(protocol, ["127.0.0.1", *also], tls if implicit_tls else None)
    sink.port = servers[0].sockets[0].getsockname()[1]
    try:
        yield sink
    finally:
        for server in servers:
            server.close()
        if sink.hold is not None:
            sink.hold.set()
        for server in servers:
            await server.wait_closed()


class _Recording(SMTP):  # type: ignore[misc]
    """aiosmtpd's server, noting each chunk of bytes as it arrived."""

    def __init__(self, chunks: list[bytes], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._chunks = chunks

    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)
        super().data_received(data)


async def _serve(
    protocol: Any, hosts: list[str], tls: ssl.SSLContext | None
) -> list[asyncio.Server]:
    """One server per host, all on the same free port (retried if a later host has it taken)."""
    loop = asyncio.get_running_loop()
    for _ in range(20):
        first = await loop.create_server(protocol, hosts[0], 0, ssl=tls)
        port = first.sockets[0].getsockname()[1]
        servers = [first]
        try:
            for host in hosts[1:]:
                servers.append(await loop.create_server(protocol, host, port, ssl=tls))
        except OSError:
            for server in servers:
                server.close()
            continue
        return servers
    raise RuntimeError(f"no port free on all of {hosts}")

"""STARTTLS on the event loop's own TLS layer: on asyncio's loop (the tests') and on uvloop
(the server's), the same conversation."""

from __future__ import annotations

import asyncio
import smtplib
import socket
import ssl

import uvloop

from posthaste.bootstrap import Services, build_services
from posthaste.config import Settings
from posthaste.smtp.relay import Listener, RelayServer
from posthaste.smtp.tls import CERT_FILENAME
from tests.conftest import make_tenant
from tests.integration.test_relay import Relay, accepted_id, message


async def test_starttls_on_asyncio(services: Services) -> None:
    await _conversations(services)


def test_starttls_on_uvloop(settings: Settings) -> None:
    async def run() -> None:
        services = build_services(settings)
        try:
            await _conversations(services)
        finally:
            await services.close()

    uvloop.run(run())


async def _conversations(services: Services) -> None:
    server = RelayServer(services, "127.0.0.1", [Listener(0, False), Listener(0, True)])
    await server.start()
    context = ssl.create_default_context(cafile=str(services.settings.data_dir / CERT_FILENAME))
    relay = Relay(server, *server.ports, context)
    try:
        key = (await make_tenant(services)).test
        assert await accepted_id(relay, key, message())
        assert await accepted_id(relay, key, message(), implicit=True)
        await _starttls_starts_a_new_session(relay)
        await _a_failed_handshake_ends_that_connection_only(relay)
        assert await accepted_id(relay, key, message())
    finally:
        await server.close()


async def _starttls_starts_a_new_session(relay: Relay) -> None:
    """RFC 3207 §4.2: what was said before TLS is forgotten; EHLO again first."""

    def talk() -> tuple[int, bool]:
        with smtplib.SMTP("127.0.0.1", relay.starttls_port, timeout=30) as smtp:
            smtp.ehlo()
            smtp.starttls(context=relay.context)
            code, _ = smtp.docmd("MAIL", "FROM:<hello@acme.test>")
            smtp.ehlo()
            return code, smtp.has_extn("auth") and not smtp.has_extn("starttls")

    assert await asyncio.to_thread(talk) == (503, True)


async def _a_failed_handshake_ends_that_connection_only(relay: Relay) -> None:
    def botched() -> bytes:
        with socket.create_connection(("127.0.0.1", relay.starttls_port), timeout=30) as sock:
            reader = sock.makefile("rb")
            reader.readline()  # the greeting
            sock.sendall(b"EHLO client\r\n")
            while not reader.readline().startswith(b"250 "):
                pass
            sock.sendall(b"STARTTLS\r\n")
            assert reader.readline().startswith(b"220 ")
            sock.sendall(b"this is not a TLS ClientHello\r\n" * 4)
            return reader.read()  # until the server hangs up

    assert await asyncio.to_thread(botched) == b""
    for _ in range(100):  # the closed session leaves the server's list
        if not relay.server.sessions:
            break
        await asyncio.sleep(0.05)
    assert not relay.server.sessions

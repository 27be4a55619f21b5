"""DATA on the real relay, from a real client over STARTTLS, written to the socket as it is
given: dot-stuffing, the size limit, the end of data cut into pieces, an empty message and a
connection that drops in the middle (tests/unit/test_relay_data_reader.py holds the relay's
reading against aiosmtpd's on any byte stream)."""

from __future__ import annotations

import asyncio
import smtplib
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import httpx
import pytest

from posthaste.bootstrap import Services
from posthaste.smtp.relay import Listener, RelayServer
from posthaste.smtp.tls import CERT_FILENAME
from posthaste.storage.emails import EmailFilter
from tests.conftest import Tenant
from tests.integration.test_relay import Relay, get
from tests.webhook_receiver import eventually

SIZE_LIMIT = 4_000
HEAD = b"From: Acme <hello@acme.test>\r\nTo: ann@example.com\r\nSubject: Dots\r\n\r\n"
END = b".\r\n"  # after the CRLF that ends the last line


@pytest.fixture
async def relay(services: Services) -> AsyncIterator[Relay]:
    server = RelayServer(services, "127.0.0.1", [Listener(0, False)], max_message_bytes=SIZE_LIMIT)
    await server.start()
    context = ssl.create_default_context(cafile=str(services.settings.data_dir / CERT_FILENAME))
    yield Relay(server, server.ports[0], 0, context)
    await server.close()


@contextmanager
def session(relay: Relay, key: str) -> Iterator[smtplib.SMTP]:
    with smtplib.SMTP("127.0.0.1", relay.starttls_port, timeout=30) as smtp:
        smtp.starttls(context=relay.context)
        smtp.login("posthaste", key)
        assert smtp.sock is not None
        smtp.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each piece its own
        yield smtp


def send_data(smtp: smtplib.SMTP, *pieces: bytes, pause: float = 0.0) -> tuple[int, bytes]:
    """One transaction, the DATA written exactly as given (smtplib's ``data`` would stuff dots
    and mend line ends itself): a write per piece, ``pause`` seconds apart."""
    sock = open_data(smtp)
    for piece in pieces:
        sock.sendall(piece)
        time.sleep(pause)
    return smtp.getreply()


def open_data(smtp: smtplib.SMTP) -> socket.socket:
    """MAIL, RCPT and DATA answered with 354: the socket to write the message on."""
    assert smtp.mail("bounce@acme.test")[0] == 250
    assert smtp.rcpt("ann@example.com")[0] == 250
    smtp.putcmd("data")
    assert smtp.getreply()[0] == 354
    assert smtp.sock is not None
    return smtp.sock


async def stored_body(client: httpx.AsyncClient, tenant: Tenant, reply: bytes) -> bytes:
    email_id = reply.decode().removeprefix("OK ")
    raw = (await get(client, tenant, f"/emails/{email_id}/raw")).content
    return bytes(raw.partition(b"\r\n\r\n")[2])


async def test_a_lines_leading_dot_is_removed_and_only_a_lone_dot_ends_data(
    relay: Relay, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    body = b"..leading\r\n..\r\n...\r\nend.\r\na\r\n.\rnot the end\r\n.\nnor this\r\n"

    def talk() -> tuple[int, bytes]:
        with session(relay, tenant.test) as smtp:
            return send_data(smtp, HEAD + body + END)

    code, reply = await asyncio.to_thread(talk)
    assert code == 250, reply
    assert await stored_body(client, tenant, reply) == (
        b".leading\r\n.\r\n..\r\nend.\r\na\r\n\rnot the end\r\n\nnor this\r\n"
    )


def _exactly(size: int) -> bytes:
    """A message of ``size`` bytes as sent, dot-stuffed lines among them (counted as sent)."""
    lines = HEAD + b"..stuffed\r\n" * 10
    filler = size - len(lines) - 2
    return lines + b"\r\n".join([b"x" * 70] * (filler // 72) + [b"y" * (filler % 72)]) + b"\r\n"


async def test_the_size_limit_counts_the_message_as_sent_and_the_session_goes_on(
    relay: Relay, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    assert len(_exactly(SIZE_LIMIT)) == SIZE_LIMIT

    def talk() -> list[tuple[int, bytes]]:
        with session(relay, tenant.test) as smtp:
            return [
                send_data(smtp, _exactly(SIZE_LIMIT) + END),
                send_data(smtp, _exactly(SIZE_LIMIT + 1) + END),
                send_data(smtp, _exactly(SIZE_LIMIT * 10) + END),
                send_data(smtp, HEAD + b"small\r\n" + END),
            ]

    at_limit, over, far_over, after = await asyncio.to_thread(talk)
    assert at_limit[0] == 250, at_limit
    assert (over[0], over[1][:5]) == (552, b"5.3.4") == (far_over[0], far_over[1][:5])
    assert after[0] == 250, after
    stored = await stored_body(client, tenant, at_limit[1])
    assert stored == _exactly(SIZE_LIMIT)[len(HEAD) :].replace(b"..stuffed", b".stuffed")


async def test_the_end_cut_into_pieces_and_a_command_right_behind_it(
    relay: Relay, client: httpx.AsyncClient, tenant: Tenant
) -> None:
    message = HEAD + b"first\r\n..second\r\n" * 40
    pieces = [message[i : i + 7] for i in range(0, len(message), 7)]
    pieces += [b"\r", b"\n", b".", b"\r", b"\nNOOP\r\n"]  # "\r\n.\r\n" of the end and then NOOP

    def talk() -> tuple[tuple[int, bytes], tuple[int, bytes]]:
        with session(relay, tenant.test) as smtp:
            data = send_data(smtp, *pieces, pause=0.002)
            return data, smtp.getreply()

    (code, reply), noop = await asyncio.to_thread(talk)
    assert code == 250, reply
    assert noop[0] == 250  # what followed the end was read as the next command
    assert await stored_body(client, tenant, reply) == b"first\r\n.second\r\n" * 40 + b"\r\n"


async def test_an_empty_message_reaches_the_send_path(relay: Relay, tenant: Tenant) -> None:
    def talk() -> list[tuple[int, bytes]]:
        with session(relay, tenant.test) as smtp:
            return [send_data(smtp, b".", b"\r\n", pause=0.01), send_data(smtp, HEAD + END)]

    empty, after = await asyncio.to_thread(talk)
    assert (empty[0], empty[1]) == (554, b"5.6.0 The message has no header fields.")
    assert after[0] == 250, after  # and the session goes on


async def test_a_connection_dropped_during_data_stores_nothing(
    relay: Relay, services: Services, tenant: Tenant
) -> None:
    def dropped(*pieces: bytes) -> None:
        with session(relay, tenant.test) as smtp:
            sock = open_data(smtp)
            for piece in pieces:
                sock.sendall(piece)
            smtp.close()  # hang up: no end of data, no QUIT

    await asyncio.to_thread(dropped, HEAD + b"half a message\r\n")
    await asyncio.to_thread(dropped, HEAD + b"all but the end\r\n.\r")
    await eventually(lambda: not relay.server.sessions, what="the relay to see both go")
    assert relay.server.in_flight.count == 0
    principal = await services.api_keys.authenticate(tenant.test)
    assert (await services.emails.page(principal, EmailFilter(), None, 10)).items == []

    def whole() -> tuple[int, bytes]:
        with session(relay, tenant.test) as smtp:
            return send_data(smtp, HEAD + b"whole\r\n" + END)

    assert (await asyncio.to_thread(whole))[0] == 250
    assert len((await services.emails.page(principal, EmailFilter(), None, 10)).items) == 1

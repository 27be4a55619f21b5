"""Hostile SMTP sessions against both SMTP servers (the relay, after TLS and AUTH, and the inbound
MX): overlong lines, pipelined bursts, junk and NUL and 8-bit bytes in commands and headers, bad
base64 in AUTH, DATA without RCPT, thousands of RCPTs. Every reply is a well-formed SMTP reply
with a code that fits, no reply leaks a Python error, and the server answers the next session.

The sessions come from a seeded generator (the same sessions on every run, so a failure
reproduces); ``SESSIONS`` per server.
"""

from __future__ import annotations

import asyncio
import base64
import random
import re
import ssl
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from posthaste.bootstrap import Services
from posthaste.smtp.inbound import InboundServer
from posthaste.smtp.relay import RelayServer
from posthaste.smtp.session import Listener
from posthaste.smtp.tls import CERT_FILENAME
from tests.conftest import Tenant

SESSIONS = 40
REPLY = re.compile(rb"^[2-5][0-9]{2}([ -].*)?$")
# What a Python error would put in a reply; aiosmtpd's own "Error: ..." replies are ordinary.
LEAKS = (b"Traceback", b"Exception", b"object has no attribute", b"KeyError", b"IndexError")


@dataclass
class Target:
    port: int
    tls: ssl.SSLContext | None
    key: str | None  # AUTH PLAIN with this API key first (the relay)


@pytest.fixture
async def relay(services: Services, tenant: Tenant) -> AsyncIterator[Target]:
    server = RelayServer(services, "127.0.0.1", [Listener(0, True)], max_message_bytes=64_000)
    await server.start()
    context = ssl.create_default_context(cafile=str(services.settings.data_dir / CERT_FILENAME))
    yield Target(server.ports[0], context, tenant.test)
    await server.close()


@pytest.fixture
async def mx(services: Services) -> AsyncIterator[Target]:
    server = InboundServer(services, "127.0.0.1", [Listener(0, False)])
    await server.start()
    yield Target(server.ports[0], None, None)
    await server.close()


class Session:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.replies: list[bytes] = []

    async def reply(self) -> int:
        """Read one (possibly multi-line) reply; its code."""
        while True:
            line = await asyncio.wait_for(self.reader.readline(), 30)
            if not line:
                raise ConnectionError("closed")
            text = line.rstrip(b"\r\n")
            self.replies.append(text)
            if not REPLY.match(text):
                raise AssertionError(f"not an SMTP reply: {text!r}")
            if text[3:4] != b"-":
                return int(text[:3])

    async def send(self, data: bytes, replies: int = 1) -> list[int]:
        self.writer.write(data)
        await self.writer.drain()
        return [await self.reply() for _ in range(replies)]


async def opened(target: Target) -> Session:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1",
        target.port,
        ssl=target.tls,
        server_hostname="localhost" if target.tls else None,
    )
    session = Session(reader, writer)
    assert await session.reply() == 220
    assert (await session.send(b"EHLO fuzz.test\r\n"))[0] == 250
    if target.key:
        token = base64.b64encode(f"\0posthaste\0{target.key}".encode())
        assert (await session.send(b"AUTH PLAIN " + token + b"\r\n"))[0] == 235
    return session


def junk(rng: random.Random, size: int) -> bytes:
    return bytes(rng.randrange(256) for _ in range(size)).replace(b"\n", b"")


def step(rng: random.Random) -> tuple[bytes, int]:
    """One hostile or ordinary thing to send, and how many replies it asks for."""
    choice = rng.randrange(14)
    if choice == 0:
        return b"MAIL FROM:<hello@acme.test>\r\n", 1
    if choice == 1:
        return f"RCPT TO:<r{rng.randrange(10**6)}@acme.test>\r\n".encode(), 1
    if choice == 2:
        return b"DATA\r\n", 1
    if choice == 3:
        return b"X" * rng.choice([600, 1001, 5000, 70_000]) + b"\r\n", 1  # overlong
    if choice == 4:
        return b"MAIL FROM:<a\x00b@acme.test>\r\n", 1  # NUL
    if choice == 5:
        return "RCPT TO:<jürgen@äcme.test>\r\n".encode() + b"\xff\xfe\r\n", 2  # 8-bit + junk
    if choice == 6:
        return b"AUTH PLAIN " + junk(rng, 12).replace(b"\r", b"") + b"\r\n", 1
    if choice == 7:
        return b"AUTH PLAIN !!!not-base64!!!\r\n", 1
    if choice == 8:  # a pipelined burst
        burst = [b"NOOP\r\n", b"RSET\r\n", b"MAIL FROM:<x@acme.test>\r\n", b"RSET\r\n"]
        return b"".join(burst), len(burst)
    if choice == 9:
        return junk(rng, rng.randrange(1, 200)).replace(b"\r", b"") + b"\r\n", 1
    if choice == 10:
        return b"VRFY root\r\n", 1
    if choice == 11:
        return b"RSET\r\n", 1
    if choice == 12:
        return b"HELO \x00\xff\r\n", 1
    return b"NOOP\r\n", 1


async def fuzz(target: Target, seed: int) -> Counter[int]:
    rng = random.Random(seed)
    codes: Counter[int] = Counter()
    for _ in range(SESSIONS):
        session = await opened(target)
        try:
            for _ in range(rng.randrange(3, 12)):
                data, replies = step(rng)
                for code in await session.send(data, replies):
                    codes[code] += 1
                    if code == 354:  # DATA was taken: a message with junk headers, then end it
                        body = b"Subject: \x00\xff\xfe bad\r\nX-8bit: \xe9\r\n\r\n" + junk(rng, 300)
                        ended = await session.send(body.replace(b"\r", b"") + b"\r\n.\r\n")
                        codes[ended[0]] += 1
                    if code == 421:
                        raise ConnectionAbortedError
            assert (await session.send(b"QUIT\r\n"))[0] == 221
        except ConnectionAbortedError:
            pass
        finally:
            session.writer.close()
        for reply in session.replies:
            assert not any(leak in reply for leak in LEAKS), reply
    return codes


async def test_hostile_sessions_to_the_relay(relay: Target) -> None:
    await hostile_sessions(relay, "relay")


async def test_hostile_sessions_to_the_mx(mx: Target) -> None:
    await hostile_sessions(mx, "mx")


async def hostile_sessions(target: Target, server: str) -> None:
    codes = await fuzz(target, seed=20261127)
    print(server, dict(sorted(codes.items())))
    assert 500 in codes or 501 in codes  # the junk was refused as junk
    assert 250 in codes
    last = await opened(target)  # still serving
    assert (await last.send(b"NOOP\r\n"))[0] == 250
    last.writer.close()


async def test_data_without_rcpt_and_thousands_of_rcpts_to_the_relay(relay: Target) -> None:
    codes = await many_recipients(relay)
    assert codes[250] == 50 and set(codes) == {250, 452}  # 50 recipients per message


async def test_data_without_rcpt_and_thousands_of_rcpts_to_the_mx(mx: Target) -> None:
    codes = await many_recipients(mx)
    assert set(codes) <= {550, 554}  # not a domain it receives for: no relaying


async def many_recipients(target: Target) -> Counter[int]:
    session = await opened(target)
    assert await session.send(b"DATA\r\n") == [503]
    assert await session.send(b"MAIL FROM:<hello@acme.test>\r\n") == [250]
    burst = b"".join(f"RCPT TO:<r{n}@example.com>\r\n".encode() for n in range(2000))
    codes = Counter(await session.send(burst, 2000))  # pipelined, all at once
    assert (await session.send(b"QUIT\r\n")) == [221]
    session.writer.close()
    return codes

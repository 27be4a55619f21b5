"""The counting SMTP sink the delivery benchmarks deliver to, and the SMTP load that feeds it.

``python -m bench.sink --port N`` runs aiosmtpd on loopback, offering PIPELINING and answering
250 to every message at once; its ``XCOUNT`` command answers how many messages it has taken,
which is how a benchmark knows that another process (Posthaste's workers, Postfix) has
delivered everything. ``running`` starts one as a process of its own, ``count`` asks it,
``until_counted`` waits for a total.

``submit`` is the load of a client: ``count`` messages over ``connections`` SMTP connections,
each with STARTTLS and AUTH when asked, a new recipient for every message.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import aiosmtplib

STALL_SECONDS = 60.0  # no new message at the sink for this long: something is stuck, say so


class CountingSink:
    def __init__(self) -> None:
        self.received = 0

    async def handle_EHLO(
        self, server: Any, session: Any, envelope: Any, hostname: str, responses: list[str]
    ) -> list[str]:
        """aiosmtpd's EHLO and PIPELINING (RFC 2920), as every MTA offers it (Postfix, Exim,
        the big receivers): aiosmtpd reads pipelined commands in order already."""
        session.host_name = hostname
        return [*responses[:-1], "250-PIPELINING", responses[-1]]

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.received += 1
        return f"250 2.0.0 Ok: queued as B{self.received}"


async def run_sink(port: int) -> None:
    from aiosmtpd.smtp import SMTP

    sink = CountingSink()

    class Sink(SMTP):  # type: ignore[misc]
        async def smtp_XCOUNT(self, arg: str) -> None:
            """How many messages the sink has taken: how a benchmark knows delivery is done."""
            await self.push(f"250 {sink.received}")

    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Sink(sink, hostname="sink.bench"), "127.0.0.1", port)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    server.close()


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the sink exited early")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the sink does not listen on {port}")


@contextlib.contextmanager
def running(port: int) -> Iterator[int]:
    """A sink process listening on 127.0.0.1:``port`` (on uvloop); its pid."""
    from bench.server import pythonpath

    env = {**os.environ, "PYTHONPATH": pythonpath()}
    process = subprocess.Popen([sys.executable, "-m", "bench.sink", "--port", str(port)], env=env)
    try:
        _wait_for_port(port, process)
        yield process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def count(port: int) -> int:
    """How many messages the sink on ``port`` has taken so far."""
    client = aiosmtplib.SMTP(hostname="127.0.0.1", port=port, start_tls=False)
    await client.connect()
    reply = await client.execute_command(b"XCOUNT")
    await client.quit()
    return int(reply.message)


async def until_counted(port: int, total: int, explain: Callable[[], str] = lambda: "") -> float:
    """Poll the sink until it has taken ``total`` messages; the ``time.perf_counter()`` of the
    poll that saw them. Raises (with ``explain()``) when nothing arrives for STALL_SECONDS."""
    progress = (-1, time.monotonic())
    while True:
        arrived = await count(port)
        if arrived >= total:
            return time.perf_counter()
        if arrived > progress[0]:
            progress = (arrived, time.monotonic())
        elif time.monotonic() - progress[1] > STALL_SECONDS:  # deferred or bounced: say so
            raise RuntimeError(f"the sink stopped at {arrived} of {total}\n{explain()}")
        await asyncio.sleep(0.1)


Message = Callable[[str], bytes]  # the message to submit, for a recipient


async def submit(
    port: int,
    count: int,
    connections: int,
    message: Message,
    tls: ssl.SSLContext | None = None,
    login: tuple[str, str] | None = None,
    domain: str = "example.test",
) -> tuple[int, Counter[str]]:
    """``count`` messages over ``connections`` connections (STARTTLS with ``tls``, then AUTH
    with ``login``), back to back on each, a new recipient at ``domain`` each; (messages
    accepted, refusals by reply code)."""
    errors: Counter[str] = Counter()
    accepted = 0

    async def connection(number: int, share: int) -> None:
        nonlocal accepted
        client = aiosmtplib.SMTP(hostname="127.0.0.1", port=port, tls_context=tls, timeout=60)
        await client.connect(start_tls=tls is not None)
        if login is not None:
            await client.login(*login)
        for index in range(share):
            rcpt = f"customer-{number}-{index}@{domain}"
            try:
                await client.sendmail("bounces@acme.test", [rcpt], message(rcpt))
            except aiosmtplib.SMTPResponseException as exc:
                errors[str(exc.code)] += 1
            else:
                accepted += 1
        await client.quit()

    shares = [
        count // connections + (1 if n < count % connections else 0) for n in range(connections)
    ]
    await asyncio.gather(*(connection(n, share) for n, share in enumerate(shares)))
    return accepted, errors


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sink", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    import uvloop

    uvloop.run(run_sink(args.port))


if __name__ == "__main__":
    main()

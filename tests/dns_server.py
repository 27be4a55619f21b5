"""A real DNS server on loopback for tests (dnslib), with a zone the test edits as it goes.

``ZoneServer`` answers UDP and TCP on one free port of 127.0.0.1. Records are kept by
(name, type); a name with no records at all answers NXDOMAIN, a name with records of other types
answers NOERROR with no answer. ``silent = True`` makes it drop every query (timeouts),
``servfail = True`` answers SERVFAIL, ``ttl`` is every answer's (60 s), and ``rotate = True``
turns each record set one step per answer (round robin, as BIND's default ``rrset-order
cyclic`` does). Long TXT values are split
into 255-byte strings, as DNS requires and as a provider's DNS console does.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from dnslib import AAAA, CNAME, MX, QTYPE, RCODE, RR, TXT, A, DNSRecord
from dnslib.server import BaseResolver, DNSHandler, DNSServer

RecordValue = str | list[str] | tuple[int, str]


def _name(name: str) -> str:
    return name.rstrip(".").lower()


def _rdata(rtype: str, value: RecordValue) -> Any:
    if rtype == "TXT":
        strings = value if isinstance(value, list) else None
        if strings is None:
            assert isinstance(value, str)
            data = value.encode()
            strings = [data[i : i + 255].decode() for i in range(0, len(data), 255)] or [""]
        return TXT(strings)
    if rtype == "MX":
        assert isinstance(value, tuple)
        preference, host = value
        return MX(host or ".", preference)
    if rtype == "A":
        return A(str(value))
    if rtype == "AAAA":
        return AAAA(str(value))
    if rtype == "CNAME":
        return CNAME(str(value))
    raise ValueError(f"unsupported record type {rtype}")


class _ZoneResolver(BaseResolver):  # type: ignore[misc]
    def __init__(self, server: ZoneServer) -> None:
        self.server = server

    def resolve(self, request: DNSRecord, handler: DNSHandler) -> DNSRecord | None:
        zone = self.server
        reply = request.reply()
        if zone.silent:
            return None
        if zone.servfail:
            reply.header.rcode = RCODE.SERVFAIL
            return reply
        qname = _name(str(request.q.qname))
        qtype = QTYPE[request.q.qtype]
        zone.queries.append((qname, qtype))
        with zone.lock:
            by_type = zone.records.get(qname)
            if not by_type or not any(by_type.values()):
                reply.header.rcode = RCODE.NXDOMAIN
                return reply
            for value in zone.ordered(qname, qtype, list(by_type.get(qtype, []))):
                reply.add_answer(
                    RR(qname, QTYPE.reverse[qtype], rdata=_rdata(qtype, value), ttl=zone.ttl)
                )
        return reply


class ZoneServer:
    """A loopback authoritative-ish server for any name the test gives it."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, list[RecordValue]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self.lock = threading.Lock()
        self.queries: list[tuple[str, str]] = []
        self.silent = False
        self.servfail = False
        self.rotate = False
        self.ttl = 60  # of every answer
        self._turns: dict[tuple[str, str], int] = defaultdict(int)
        self._udp, self._tcp = _bind_pair(_ZoneResolver(self))
        self.port: int = self._udp.server.server_address[1]

    @property
    def nameservers(self) -> tuple[tuple[str, int], ...]:
        """The value for ``Settings(dns_nameservers=...)``."""
        return (("127.0.0.1", self.port),)

    def ordered(self, name: str, rtype: str, values: list[RecordValue]) -> list[RecordValue]:
        """``values`` in the order of this answer (called with the lock held)."""
        if not self.rotate or not values:
            return values
        turn = self._turns[(name, rtype)] % len(values)
        self._turns[(name, rtype)] += 1
        return values[turn:] + values[:turn]

    def add(self, name: str, rtype: str, value: RecordValue) -> None:
        with self.lock:
            self.records[_name(name)][rtype.upper()].append(value)

    def set(self, name: str, rtype: str, *values: RecordValue) -> None:
        with self.lock:
            self.records[_name(name)][rtype.upper()] = list(values)

    def remove(self, name: str, rtype: str | None = None) -> None:
        with self.lock:
            if rtype is None:
                self.records.pop(_name(name), None)
            else:
                self.records[_name(name)].pop(rtype.upper(), None)

    def start(self) -> None:
        self._udp.start_thread()
        self._tcp.start_thread()

    def stop(self) -> None:
        for server in (self._udp, self._tcp):
            server.server.shutdown()
            server.server.server_close()


def _bind_pair(resolver: _ZoneResolver) -> tuple[DNSServer, DNSServer]:
    """UDP on a free port, then TCP on the same number (retried if TCP's is taken)."""
    for _ in range(20):
        udp = DNSServer(resolver, address="127.0.0.1", port=0, logger=_Quiet())
        port = udp.server.server_address[1]
        try:
            tcp = DNSServer(resolver, address="127.0.0.1", port=port, tcp=True, logger=_Quiet())
        except OSError:
            udp.server.server_close()
            continue
        return udp, tcp
    raise RuntimeError("no free port for both UDP and TCP")


class _Quiet:
    """dnslib's logger interface, silenced."""

    def __getattr__(self, _name: str) -> Any:
        return lambda *args, **kwargs: None


def running_zone() -> Iterator[ZoneServer]:
    """For a fixture: ``yield from running_zone()``."""
    zone = ZoneServer()
    zone.start()
    try:
        yield zone
    finally:
        zone.stop()

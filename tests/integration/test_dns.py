"""The DNS adapter against a real DNS server on loopback."""

from __future__ import annotations

import asyncio

import pytest

from posthaste.adapters import dns as dns_adapter
from posthaste.adapters.dns import DnsTemporaryFailure, MxHost, Resolver
from tests.dns_server import ZoneServer


async def test_txt_records_are_joined_from_their_strings(zone: ZoneServer) -> None:
    long_value = "v=DKIM1; k=rsa; p=" + "A" * 600
    zone.add("sel._domainkey.example.com", "TXT", long_value)
    zone.add("sel._domainkey.example.com", "TXT", ["v=spf1 ", "-all"])
    found = await Resolver(zone.nameservers).txt("sel._domainkey.example.com")
    assert sorted(found) == sorted([long_value, "v=spf1 -all"])


async def test_missing_names_and_types_are_empty_answers(zone: ZoneServer) -> None:
    zone.add("example.com", "A", "192.0.2.1")
    resolver = Resolver(zone.nameservers)
    assert await resolver.txt("example.com") == []
    assert await resolver.txt("nothing.example.com") == []
    assert await resolver.mx("example.com") == []
    assert await resolver.mx("nothing.example.com") is None
    assert await resolver.exists("example.com") is True
    assert await resolver.exists("nothing.example.com") is False


async def test_mx_in_preference_order_and_null_mx(zone: ZoneServer) -> None:
    zone.add("example.com", "MX", (20, "mx2.example.com"))
    zone.add("example.com", "MX", (10, "MX1.example.com."))
    zone.add("nomail.example", "MX", (0, ""))
    resolver = Resolver(zone.nameservers)
    assert await resolver.mx("example.com") == [
        MxHost(10, "mx1.example.com"),
        MxHost(20, "mx2.example.com"),
    ]
    assert await resolver.mx("nomail.example") == [MxHost(0, "")]


async def test_addresses_a_then_aaaa(zone: ZoneServer) -> None:
    zone.add("host.example.com", "AAAA", "2001:db8::1")
    zone.add("host.example.com", "A", "192.0.2.7")
    assert await Resolver(zone.nameservers).addresses("host.example.com") == [
        "192.0.2.7",
        "2001:db8::1",
    ]


async def test_a_server_that_never_answers_is_a_temporary_failure(zone: ZoneServer) -> None:
    zone.silent = True
    with pytest.raises(DnsTemporaryFailure):
        await Resolver(zone.nameservers, timeout=0.5).txt("example.com")


async def test_servfail_is_a_temporary_failure(zone: ZoneServer) -> None:
    zone.servfail = True
    with pytest.raises(DnsTemporaryFailure):
        await Resolver(zone.nameservers, timeout=1).mx("example.com")


async def test_truncated_udp_answers_fall_back_to_tcp(zone: ZoneServer) -> None:
    values = [f"record-{i}-" + "x" * 200 for i in range(12)]  # ~2.5 KB: over UDP's 512 bytes
    for value in values:
        zone.add("big.example.com", "TXT", value)
    found = await Resolver(zone.nameservers).txt("big.example.com")
    assert sorted(found) == sorted(values)


# --- the cached resolver (received mail's DKIM keys and DMARC records, MX routing) ----------


async def _until_seen(resolver: Resolver, name: str, value: str, deadline: float = 30) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while await resolver.txt(name) != [value]:
        assert loop.time() < end, f"{value} not seen at {name} in {deadline} s"
        await asyncio.sleep(0.05)


async def test_a_cached_answer_is_kept_for_its_ttl_and_a_change_seen_after(
    zone: ZoneServer,
) -> None:
    name = "s1._domainkey.example.org"
    zone.ttl = 1
    zone.set(name, "TXT", "v=DKIM1; p=OLD")
    resolver = Resolver(zone.nameservers, cached=True)
    assert await resolver.txt(name) == ["v=DKIM1; p=OLD"]
    zone.set(name, "TXT", "v=DKIM1; p=NEW")
    assert await resolver.txt(name) == ["v=DKIM1; p=OLD"]  # within the TTL: kept
    assert zone.queries.count((name, "TXT")) == 1
    await _until_seen(resolver, name, "v=DKIM1; p=NEW")  # after it: asked again
    assert zone.queries.count((name, "TXT")) >= 2


async def test_a_long_ttl_keeps_the_answer_and_an_uncached_resolver_asks_each_time(
    zone: ZoneServer,
) -> None:
    name = "_dmarc.example.org"
    zone.set(name, "TXT", "v=DMARC1; p=reject")
    cached, fresh = Resolver(zone.nameservers, cached=True), Resolver(zone.nameservers)
    for _ in range(3):
        assert await cached.txt(name) == ["v=DMARC1; p=reject"]
        assert await fresh.txt(name) == ["v=DMARC1; p=reject"]
    assert zone.queries.count((name, "TXT")) == 4  # the cached one's first, the others' three


async def test_a_failure_is_not_cached(zone: ZoneServer) -> None:
    name = "s1._domainkey.example.org"
    zone.set(name, "TXT", "v=DKIM1; p=KEY")
    resolver = Resolver(zone.nameservers, timeout=1.0, cached=True)
    zone.servfail = True
    with pytest.raises(DnsTemporaryFailure):
        await resolver.txt(name)
    zone.servfail = False
    assert await resolver.txt(name) == ["v=DKIM1; p=KEY"]  # the next lookup asks again


async def test_the_cache_is_bounded(zone: ZoneServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dns_adapter, "CACHE_SIZE", 2)
    resolver = Resolver(zone.nameservers, cached=True)
    for label in ("a", "b", "c"):
        zone.set(f"{label}.example.org", "TXT", label)
        assert await resolver.txt(f"{label}.example.org") == [label]
    assert await resolver.txt("a.example.org") == ["a"]  # the least recently used was dropped
    assert zone.queries.count(("a.example.org", "TXT")) == 2
    assert await resolver.txt("c.example.org") == ["c"]
    assert zone.queries.count(("c.example.org", "TXT")) == 1

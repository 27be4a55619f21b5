"""The DNS adapter against a real DNS server on loopback."""

from __future__ import annotations

import pytest

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

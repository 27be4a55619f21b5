"""The order MX hosts are tried in: preference first, equal preferences shuffled."""

from __future__ import annotations

import random

from posthaste.adapters.dns import MxHost
from posthaste.adapters.smtp_transports import by_preference

RECORDS = [MxHost(20, "c.example"), MxHost(10, "a.example"), MxHost(10, "b.example")]


def test_preference_order_is_kept_and_equal_hosts_come_in_every_order() -> None:
    rng = random.Random(1)
    seen = {tuple(by_preference(RECORDS, rng)) for _ in range(50)}
    assert seen == {
        ("a.example", "b.example", "c.example"),
        ("b.example", "a.example", "c.example"),
    }


def test_the_same_seed_gives_the_same_order() -> None:
    orders = [[by_preference(RECORDS, random.Random(seed)) for seed in range(10)] for _ in range(2)]
    assert orders[0] == orders[1]


def test_no_records_no_hosts() -> None:
    assert by_preference([], random.Random(0)) == []

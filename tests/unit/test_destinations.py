"""Destinations as pure arithmetic: rates, "slow down" replies, back-off, AIMD, policies."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from posthaste.adapters.dns import registered_domain
from posthaste.config import Settings
from posthaste.core import destinations as rules
from posthaste.core.destinations import Policies, Policy
from posthaste.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "per_second"),
    [("20/s", 20.0), ("600/min", 10.0), ("36000/hour", 10.0), (" 2.5 / sec ", 2.5), ("90/m", 1.5)],
)
def test_rates_are_read_per_second(text: str, per_second: float) -> None:
    assert rules.parse_rate(text) == per_second


@pytest.mark.parametrize("text", ["fast", "20", "0/s", "-1/s", "20/day", "/s", ""])
def test_a_rate_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="rate"):
        rules.parse_rate(text)


def test_rates_are_shown_per_second_or_per_minute() -> None:
    assert rules.format_rate(20.0) == "20/s"
    assert rules.format_rate(2.5) == "2.5/s"
    assert rules.format_rate(0.5) == "30/min"


@pytest.mark.parametrize(
    ("code", "text", "slow"),
    [
        (421, "4.7.28 Our system has detected an unusual rate of unsolicited mail", True),
        (421, "4.7.0 [TSS04] Messages temporarily deferred", True),  # Yahoo
        (421, "Service not available, closing transmission channel", True),
        (451, "4.7.500 Server busy. Please try again later", True),  # Microsoft
        (451, "4.7.650 The mail server has been temporarily rate limited", True),
        (452, "4.7.1 Too many messages", True),
        (550, "5.7.28 unsolicited mail", False),
        (451, "4.4.1 Connection failed: refused", False),  # counted in bursts instead
        (451, "4.3.0 Temporary local problem", False),
        (452, "4.2.2 Mailbox full", False),
        (450, "4.2.1 The user you are trying to contact is receiving mail too quickly", False),
        (421, "4.7.10 TLS is required but the server did not offer it", False),  # ours
        (250, "2.0.0 OK", False),
    ],
)
def test_slow_down_replies(code: int, text: str, slow: bool) -> None:
    assert rules.is_slow_down(code, text) is slow


def test_back_off_starts_in_seconds_grows_and_stays_within_a_minute() -> None:
    rng = random.Random(7)
    first = [rules.backoff_ms(1, rng) for _ in range(200)]
    assert min(first) >= 1_500 and max(first) <= 2_000
    assert all(
        rules.backoff_ms(n, random.Random(1)) < rules.backoff_ms(n + 1, random.Random(1))
        for n in range(1, 5)
    )
    assert max(rules.backoff_ms(n, rng) for n in range(1, 60) for _ in range(20)) <= 40_000
    assert len(set(first)) > 100  # jittered: the fleet does not come back in step


def test_aimd_halves_and_raises_stepwise_up_to_the_policy() -> None:
    policy = Policy(rate=20.0)  # 50 ms apart
    assert rules.halved(policy.interval_us) == 100_000
    assert rules.halved(rules.SLOWEST_INTERVAL_US) == rules.SLOWEST_INTERVAL_US
    interval, steps = rules.halved(rules.halved(policy.interval_us)), 0  # 5/s
    while interval > policy.interval_us:
        interval = rules.raised(interval, policy)
        steps += 1
    assert interval == policy.interval_us and steps == 8  # 5/s + 2/s a step: 20/s in 8 steps


def test_the_climb_slows_near_the_rate_that_was_too_fast() -> None:
    policy = Policy(rate=200.0)
    ceiling = 20_000  # 50/s drew the last "slow down"
    rates = [25.0]
    for _ in range(16):
        rates.append(rules.US / rules.raised(int(rules.US / rates[-1]), policy, ceiling))
    # +20/s a step up to 45/s (90 % of 50/s), then approaching 50/s slowly: +0.5/s a step;
    # past it (a ceiling learnt too low), each step as large as the way come beyond it.
    assert round(rates[1]) == 45
    steps = [b - a for a, b in itertools.pairwise(rates[1:12])]
    assert all(0.45 < step < 0.55 for step in steps), steps
    assert 49.9 < rates[11] < 50.1
    beyond = [b - a for a, b in itertools.pairwise(rates[12:])]
    assert all(1.8 < b / a < 2.2 for a, b in itertools.pairwise(beyond)), beyond
    assert rates[-1] > 55.0


def test_held_mail_follows_the_pace_the_destination_climbs_back_to() -> None:
    policy = Policy(rate=400.0)  # 2,500 µs
    assert rules.cruising_interval(20_000, policy) == 20_000  # 50/s, no ceiling: 50/s
    # Halved to 50/s under a ceiling of 100/s: back at 90/s within seconds.
    assert rules.cruising_interval(20_000, policy, 10_000) == 11_111
    assert rules.cruising_interval(10_000, policy, 10_000) == 10_000  # above 90 %: as it is
    assert rules.cruising_interval(20_000, Policy(rate=40.0), 10_000) == 25_000  # the policy


def test_a_slow_down_near_the_remembered_ceiling_lowers_it_halfway() -> None:
    assert rules.remembered_ceiling(0, 10_000) == 10_000  # none yet: 100/s
    assert rules.remembered_ceiling(10_000, 8_000) == 8_000  # faster (125/s): learnt
    # At 95/s, within the margin below 100/s: halfway, 97.5/s, not 95/s (no ratchet).
    assert rules.remembered_ceiling(10_000, 10_526) == int(rules.US / 97.5)
    # At 60/s, far below: the receiver takes less now, learnt at once.
    assert rules.remembered_ceiling(10_000, 16_667) == 16_667


def test_probing_beyond_the_margin_waits_longer_between_steps() -> None:
    ceiling = 10_000  # 100/s drew the last "slow down"
    assert rules.step_every_ms(20_000, ceiling) == rules.INCREASE_EVERY_MS  # 50/s: climbing
    assert rules.step_every_ms(11_112, ceiling) == rules.PROBE_EVERY_MS  # 90/s: probing
    assert rules.step_every_ms(20_000) == rules.INCREASE_EVERY_MS  # no ceiling yet


def test_the_rate_taken_bounds_the_rate_halved_and_the_steps_up() -> None:
    assert rules.too_fast(2_500, 10_000) == 10_000  # 400/s set, 100/s taken: 100/s
    assert rules.too_fast(10_000, 5_000) == 10_000  # a burst above the rate set: the rate set
    assert rules.too_fast(10_000, 0) == 10_000  # unknown
    # Remembered as too fast: the pace taken, at least half the rate set.
    assert rules.limit_shown(10_000, 12_000) == 12_000  # 83/s taken of 100/s set
    assert rules.limit_shown(10_000, 65_000) == 20_000  # 15/s taken of 100/s: 50/s
    assert rules.limit_shown(10_000, 0) == 10_000
    assert rules.in_use(10_000, 12_000)  # 83 % of the rate
    assert not rules.in_use(10_000, 13_000)  # 77 %
    assert not rules.in_use(10_000, 0)


def test_strikes_grow_in_a_row_and_start_over_after_a_calm_spell() -> None:
    assert rules.strikes_after(3, suspended_until=10_000, now_ms=15_000) == 4
    assert rules.strikes_after(3, suspended_until=10_000, now_ms=10_000 + rules.CALM_MS + 1) == 1


def test_blocks_follow_demand_and_cover_a_quarter_second_at_most() -> None:
    assert rules.block_size(50_000, 0) == 1
    assert rules.block_size(50_000, 100) == 5  # 20/s: a quarter second is 5 slots
    assert rules.block_size(1_000, 3) == 3
    assert rules.block_size(100, 10_000) == 64


def test_policies_layer_configured_tables_over_the_shipped_ones() -> None:
    configured = Policies(
        {"default": {"rate": 50.0}, "google.com": {"max_connections": 2}, "example.com": {}}
    )
    google = configured.for_destination("google.com")
    assert google == Policy(max_connections=2, messages_per_connection=50, rate=50.0)
    assert configured.for_destination("unknown.example").rate == 50.0
    shipped = rules.NO_OVERRIDES
    assert shipped.for_destination("unknown.example").rate >= 10.0
    assert shipped.for_destination("outlook.com") == rules.SHIPPED_POLICIES["outlook.com"]


def test_state_reads_suspension_then_rate() -> None:
    policy = Policy(rate=20.0)
    assert rules.state_of(50_000, 0, policy, 1_000) == "active"
    assert rules.state_of(100_000, 0, policy, 1_000) == "throttled"
    assert rules.state_of(50_000, 2_000, policy, 1_000) == "suspended"


@pytest.mark.parametrize(
    ("host", "destination"),
    [
        ("gmail-smtp-in.l.google.com", "google.com"),
        ("ALT1.ASPMX.L.GOOGLE.COM.", "google.com"),
        ("example-com.mail.protection.outlook.com", "outlook.com"),
        ("mta7.am0.yahoodns.net", "yahoodns.net"),
        ("mx01.mail.icloud.com", "icloud.com"),
        ("mx.example.co.uk", "example.co.uk"),
        ("mx.other.test", "other.test"),  # not listed: the default rule
        ("localhost", "localhost"),
    ],
)
def test_destinations_are_registered_domains_of_mx_hosts(host: str, destination: str) -> None:
    assert registered_domain(host) == destination


def _load(tmp_path: Path, toml: str) -> Settings:
    path = tmp_path / "posthaste.toml"
    path.write_text(toml, encoding="utf-8")
    return Settings.load({"POSTHASTE_DATA_DIR": str(tmp_path), "POSTHASTE_CONFIG": str(path)})


def test_destination_tables_are_read_from_the_config_file(tmp_path: Path) -> None:
    settings = _load(
        tmp_path,
        'delivery = "mx"\n[destinations.default]\nrate = "600/min"\n'
        '[destinations."Google.com"]\nmax_connections = 4\nmessages_per_connection = 30\n',
    )
    google = settings.destinations.for_destination("google.com")
    assert google == Policy(max_connections=4, messages_per_connection=30, rate=10.0)
    assert settings.destinations.for_destination("example.com").rate == 10.0


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[destinations.default]\nrate = 5\n", "destinations.default.rate in"),
        ("[destinations.default]\nburst = 5\n", "destinations.default in"),
        ("[destinations.x]\nmax_connections = 0\n", "destinations.x.max_connections in"),
        ("destinations = 3\n", "destinations in"),
        ("[destinations]\nx = 3\n", "destinations.x in"),
    ],
)
def test_a_bad_destination_table_is_a_one_line_config_error(
    tmp_path: Path, toml: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        _load(tmp_path, toml)
    assert "\n" not in str(caught.value)


def test_a_slow_down_at_the_known_limit_settles_under_it_instead_of_halving() -> None:
    ceiling = 20_000  # 50/s drew the last "slow down"
    # 46/s set (within 90 % of 50/s), the first or second in a row: the limit known, touched.
    assert rules.near_ceiling(21_739, ceiling)
    assert rules.settles(21_739, ceiling, strikes=1)
    assert rules.settles(21_739, ceiling, strikes=rules.SETTLE_STRIKES)
    assert rules.settled(21_739) == int(21_739 / rules.SETTLE_MARGIN)  # 41.4/s, not 23/s
    # So is a rate just settled 90 % under a pace that drew one (41.4/s): the limit known.
    assert rules.settles(24_154, ceiling, strikes=2)
    # Halved as before: no limit known yet, a rate set far under it (35/s: climbing back
    # after a halving), or "slow down"s that keep coming.
    assert not rules.settles(21_739, 0, strikes=1)
    assert not rules.settles(28_571, ceiling, strikes=1)
    assert not rules.settles(21_739, ceiling, strikes=rules.SETTLE_STRIKES + 1)
    assert rules.settled(rules.SLOWEST_INTERVAL_US) == rules.SLOWEST_INTERVAL_US


def test_a_settling_rest_is_the_receivers_sliding_second_jittered() -> None:
    rng = random.Random(7)
    rests = [rules.settle_ms(rng) for _ in range(50)]
    assert all(rules.SETTLE_MS * 0.75 <= rest <= rules.SETTLE_MS for rest in rests)
    assert max(rests) < rules.backoff_ms(1, random.Random(7))  # shorter than a halving's
    assert len(set(rests)) > 1

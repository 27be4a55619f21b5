"""IP pools as pure rules: which pool, which address in turn, the warm-up's cap for a day; and
their ``[pools.<name>]`` tables in the config file."""

from __future__ import annotations

from pathlib import Path

import pytest

from posthaste.adapters.smtp_transports import _reachable_from
from posthaste.config import Settings
from posthaste.core import pools as rules
from posthaste.core.pools import Pool, PoolChange, Pools
from posthaste.errors import ConfigError, ValidationError


def test_a_streams_pool_wins_over_its_domains_over_default() -> None:
    assert rules.pool_for("news", "bulk") == "news"
    assert rules.pool_for(None, "bulk") == "bulk"
    assert rules.pool_for(None, None) == "default"


def test_the_warmup_caps_each_day_then_no_more() -> None:
    pool = Pool("warm", ("192.0.2.1",), per_day=(50, 100, 200))
    assert [pool.cap(day) for day in range(4)] == [50, 100, 200, None]
    assert Pool("plain", ("192.0.2.2",)).cap(0) is None


def test_days_are_utc_days() -> None:
    assert rules.day_of(0) == 0
    assert rules.day_of(rules.DAY_MS - 1) == 0
    assert rules.day_of(rules.DAY_MS) == 1
    assert rules.start_of_day(rules.day_of(1_795_000_000_000) + 1) % rules.DAY_MS == 0


def test_addresses_take_turns_and_those_used_up_are_skipped() -> None:
    addresses = ["a", "b", "c"]
    assert rules.in_turn(addresses, 0, set()) == ["a", "b", "c"]
    assert rules.in_turn(addresses, 1, set()) == ["b", "c", "a"]
    assert rules.in_turn(addresses, 2, {"a"}) == ["c", "b"]
    assert rules.in_turn(addresses, 0, {"a", "b", "c"}) == []
    assert rules.in_turn([], 3, set()) == []


def test_default_is_always_a_pool_and_may_be_configured() -> None:
    pools = Pools({"warm": Pool("warm", ("192.0.2.1",))})
    assert pools.get("default") == Pool("default")
    assert pools.get("missing") is None
    assert pools.names == ["default", "warm"]
    assert pools.any and not rules.NO_POOLS.any
    configured = Pools({"default": Pool("default", ("192.0.2.9",), helo="mta.example.com")})
    assert configured.get("default") == Pool("default", ("192.0.2.9",), helo="mta.example.com")


def test_a_source_address_reaches_servers_of_its_own_family() -> None:
    assert _reachable_from(None, "192.0.2.1") and _reachable_from(None, "2001:db8::1")
    assert _reachable_from("192.0.2.9", "192.0.2.1")
    assert not _reachable_from("192.0.2.9", "2001:db8::1")
    assert not _reachable_from("2001:db8::9", "192.0.2.1")


def test_a_pool_field_is_a_name_or_null() -> None:
    assert rules.parse_pool_field({}) is None
    assert rules.parse_pool_field({"pool": None}) == PoolChange(None)
    assert rules.parse_pool_field({"pool": "warm-1"}) == PoolChange("warm-1")
    for bad in (3, "Warm", "", "a b"):
        with pytest.raises(ValidationError, match="'pool'"):
            rules.parse_pool_field({"pool": bad})


def test_a_pool_that_is_not_configured_is_refused_naming_those_that_are() -> None:
    pools = Pools({"warm": Pool("warm", ("192.0.2.1",))})
    rules.check_pool(None, pools)
    rules.check_pool(PoolChange(None), pools)
    rules.check_pool(PoolChange("default"), pools)
    rules.check_pool(PoolChange("warm"), pools)
    with pytest.raises(ValidationError) as refused:
        rules.check_pool(PoolChange("cold"), pools)
    assert refused.value.message == (
        "'pool' must be one of: default, warm (see GET /pools); there is no pool 'cold'."
    )


# --- the config file ------------------------------------------------------------------------


def _load(tmp_path: Path, toml: str) -> Settings:
    path = tmp_path / "posthaste.toml"
    path.write_text(toml, encoding="utf-8")
    return Settings.load({"POSTHASTE_DATA_DIR": str(tmp_path), "POSTHASTE_CONFIG": str(path)})


def test_pool_tables_are_read_from_the_config_file(tmp_path: Path) -> None:
    settings = _load(
        tmp_path,
        'delivery = "mx"\n'
        '[pools.warm]\naddresses = ["192.0.2.10", "2001:DB8::1", "192.0.2.10"]\n'
        'helo = "MTA1.Example.com."\n'
        "[pools.warm.warmup]\nper_day = [50, 100, 200]\n"
        '[pools.default]\naddresses = ["192.0.2.20"]\n',
    )
    assert settings.pools.get("warm") == Pool(
        "warm", ("192.0.2.10", "2001:db8::1"), "mta1.example.com", (50, 100, 200)
    )
    assert settings.pools.get("default") == Pool("default", ("192.0.2.20",))
    assert Settings().pools == rules.NO_POOLS


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[pools.x]\naddresses = ["192.0.2.300"]\n', "pools.x.addresses in .*192.0.2.300"),
        ("[pools.x]\naddresses = []\n", "pools.x.addresses in"),
        ('[pools.x]\nhelo = "mta.example.com"\n', "pools.x.addresses in"),
        ('[pools.x]\naddresses = ["192.0.2.1"]\nbind = 1\n', "pools.x in .*unknown keys: bind"),
        ('[pools.x]\naddresses = ["192.0.2.1"]\nhelo = "not a name"\n', "pools.x.helo in"),
        ('[pools.X]\naddresses = ["192.0.2.1"]\n', "pools.X in .*pool's name"),
        (
            '[pools.x]\naddresses = ["192.0.2.1"]\n[pools.x.warmup]\nper_day = [50, 0]\n',
            "pools.x.warmup.per_day in .*daily cap",
        ),
        (
            '[pools.x]\naddresses = ["192.0.2.1"]\n[pools.x.warmup]\nschedule = [1]\n',
            "pools.x.warmup in .*unknown keys: schedule",
        ),
        (
            '[pools.x]\naddresses = ["192.0.2.1"]\n[pools.y]\naddresses = ["192.0.2.1"]\n',
            "192.0.2.1 is in two pools: x and y",
        ),
        ("pools = 3\n", "pools in"),
    ],
)
def test_a_bad_pool_table_is_a_one_line_config_error(
    tmp_path: Path, toml: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        _load(tmp_path, toml)
    assert "\n" not in str(caught.value)

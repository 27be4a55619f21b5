"""Settings: defaults, every variable, one-line errors, TOML with env overrides, the secret key."""

from __future__ import annotations

import dataclasses
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from posthaste.config import (
    SETTING_KEYS,
    DeliveryTarget,
    Settings,
    default_database_url,
    load_or_create_secret_key,
)
from posthaste.errors import ConfigError

SECRET = "s" * 32


def load(tmp_path: Path, **env: str) -> Settings:
    """Settings from ``env`` (names without the POSTHASTE_ prefix), data dir in ``tmp_path``."""
    environ = {"POSTHASTE_DATA_DIR": str(tmp_path)}
    environ.update({f"POSTHASTE_{name}": value for name, value in env.items()})
    return Settings.load(environ)


def config_error(tmp_path: Path, **env: str) -> str:
    """The message of the ConfigError that loading ``env`` raises; asserts it is one line."""
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, **env)
    message = str(caught.value)
    assert "\n" not in message
    return message


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "posthaste.toml"
    path.write_text(text, encoding="utf-8")
    return path


# --- defaults -------------------------------------------------------------------------------


def test_load_defaults(tmp_path: Path) -> None:
    settings = load(tmp_path)
    assert settings.data_dir == tmp_path
    assert settings.database_url == f"sqlite:///{tmp_path}/posthaste.db"
    assert settings.blob_store == "database"
    assert (settings.http_host, settings.http_port) == ("127.0.0.1", 8080)
    assert settings.public_url == "http://127.0.0.1:8080"
    assert (settings.smtp_relay_port, settings.smtp_relay_tls_port) == (2587, 2465)
    assert settings.smtp_inbound_port == 2525
    assert (settings.tls_cert, settings.tls_key) == (None, None)
    assert settings.delivery == DeliveryTarget(kind="capture")
    assert settings.region_delivery == {}
    assert settings.smtp_timeout == 30.0
    assert settings.region_smtp_timeout == {}
    assert settings.dns_nameservers == ()
    assert settings.regions == ("us-east-1", "eu-west-1", "sa-east-1", "ap-northeast-1")
    assert settings.default_region == "us-east-1"
    assert settings.mx_host == "mx.posthaste.localhost"
    assert settings.spf_include == "_spf.posthaste.localhost"
    assert settings.webhook_retry_schedule == (60, 300, 1800, 7200, 18000, 36000) + (86400,) * 4
    assert settings.webhook_jitter == 0.1
    assert settings.webhook_timeout == 10.0
    assert settings.webhook_allow_private is False
    assert settings.delivery_retry_schedule == (
        60, 300, 900, 1800, 3600, 7200, 14400, 28800, 57600, 86400,
    )  # fmt: skip
    assert settings.retention_days == 30
    assert settings.role == {"api", "smtp", "inbound", "worker"}
    assert settings.job_lease == 60.0
    assert settings.broadcast_chunk_size == 1000
    assert settings.automation_claim_size == 256
    assert settings.log_level == "info"


def test_direct_construction_has_the_product_defaults_and_touches_no_files() -> None:
    settings = Settings()
    assert settings.data_dir == Path("./posthaste-data")
    assert settings.database_url == "sqlite:///./posthaste-data/posthaste.db"
    assert settings.public_url == "http://127.0.0.1:8080"
    assert len(settings.secret_key) >= 32
    assert Settings().secret_key != settings.secret_key


def test_direct_construction_derives_database_and_public_url(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, http_host="::1", http_port=9000, secret_key=SECRET)
    assert settings.database_url == f"sqlite:///{tmp_path}/posthaste.db"
    assert settings.public_url == "http://[::1]:9000"


def test_settings_replace_keeps_other_fields(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, secret_key=SECRET)
    changed = dataclasses.replace(settings, http_port=0, webhook_retry_schedule=(0.1,))
    assert changed.http_port == 0
    assert changed.webhook_retry_schedule == (0.1,)
    assert changed.secret_key == SECRET
    assert changed.database_url == settings.database_url


def test_settings_are_frozen_hashable_and_hide_secrets_in_repr(tmp_path: Path) -> None:
    delivery = DeliveryTarget(kind="smtp", host="relay", port=587, username="u", password="pw123")
    settings = Settings(data_dir=tmp_path, secret_key=SECRET, delivery=delivery)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.http_port = 1  # type: ignore[misc]
    assert hash(settings) == hash(dataclasses.replace(settings))
    assert SECRET not in repr(settings)
    assert "pw123" not in repr(settings)


def test_region_mappings_cannot_be_mutated(tmp_path: Path) -> None:
    overrides = {"eu-west-1": DeliveryTarget(kind="mx")}
    settings = Settings(data_dir=tmp_path, secret_key=SECRET, region_delivery=overrides)
    overrides["us-east-1"] = DeliveryTarget(kind="mx")
    assert "us-east-1" not in settings.region_delivery
    with pytest.raises(TypeError):
        settings.region_delivery["x"] = DeliveryTarget(kind="mx")  # type: ignore[index]


def test_load_reads_os_environ_when_given_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSTHASTE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("POSTHASTE_HTTP_PORT", "9123")
    assert Settings.load().http_port == 9123


def test_empty_variable_counts_as_unset(tmp_path: Path) -> None:
    settings = load(tmp_path, HTTP_PORT="", DELIVERY=" ", TLS_CERT="")
    assert settings.http_port == 8080
    assert settings.delivery.kind == "capture"
    assert settings.tls_cert is None


def test_every_setting_key_has_a_variable() -> None:
    assert "http_port" in SETTING_KEYS
    assert "secret_key" in SETTING_KEYS
    assert "region_delivery" not in SETTING_KEYS
    assert "smtp_timeout" in SETTING_KEYS
    assert "region_smtp_timeout" not in SETTING_KEYS


# --- every variable parsed --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "attribute", "expected"),
    [
        ("BLOB_STORE", "s3://mail-bucket/raw/", "blob_store", "s3://mail-bucket/raw"),
        ("BLOB_STORE", "s3://mail-bucket", "blob_store", "s3://mail-bucket"),
        ("HTTP_HOST", "0.0.0.0", "http_host", "0.0.0.0"),
        ("HTTP_HOST", "[::]", "http_host", "::"),
        ("HTTP_PORT", "0", "http_port", 0),
        ("HTTP_PORT", " 9000 ", "http_port", 9000),
        ("PUBLIC_URL", "https://mail.example.com/", "public_url", "https://mail.example.com"),
        ("PUBLIC_URL", "http://h:81/ph/", "public_url", "http://h:81/ph"),
        ("SMTP_RELAY_PORT", "0", "smtp_relay_port", 0),
        ("SMTP_RELAY_TLS_PORT", "465", "smtp_relay_tls_port", 465),
        ("SMTP_INBOUND_PORT", "25", "smtp_inbound_port", 25),
        ("DELIVERY", "mx", "delivery", DeliveryTarget(kind="mx")),
        ("DELIVERY", " capture ", "delivery", DeliveryTarget(kind="capture")),
        ("SMTP_TIMEOUT", "500ms", "smtp_timeout", 0.5),
        ("SMTP_TIMEOUT", "5m", "smtp_timeout", 300.0),
        ("SMTP_TIMEOUT", "45", "smtp_timeout", 45.0),
        ("DNS_NAMESERVERS", "127.0.0.1:5353", "dns_nameservers", (("127.0.0.1", 5353),)),
        (
            "TRUSTED_PROXIES",
            "127.0.0.1, 10.1.2.3/8,::1",
            "trusted_proxies",
            ("127.0.0.1", "10.0.0.0/8", "::1"),
        ),
        ("MX_HOST", "MX.Example.COM.", "mx_host", "mx.example.com"),
        ("SPF_INCLUDE", "_spf.example.com", "spf_include", "_spf.example.com"),
        ("WEBHOOK_RETRY_SCHEDULE", "1s, 2s", "webhook_retry_schedule", (1.0, 2.0)),
        ("WEBHOOK_JITTER", "0", "webhook_jitter", 0.0),
        ("WEBHOOK_JITTER", "0.25", "webhook_jitter", 0.25),
        ("WEBHOOK_TIMEOUT", "500ms", "webhook_timeout", 0.5),
        ("WEBHOOK_TIMEOUT", "3", "webhook_timeout", 3.0),
        ("DELIVERY_RETRY_SCHEDULE", "100ms", "delivery_retry_schedule", (0.1,)),
        ("MAX_QUEUE_AGE", "7d", "max_queue_age", 604_800.0),
        ("RETENTION_DAYS", "1", "retention_days", 1),
        ("ROLE", "worker", "role", {"worker"}),
        ("ROLE", "API", "role", {"api"}),
        ("ROLE", "api, SMTP", "role", {"api", "smtp"}),
        ("ROLE", "all", "role", {"api", "smtp", "inbound", "worker"}),
        ("ROLE", "inbound", "role", {"inbound"}),
        ("PROCESSES", "auto", "processes", 0),
        ("PROCESSES", "1", "processes", 1),
        ("PROCESSES", " 8 ", "processes", 8),
        ("JOB_LEASE", "5m", "job_lease", 300.0),
        ("BROADCAST_CHUNK_SIZE", " 50 ", "broadcast_chunk_size", 50),
        ("AUTOMATION_CLAIM_SIZE", "64", "automation_claim_size", 64),
        ("LOG_LEVEL", "DEBUG", "log_level", "debug"),
        ("REGIONS", "eu-central-1, us-west-2", "regions", ("eu-central-1", "us-west-2")),
    ],
)
def test_variable_is_parsed(
    tmp_path: Path, name: str, value: str, attribute: str, expected: object
) -> None:
    assert getattr(load(tmp_path, **{name: value}), attribute) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("Yes", True),
        ("false", False),
        ("0", False),
        ("NO", False),
    ],
)
def test_webhook_allow_private_accepts_boolean_words(
    tmp_path: Path, value: str, expected: bool
) -> None:
    assert load(tmp_path, WEBHOOK_ALLOW_PRIVATE=value).webhook_allow_private is expected


def test_tls_ca_file_must_exist_and_mta_sts_private_is_off_by_default(tmp_path: Path) -> None:
    assert load(tmp_path).tls_ca_file is None
    assert load(tmp_path).mta_sts_allow_private is False
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    settings = load(tmp_path, TLS_CA_FILE=str(bundle), MTA_STS_ALLOW_PRIVATE="yes")
    assert settings.tls_ca_file == bundle and settings.mta_sts_allow_private is True
    message = config_error(tmp_path, TLS_CA_FILE=str(tmp_path / "missing.pem"))
    assert message.startswith("POSTHASTE_TLS_CA_FILE")


def test_public_url_default_follows_host_and_port(tmp_path: Path) -> None:
    settings = load(tmp_path, HTTP_HOST="10.0.0.5", HTTP_PORT="9000")
    assert settings.public_url == "http://10.0.0.5:9000"


def test_regions_first_is_default(tmp_path: Path) -> None:
    settings = load(tmp_path, REGIONS="eu-west-1,us-east-1")
    assert settings.default_region == "eu-west-1"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1.1.1.1", (("1.1.1.1", 53),)),
        ("1.1.1.1:5353, 8.8.8.8", (("1.1.1.1", 5353), ("8.8.8.8", 53))),
        ("[::1]:5300", (("::1", 5300),)),
        ("[::1]", (("::1", 53),)),
        ("2001:db8::1", (("2001:db8::1", 53),)),
        ("127.0.0.1,", (("127.0.0.1", 53),)),
    ],
)
def test_dns_nameservers_forms(
    tmp_path: Path, value: str, expected: tuple[tuple[str, int], ...]
) -> None:
    assert load(tmp_path, DNS_NAMESERVERS=value).dns_nameservers == expected


# --- database URLs --------------------------------------------------------------------------


def test_sqlite_url_is_kept_and_made_async(tmp_path: Path) -> None:
    settings = load(tmp_path, DATABASE_URL="sqlite:////var/lib/ph/db.sqlite")
    assert settings.database_url == "sqlite:////var/lib/ph/db.sqlite"
    assert settings.async_database_url == "sqlite+aiosqlite:////var/lib/ph/db.sqlite"


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_postgres_urls_are_normalized_and_made_async(tmp_path: Path, scheme: str) -> None:
    settings = load(tmp_path, DATABASE_URL=f"{scheme}://ph:pw@db:5432/ph", SECRET_KEY=SECRET)
    assert settings.database_url == "postgresql://ph:pw@db:5432/ph"
    assert settings.async_database_url == "postgresql+asyncpg://ph:pw@db:5432/ph"


def test_default_database_lives_in_the_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "elsewhere"
    settings = Settings.load({"POSTHASTE_DATA_DIR": str(data_dir), "POSTHASTE_SECRET_KEY": SECRET})
    assert settings.database_url == f"sqlite:///{data_dir}/posthaste.db"
    assert default_database_url(Path("data")) == "sqlite:///./data/posthaste.db"
    assert default_database_url(Path("../data")) == "sqlite:///../data/posthaste.db"


# --- invalid values: one line naming the variable -------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("DATABASE_URL", "mysql://root@db/ph", "expected sqlite:///<path> or postgresql://"),
        ("DATABASE_URL", "sqlite:///:memory:", "expected a SQLite file path"),
        ("DATABASE_URL", "sqlite:///", "expected a SQLite file path"),
        ("DATABASE_URL", "postgresql://", "expected sqlite:///<path> or postgresql://"),
        ("BLOB_STORE", "disk", "expected 'database' or s3://bucket/prefix, got 'disk'"),
        ("BLOB_STORE", "s3://", "expected 'database' or s3://bucket/prefix"),
        ("BLOB_STORE", "s3://Bad_Bucket/x", "expected 'database' or s3://bucket/prefix"),
        ("HTTP_HOST", "my host", "expected a host name or IP address"),
        ("HTTP_PORT", "abc", "expected an integer 0-65535, got 'abc'"),
        ("HTTP_PORT", "65536", "expected an integer 0-65535, got '65536'"),
        ("HTTP_PORT", "-1", "expected an integer 0-65535, got '-1'"),
        ("HTTP_PORT", "80.0", "expected an integer 0-65535"),
        ("SMTP_RELAY_PORT", "x", "expected an integer 0-65535"),
        ("SMTP_RELAY_TLS_PORT", "70000", "expected an integer 0-65535"),
        ("SMTP_INBOUND_PORT", "2.5k", "expected an integer 0-65535"),
        ("PUBLIC_URL", "mail.example.com", "expected an absolute http(s) URL"),
        ("PUBLIC_URL", "ftp://mail.example.com", "expected an absolute http(s) URL"),
        ("PUBLIC_URL", "https://", "expected an absolute http(s) URL"),
        ("PUBLIC_URL", "https://h:99999", "expected an absolute http(s) URL"),
        ("PUBLIC_URL", "https://h/?a=1", "expected an absolute http(s) URL"),
        ("TLS_CERT", "/nonexistent/cert.pem", "expected an existing file"),
        ("DELIVERY", "sendmail", "expected capture, mx or smtp://"),
        ("DELIVERY", "smtp://", "expected capture, mx or smtp://"),
        ("DELIVERY", "smtp://relay:0", "expected a port 1-65535"),
        ("DELIVERY", "smtp://relay:abc", "expected a port 1-65535"),
        ("DELIVERY", "smtp://relay/path", "expected capture, mx or smtp://"),
        ("DELIVERY", "smtp://relay?tls=maybe", "expected ?tls=starttls|implicit|none"),
        ("DELIVERY", "smtp://relay?verify=no", "expected ?tls=starttls|implicit|none"),
        ("DELIVERY", "smtp://user@relay", "expected both user and password"),
        ("SMTP_TIMEOUT", "0s", "expected a duration above zero"),
        ("SMTP_TIMEOUT", "forever", "expected a duration such as"),
        ("DNS_NAMESERVERS", "dns.google", "expected IP[:port] entries"),
        ("TRUSTED_PROXIES", "*", "expected IP addresses or networks"),
        ("TRUSTED_PROXIES", "proxy.local", "expected IP addresses or networks"),
        ("DNS_NAMESERVERS", "1.1.1.1:0", "expected IP[:port] entries"),
        ("DNS_NAMESERVERS", "1.1.1.1:x", "expected IP[:port] entries"),
        ("DNS_NAMESERVERS", "[::1", "expected IP[:port] entries"),
        ("DNS_NAMESERVERS", "[::1]53", "expected IP[:port] entries"),
        ("REGIONS", "US-EAST-1", "expected comma-separated region names"),
        ("REGIONS", "us-east-1,,eu-west-1", "expected comma-separated region names"),
        ("REGIONS", "us-east-1,us-east-1", "expected each region once, got 'us-east-1' twice"),
        ("MX_HOST", "mx..example.com", "expected a DNS name"),
        ("MX_HOST", "mx example", "expected a DNS name"),
        ("SPF_INCLUDE", "-bad.example.com", "expected a DNS name"),
        ("WEBHOOK_RETRY_SCHEDULE", "1m,5x", "expected comma-separated durations"),
        ("WEBHOOK_JITTER", "1", "expected a fraction from 0 up to (not including) 1"),
        ("WEBHOOK_JITTER", "-0.1", "expected a fraction"),
        ("WEBHOOK_JITTER", "nan", "expected a fraction"),
        ("WEBHOOK_JITTER", "lots", "expected a fraction"),
        ("WEBHOOK_TIMEOUT", "0s", "expected a duration above zero"),
        ("WEBHOOK_TIMEOUT", "soon", "expected a duration such as"),
        ("WEBHOOK_ALLOW_PRIVATE", "maybe", "expected true/false, 1/0 or yes/no, got 'maybe'"),
        ("DELIVERY_RETRY_SCHEDULE", "1m,", "expected comma-separated durations"),
        ("MAX_QUEUE_AGE", "0", "expected a duration above zero"),
        ("RETENTION_DAYS", "0", "expected a whole number of days, at least 1"),
        ("RETENTION_DAYS", "7d", "expected a whole number of days"),
        (
            "ROLE",
            "mailer",
            "expected all, or some of api, smtp, inbound, worker separated by commas, got 'mailer'",
        ),
        (
            "ROLE",
            "api,mx",
            "expected all, or some of api, smtp, inbound, worker separated by commas, got 'api,mx'",
        ),
        ("PROCESSES", "0", "expected auto or an integer 1-1024, got '0'"),
        ("PROCESSES", "many", "expected auto or an integer 1-1024, got 'many'"),
        ("JOB_LEASE", "-5s", "not negative"),
        ("BROADCAST_CHUNK_SIZE", "0", "expected an integer 1-10000, got '0'"),
        ("BROADCAST_CHUNK_SIZE", "10001", "expected an integer 1-10000"),
        ("AUTOMATION_CLAIM_SIZE", "0", "expected an integer 1-10000, got '0'"),
        ("LOG_LEVEL", "verbose", "expected one of debug, info, warning, error, critical"),
    ],
)
def test_invalid_value_names_the_variable(
    tmp_path: Path, name: str, value: str, expected: str
) -> None:
    message = config_error(tmp_path, **{name: value})
    assert message.startswith(f"POSTHASTE_{name}: ")
    assert expected in message


def test_invalid_database_url_does_not_echo_the_password(tmp_path: Path) -> None:
    message = config_error(tmp_path, DATABASE_URL="mysql://root:hunter2@db/ph")
    assert "hunter2" not in message
    assert "mysql://root:***@db/ph" in message


def test_invalid_delivery_does_not_echo_the_password(tmp_path: Path) -> None:
    message = config_error(tmp_path, DELIVERY="smtp://u:hunter2@relay:0")
    assert message.startswith("POSTHASTE_DELIVERY: ")
    assert "hunter2" not in message


# --- TLS --------------------------------------------------------------------------------------


def test_tls_cert_and_key_are_read_as_paths(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("cert")
    key.write_text("key")
    settings = load(tmp_path, TLS_CERT=str(cert), TLS_KEY=str(key))
    assert (settings.tls_cert, settings.tls_key) == (cert, key)


@pytest.mark.parametrize(
    ("given", "missing"), [("TLS_CERT", "POSTHASTE_TLS_KEY"), ("TLS_KEY", "POSTHASTE_TLS_CERT")]
)
def test_tls_cert_and_key_go_together(tmp_path: Path, given: str, missing: str) -> None:
    path = tmp_path / "one.pem"
    path.write_text("pem")
    message = config_error(tmp_path, **{given: str(path)})
    assert message == f"{missing}: required when POSTHASTE_{given} is set"


# --- smtp:// delivery -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("smtp://relay.example.com:2525", DeliveryTarget("smtp", "relay.example.com", 2525)),
        ("smtp://relay.example.com", DeliveryTarget("smtp", "relay.example.com", 587)),
        ("smtp://relay?tls=none", DeliveryTarget("smtp", "relay", 587, tls="none")),
        ("smtp://relay?tls=implicit", DeliveryTarget("smtp", "relay", 465, tls="implicit")),
        ("smtp://relay:2465?tls=implicit", DeliveryTarget("smtp", "relay", 2465, tls="implicit")),
        ("smtp://relay:25?tls=starttls", DeliveryTarget("smtp", "relay", 25, tls="starttls")),
        ("smtp://relay:25/", DeliveryTarget("smtp", "relay", 25)),
        ("SMTP://Relay.Example.com:25", DeliveryTarget("smtp", "relay.example.com", 25)),
        ("smtp://[::1]:2525", DeliveryTarget("smtp", "::1", 2525)),
        (
            "smtp://apikey:s3cr%3At%40x@smtp.example.com:587",
            DeliveryTarget("smtp", "smtp.example.com", 587, "apikey", "s3cr:t@x"),
        ),
        (
            "smtp://me%40example.com:pw@relay:465?tls=implicit",
            DeliveryTarget("smtp", "relay", 465, "me@example.com", "pw", "implicit"),
        ),
    ],
)
def test_smtp_delivery_url_forms(url: str, expected: DeliveryTarget) -> None:
    assert DeliveryTarget.parse(url) == expected


def test_smtp_delivery_from_the_environment(tmp_path: Path) -> None:
    settings = load(tmp_path, DELIVERY="smtp://u:p@127.0.0.1:2525?tls=none")
    assert settings.delivery == DeliveryTarget("smtp", "127.0.0.1", 2525, "u", "p", "none")
    assert settings.delivery_for("eu-west-1") == settings.delivery


# --- secret key -----------------------------------------------------------------------------


def test_secret_key_from_the_environment_is_used_and_no_file_is_made(tmp_path: Path) -> None:
    settings = load(tmp_path, SECRET_KEY=f"  {SECRET}  ")
    assert settings.secret_key == SECRET
    assert not (tmp_path / "secret.key").exists()


def test_short_secret_key_is_refused_without_echoing_it(tmp_path: Path) -> None:
    message = config_error(tmp_path, SECRET_KEY="tooshort")
    assert message == "POSTHASTE_SECRET_KEY: expected at least 32 characters, got 8"


def test_previous_secret_keys_follow_the_current_one_in_the_ring(tmp_path: Path) -> None:
    old, older = "o" * 40, "p" * 40
    settings = load(tmp_path, SECRET_KEY=SECRET, SECRET_KEY_PREVIOUS=f"{old}, {older},")
    assert settings.secret_keys == (SECRET, old, older)
    assert old not in repr(settings)
    message = config_error(tmp_path, SECRET_KEY=SECRET, SECRET_KEY_PREVIOUS=f"{old},short")
    assert message == "POSTHASTE_SECRET_KEY_PREVIOUS: expected at least 32 characters, got 5"


def test_secret_key_file_is_created_with_mode_0600_and_reused(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = Settings.load({"POSTHASTE_DATA_DIR": str(data_dir)})
    key_file = data_dir / "secret.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key_file.read_text().strip() == first.secret_key
    assert len(first.secret_key) >= 64
    second = Settings.load({"POSTHASTE_DATA_DIR": str(data_dir)})
    assert second.secret_key == first.secret_key
    assert [p.name for p in data_dir.iterdir()] == ["secret.key"]


def test_secret_key_file_written_by_an_operator_is_used(tmp_path: Path) -> None:
    (tmp_path / "secret.key").write_text(SECRET + "\n")
    assert load(tmp_path).secret_key == SECRET


def test_short_secret_key_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret.key").write_text("short\n")
    message = config_error(tmp_path)
    assert (
        message
        == f"{tmp_path / 'secret.key'}: expected a secret key of at least 32 characters, got 5"
    )


def test_unwritable_data_dir_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match=r"^POSTHASTE_DATA_DIR: cannot keep the secret key"):
        load_or_create_secret_key(blocker / "data")


def test_processes_starting_at_once_agree_on_one_secret_key(tmp_path: Path) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        keys = set(pool.map(lambda _: load_or_create_secret_key(tmp_path), range(32)))
    assert keys == {(tmp_path / "secret.key").read_text().strip()}
    assert [p.name for p in tmp_path.iterdir()] == ["secret.key"]


def test_postgres_without_secret_key_is_refused(tmp_path: Path) -> None:
    message = config_error(tmp_path, DATABASE_URL="postgresql://ph@db/ph")
    assert message == (
        "POSTHASTE_SECRET_KEY is required with PostgreSQL: every process of a fleet must share it"
    )
    assert not (tmp_path / "secret.key").exists()


def test_postgres_ignores_a_secret_key_file(tmp_path: Path) -> None:
    (tmp_path / "secret.key").write_text("f" * 40)
    with pytest.raises(ConfigError, match="required with PostgreSQL"):
        load(tmp_path, DATABASE_URL="postgresql://ph@db/ph")


# --- TOML file --------------------------------------------------------------------------------


def test_toml_sets_the_same_keys_with_native_types(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        f"""
        http_port = 9000
        webhook_allow_private = true
        webhook_jitter = 0.2
        webhook_timeout = 5
        webhook_retry_schedule = ["1s", "2s", "3s"]
        delivery_retry_schedule = "1m,5m"
        regions = ["eu-west-1", "us-east-1"]
        dns_nameservers = ["127.0.0.1:5353"]
        delivery = "mx"
        secret_key = "{SECRET}"
        """,
    )
    settings = load(tmp_path, CONFIG=str(path))
    assert settings.http_port == 9000
    assert settings.webhook_allow_private is True
    assert settings.webhook_jitter == 0.2
    assert settings.webhook_timeout == 5.0
    assert settings.webhook_retry_schedule == (1.0, 2.0, 3.0)
    assert settings.delivery_retry_schedule == (60.0, 300.0)
    assert settings.regions == ("eu-west-1", "us-east-1")
    assert settings.dns_nameservers == (("127.0.0.1", 5353),)
    assert settings.delivery.kind == "mx"
    assert settings.secret_key == SECRET


def test_environment_overrides_toml(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'http_port = 9000\nhttp_host = "0.0.0.0"\n')
    settings = load(tmp_path, CONFIG=str(path), HTTP_PORT="9100")
    assert settings.http_port == 9100
    assert settings.http_host == "0.0.0.0"
    assert settings.public_url == "http://0.0.0.0:9100"


def test_toml_unknown_keys_are_named(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "http_prot = 1\nsmtp_port = 2\nhttp_port = 3\n")
    message = config_error(tmp_path, CONFIG=str(path))
    assert message == f"POSTHASTE_CONFIG {path}: unknown keys: http_prot, smtp_port"


def test_toml_invalid_value_names_the_key_and_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'http_port = "abc"\n')
    message = config_error(tmp_path, CONFIG=str(path))
    assert message == f"http_port in {path}: expected an integer 0-65535, got 'abc'"


def test_toml_table_for_a_plain_key_is_refused(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "[delivery]\nkind = 'mx'\n")
    message = config_error(tmp_path, CONFIG=str(path))
    assert message.startswith(f"delivery in {path}: expected a string, number, boolean or list")


def test_toml_file_missing_or_malformed(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    assert config_error(tmp_path, CONFIG=str(missing)) == (
        f"POSTHASTE_CONFIG: file not found: {missing}"
    )
    broken = write_toml(tmp_path, "http_port = \n")
    assert config_error(tmp_path, CONFIG=str(broken)).startswith(
        f"POSTHASTE_CONFIG: {broken} is not valid TOML: "
    )


def test_toml_region_tables_override_per_region(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        """
        delivery = "mx"
        [regions.eu-west-1]
        delivery = "smtp://eu-user:eu-pass@relay.eu.example.com:2525"
        mx_host = "mx.eu.example.com"
        spf_include = "_spf.eu.example.com"
        [regions.sa-east-1]
        mx_host = "mx.sa.example.com"
        """,
    )
    settings = load(tmp_path, CONFIG=str(path))
    assert settings.regions[0] == "us-east-1"
    assert settings.delivery_for("eu-west-1") == DeliveryTarget(
        "smtp", "relay.eu.example.com", 2525, "eu-user", "eu-pass"
    )
    assert settings.delivery_for("sa-east-1") == DeliveryTarget(kind="mx")
    assert settings.delivery_for("us-east-1") == DeliveryTarget(kind="mx")
    assert settings.mx_host_for("eu-west-1") == "mx.eu.example.com"
    assert settings.mx_host_for("sa-east-1") == "mx.sa.example.com"
    assert settings.mx_host_for("us-east-1") == "mx.posthaste.localhost"
    assert settings.spf_include_for("eu-west-1") == "_spf.eu.example.com"
    assert settings.spf_include_for("sa-east-1") == "_spf.posthaste.localhost"
    assert set(settings.region_delivery) == {"eu-west-1"}


def test_toml_region_names_live_beside_region_tables(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        """
        [regions]
        names = ["eu-central-1", "us-west-2"]
        [regions.us-west-2]
        delivery = "mx"
        """,
    )
    settings = load(tmp_path, CONFIG=str(path))
    assert settings.regions == ("eu-central-1", "us-west-2")
    assert settings.delivery_for("us-west-2").kind == "mx"
    assert settings.delivery_for("eu-central-1").kind == "capture"


def test_toml_region_table_for_an_unlisted_region_is_refused(tmp_path: Path) -> None:
    path = write_toml(tmp_path, '[regions.mars-1]\ndelivery = "mx"\n')
    message = config_error(tmp_path, CONFIG=str(path))
    assert message.startswith(
        f"regions.mars-1 in {path}: region 'mars-1' is not in POSTHASTE_REGIONS"
    )


def test_toml_region_table_checked_against_regions_from_the_environment(tmp_path: Path) -> None:
    path = write_toml(tmp_path, '[regions.eu-west-1]\ndelivery = "mx"\n')
    message = config_error(tmp_path, CONFIG=str(path), REGIONS="us-east-1")
    assert "region 'eu-west-1' is not in POSTHASTE_REGIONS (us-east-1)" in message


def test_toml_region_table_unknown_key_and_bad_value(tmp_path: Path) -> None:
    unknown = write_toml(tmp_path, '[regions.eu-west-1]\nrelay = "mx"\n')
    assert config_error(tmp_path, CONFIG=str(unknown)) == (
        f"regions.eu-west-1 in {unknown}: unknown keys: relay"
    )
    bad = write_toml(tmp_path, '[regions.eu-west-1]\ndelivery = "carrier-pigeon"\n')
    assert config_error(tmp_path, CONFIG=str(bad)).startswith(
        f"regions.eu-west-1.delivery in {bad}: expected capture, mx or smtp://"
    )


def test_toml_region_tables_set_their_own_smtp_timeout(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        """
        smtp_timeout = "45s"
        [regions.eu-west-1]
        smtp_timeout = "2m"
        [regions.sa-east-1]
        smtp_timeout = 10
        """,
    )
    settings = load(tmp_path, CONFIG=str(path))
    assert settings.smtp_timeout_for("eu-west-1") == 120.0
    assert settings.smtp_timeout_for("sa-east-1") == 10.0
    assert settings.smtp_timeout_for("us-east-1") == 45.0
    # The environment sets the global value; a region's own value still wins for that region.
    settings = load(tmp_path, CONFIG=str(path), SMTP_TIMEOUT="5s")
    assert settings.smtp_timeout_for("us-east-1") == 5.0
    assert settings.smtp_timeout_for("eu-west-1") == 120.0
    bad = write_toml(tmp_path, '[regions.eu-west-1]\nsmtp_timeout = "0ms"\n')
    assert config_error(tmp_path, CONFIG=str(bad)) == (
        f"regions.eu-west-1.smtp_timeout in {bad}: expected a duration above zero, got '0ms'"
    )


def test_toml_regions_table_refuses_stray_values(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "[regions]\ndefault = 'us-east-1'\n")
    message = config_error(tmp_path, CONFIG=str(path))
    assert message.startswith(f"regions.default in {path}: expected a table")


def test_request_memory_takes_a_size_with_a_unit(tmp_path: Path) -> None:
    assert load(tmp_path).request_memory == 100 * 1024 * 1024
    assert load(tmp_path, REQUEST_MEMORY="2GiB").request_memory == 2 * 1024**3
    assert load(tmp_path, REQUEST_MEMORY="1048576").request_memory == 1024**2
    message = config_error(tmp_path, REQUEST_MEMORY="10KiB")
    assert message == "POSTHASTE_REQUEST_MEMORY: expected at least 1MiB, got '10KiB'"
    assert "expected a size" in config_error(tmp_path, REQUEST_MEMORY="lots")


def test_metrics_token_is_read_checked_and_kept_out_of_repr(tmp_path: Path) -> None:
    assert load(tmp_path).metrics_token == ""
    settings = load(tmp_path, METRICS_TOKEN="  scrape-me-0123456789  ")
    assert settings.metrics_token == "scrape-me-0123456789"
    assert "scrape-me" not in repr(settings)
    short = config_error(tmp_path, METRICS_TOKEN="short-token")
    assert short == "POSTHASTE_METRICS_TOKEN: expected at least 16 characters, got 11"
    spaced = config_error(tmp_path, METRICS_TOKEN="scrape me 0123456789")
    assert spaced == "POSTHASTE_METRICS_TOKEN: expected no white space inside the token"

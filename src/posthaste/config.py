"""Settings: the only reader of the environment, validated once at start.

Every setting comes from a ``POSTHASTE_<KEY>`` variable or from the TOML file named by
``POSTHASTE_CONFIG`` (the same keys in lowercase, without the prefix); the environment wins.
An empty value counts as unset. An invalid value stops the process with a one-line
``ConfigError`` naming where the value came from and what is expected.

TOML may also give regions their own delivery, SMTP timeout, MX host and SPF include::

    [regions.eu-west-1]
    delivery = "smtp://user:pass@relay.eu.example.com:587"
    smtp_timeout = "2m"
    mx_host = "mx.eu.example.com"

Because ``regions`` is then a table, a TOML file that also lists the region names writes
``names = ["us-east-1", "eu-west-1"]`` inside ``[regions]``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import os
import re
import secrets
import tempfile
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Literal, TypeVar
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from posthaste.core.durations import parse_duration, parse_schedule
from posthaste.errors import ConfigError

T = TypeVar("T")
Role = Literal["api", "smtp", "worker", "all"]
TlsMode = Literal["starttls", "implicit", "none"]
DeliveryKind = Literal["capture", "mx", "smtp"]

ENV_PREFIX = "POSTHASTE_"
CONFIG_FILE_VARIABLE = "POSTHASTE_CONFIG"
DEFAULT_DATA_DIR = Path("./posthaste-data")
SECRET_KEY_FILENAME = "secret.key"
SECRET_KEY_MIN_LENGTH = 32

_ROLES: dict[str, Role] = {"api": "api", "smtp": "smtp", "worker": "worker", "all": "all"}
_TLS_MODES: dict[str, TlsMode] = {"starttls": "starttls", "implicit": "implicit", "none": "none"}
_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
_DELIVERY_FORMS = "capture, mx or smtp://[user:pass@]host:port[?tls=starttls|implicit|none]"
_REGION_NAME = re.compile(r"[a-z0-9-]+")
_HOST_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOSTNAME = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*")
_S3_URL = re.compile(r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<prefix>[^?#]*))?")
_REGION_TABLE_KEYS = ("delivery", "smtp_timeout", "mx_host", "spf_include")


@dataclass(frozen=True)
class DeliveryTarget:
    """Where outbound mail goes: the capture store, the recipients' MX hosts, or one SMTP relay."""

    kind: DeliveryKind
    host: str | None = None
    port: int | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: TlsMode = "starttls"

    @classmethod
    def parse(cls, text: str) -> DeliveryTarget:
        """Read ``capture``, ``mx`` or ``smtp://[user:pass@]host[:port][?tls=...]``."""
        value = text.strip()
        if value == "capture":
            return cls(kind="capture")
        if value == "mx":
            return cls(kind="mx")
        if value.lower().startswith("smtp://"):
            return _parse_smtp_url(value)
        raise ValueError(f"expected {_DELIVERY_FORMS}, got {_redact(value)!r}")


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Every setting of a Posthaste process; build with ``Settings.load()`` or directly in tests.

    An empty ``database_url`` or ``public_url`` is derived at construction (from ``data_dir``,
    and from ``http_host``/``http_port``); ``secret_key`` defaults to a random key per instance.
    """

    database_url: str = ""
    data_dir: Path = DEFAULT_DATA_DIR
    blob_store: str = "database"
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    public_url: str = ""
    smtp_relay_port: int = 2587
    smtp_relay_tls_port: int = 2465
    smtp_inbound_port: int = 2525
    tls_cert: Path | None = None
    tls_key: Path | None = None
    delivery: DeliveryTarget = field(default_factory=lambda: DeliveryTarget(kind="capture"))
    region_delivery: Mapping[str, DeliveryTarget] = field(default_factory=dict, hash=False)
    smtp_timeout: float = 30.0
    region_smtp_timeout: Mapping[str, float] = field(default_factory=dict, hash=False)
    dns_nameservers: tuple[tuple[str, int], ...] = ()
    regions: tuple[str, ...] = ("us-east-1", "eu-west-1", "sa-east-1", "ap-northeast-1")
    mx_host: str = "mx.posthaste.localhost"
    spf_include: str = "_spf.posthaste.localhost"
    region_mx_host: Mapping[str, str] = field(default_factory=dict, hash=False)
    region_spf_include: Mapping[str, str] = field(default_factory=dict, hash=False)
    webhook_retry_schedule: tuple[float, ...] = parse_schedule(
        "1m,5m,30m,2h,5h,10h,24h,24h,24h,24h"
    )
    webhook_jitter: float = 0.1
    webhook_timeout: float = 10.0
    webhook_allow_private: bool = False
    delivery_retry_schedule: tuple[float, ...] = parse_schedule("1m,5m,15m,30m,1h,2h,4h,8h,16h,24h")
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(48), repr=False)
    retention_days: int = 30
    role: Role = "all"
    job_lease: float = 60.0
    log_level: str = "info"

    def __post_init__(self) -> None:
        if not self.database_url:
            object.__setattr__(self, "database_url", default_database_url(self.data_dir))
        if not self.public_url:
            url = default_public_url(self.http_host, self.http_port)
            object.__setattr__(self, "public_url", url)
        for name in _REGION_MAPPINGS:
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read and validate every setting from the TOML file (if any) and the environment."""
        env = os.environ if environ is None else environ
        sources = _Sources()
        region_tables: list[_RegionTable] = []
        config_path = env.get(CONFIG_FILE_VARIABLE, "").strip()
        if config_path:
            region_tables = _apply_config_file(sources, Path(config_path).expanduser())
        for key in SETTING_KEYS:
            sources.set(key, ENV_PREFIX + key.upper(), env.get(ENV_PREFIX + key.upper(), ""))
        return _build_settings(sources, region_tables)

    @property
    def is_postgres(self) -> bool:
        """True when the database is PostgreSQL (a fleet), false for SQLite (one machine)."""
        return _is_postgres_url(self.database_url)

    @property
    def async_database_url(self) -> str:
        """The URL for SQLAlchemy's async engine: aiosqlite or asyncpg."""
        if self.is_postgres:
            return "postgresql+asyncpg://" + self.database_url.split("://", 1)[1]
        return "sqlite+aiosqlite:///" + self.database_url.removeprefix("sqlite:///")

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite database file, or None on PostgreSQL."""
        if self.is_postgres:
            return None
        return Path(self.database_url.removeprefix("sqlite:///").partition("?")[0])

    @property
    def default_region(self) -> str:
        """The region of emails and domains that do not name one: the first listed."""
        return self.regions[0]

    def delivery_for(self, region: str) -> DeliveryTarget:
        """The delivery target of ``region``: its own when TOML gave one, else the global one."""
        return self.region_delivery.get(region, self.delivery)

    def smtp_timeout_for(self, region: str) -> float:
        """Seconds to wait for each step of an outbound SMTP session of ``region``."""
        return self.region_smtp_timeout.get(region, self.smtp_timeout)

    def mx_host_for(self, region: str) -> str:
        """The MX host published for domains of ``region``."""
        return self.region_mx_host.get(region, self.mx_host)

    def spf_include_for(self, region: str) -> str:
        """The SPF include published for domains of ``region``."""
        return self.region_spf_include.get(region, self.spf_include)


_REGION_MAPPINGS = (
    "region_delivery",
    "region_smtp_timeout",
    "region_mx_host",
    "region_spf_include",
)
SETTING_KEYS: tuple[str, ...] = tuple(
    f.name for f in fields(Settings) if f.name not in _REGION_MAPPINGS
)
"""Keys settable by environment (``POSTHASTE_<KEY>``) and at the top level of the TOML file."""


def default_database_url(data_dir: Path) -> str:
    """The SQLite file in ``data_dir``: ``sqlite:///./posthaste-data/posthaste.db`` by default."""
    path = (data_dir / "posthaste.db").as_posix()
    if not data_dir.is_absolute() and not path.startswith("."):
        path = "./" + path
    return "sqlite:///" + path


def default_public_url(host: str, port: int) -> str:
    """``http://<host>:<port>``, with an IPv6 host in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def load_or_create_secret_key(data_dir: Path) -> str:
    """The key kept in ``<data_dir>/secret.key``, created (mode 0600) on first start on SQLite.

    A new key is written to a temporary file and hard-linked into place: the link fails when the
    name exists, so processes starting at once all read the same, complete key.
    """
    path = data_dir / SECRET_KEY_FILENAME
    try:
        if not path.exists():
            _create_secret_key_file(path)
        key = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(
            f"POSTHASTE_DATA_DIR: cannot keep the secret key in {path}: {reason}"
        ) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: expected a secret key in text, got binary data") from exc
    if len(key) < SECRET_KEY_MIN_LENGTH:
        message = f"expected a secret key of at least {SECRET_KEY_MIN_LENGTH} characters"
        raise ConfigError(f"{path}: {message}, got {len(key)}")
    return key


def _create_secret_key_file(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor, temp_name = tempfile.mkstemp(dir=path.parent, prefix=".secret-key-")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as temp:
            temp.write(secrets.token_urlsafe(48) + "\n")
            temp.flush()
            os.fsync(temp.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(temp_name, path)
    finally:
        os.unlink(temp_name)


# --- where raw values come from -------------------------------------------------------------


@dataclass(frozen=True)
class _Raw:
    label: str
    text: str


class _Sources:
    """Raw setting texts by key, each with the name errors give it; later ``set`` calls win."""

    def __init__(self) -> None:
        self._raw: dict[str, _Raw] = {}

    def set(self, key: str, label: str, text: str) -> None:
        if text.strip():
            self._raw[key] = _Raw(label, text)

    def get(self, key: str, parse: Callable[[str], T], default: T) -> T:
        """``parse`` applied to the value of ``key``, or ``default`` when it is unset."""
        raw = self._raw.get(key)
        if raw is None:
            return default
        try:
            return parse(raw.text)
        except ValueError as exc:
            raise ConfigError(f"{raw.label}: {exc}") from exc

    def label(self, key: str) -> str:
        raw = self._raw.get(key)
        return raw.label if raw is not None else ENV_PREFIX + key.upper()


@dataclass(frozen=True)
class _RegionTable:
    name: str
    path: Path
    values: Mapping[str, object]

    @property
    def label(self) -> str:
        return f"regions.{self.name} in {self.path}"

    def key_label(self, key: str) -> str:
        return f"regions.{self.name}.{key} in {self.path}"


def _apply_config_file(sources: _Sources, path: Path) -> list[_RegionTable]:
    """Put the TOML file's values into ``sources``; return its ``[regions.<name>]`` tables."""
    document = _read_toml(path)
    unknown = sorted(set(document) - set(SETTING_KEYS))
    if unknown:
        names = ", ".join(unknown)
        raise ConfigError(f"{CONFIG_FILE_VARIABLE} {path}: unknown keys: {names}")
    tables: list[_RegionTable] = []
    for key, value in document.items():
        if key == "regions" and isinstance(value, dict):
            tables = _split_regions_table(sources, value, path)
        else:
            label = f"{key} in {path}"
            sources.set(key, label, _toml_text(value, label))
    return tables


def _read_toml(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except FileNotFoundError as exc:
        raise ConfigError(f"{CONFIG_FILE_VARIABLE}: file not found: {path}") from exc
    except OSError as exc:
        raise ConfigError(f"{CONFIG_FILE_VARIABLE}: cannot read {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{CONFIG_FILE_VARIABLE}: {path} is not valid TOML: {exc}") from exc


def _split_regions_table(
    sources: _Sources, table: dict[str, object], path: Path
) -> list[_RegionTable]:
    """Read ``[regions]``: an optional ``names`` list and one sub-table per region."""
    tables: list[_RegionTable] = []
    for name, value in table.items():
        label = f"regions.{name} in {path}"
        if isinstance(value, dict):
            tables.append(_RegionTable(name, path, value))
        elif name == "names":
            sources.set("regions", label, _toml_text(value, label))
        else:
            raise ConfigError(
                f"{label}: expected a table such as [regions.{name}] or names = [...]"
            )
    return tables


def _toml_text(value: object, label: str) -> str:
    """A TOML value as the text an environment variable would hold (lists joined by commas)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    if isinstance(value, list) and all(isinstance(item, str | int | float) for item in value):
        return ",".join(_toml_text(item, label) for item in value)
    raise ConfigError(f"{label}: expected a string, number, boolean or list of strings")


# --- building Settings ----------------------------------------------------------------------


def _build_settings(sources: _Sources, region_tables: list[_RegionTable]) -> Settings:
    """Parse every key, then the rules that span keys: derived defaults, TLS pair, regions, key."""
    base = Settings()  # the defaults
    get = sources.get
    data_dir = get("data_dir", _parse_path, base.data_dir)
    database_url = get("database_url", _parse_database_url, default_database_url(data_dir))
    http_host = get("http_host", _parse_bind_host, base.http_host)
    http_port = get("http_port", _parse_port, base.http_port)
    regions = get("regions", _parse_regions, base.regions)
    tls_cert, tls_key = _tls_pair(sources)
    overrides = _RegionOverrides.parse(region_tables, regions, sources.label("regions"))
    return Settings(
        database_url=database_url,
        data_dir=data_dir,
        blob_store=get("blob_store", _parse_blob_store, base.blob_store),
        http_host=http_host,
        http_port=http_port,
        public_url=get("public_url", _parse_public_url, ""),
        smtp_relay_port=get("smtp_relay_port", _parse_port, base.smtp_relay_port),
        smtp_relay_tls_port=get("smtp_relay_tls_port", _parse_port, base.smtp_relay_tls_port),
        smtp_inbound_port=get("smtp_inbound_port", _parse_port, base.smtp_inbound_port),
        tls_cert=tls_cert,
        tls_key=tls_key,
        delivery=get("delivery", DeliveryTarget.parse, base.delivery),
        region_delivery=overrides.delivery,
        smtp_timeout=get("smtp_timeout", _parse_positive_duration, base.smtp_timeout),
        region_smtp_timeout=overrides.smtp_timeout,
        dns_nameservers=get("dns_nameservers", _parse_nameservers, ()),
        regions=regions,
        mx_host=get("mx_host", _parse_hostname, base.mx_host),
        spf_include=get("spf_include", _parse_hostname, base.spf_include),
        region_mx_host=overrides.mx_host,
        region_spf_include=overrides.spf_include,
        webhook_retry_schedule=get(
            "webhook_retry_schedule", parse_schedule, base.webhook_retry_schedule
        ),
        webhook_jitter=get("webhook_jitter", _parse_jitter, base.webhook_jitter),
        webhook_timeout=get("webhook_timeout", _parse_positive_duration, base.webhook_timeout),
        webhook_allow_private=get("webhook_allow_private", _parse_bool, base.webhook_allow_private),
        delivery_retry_schedule=get(
            "delivery_retry_schedule", parse_schedule, base.delivery_retry_schedule
        ),
        secret_key=_resolve_secret_key(sources, database_url, data_dir),
        retention_days=get("retention_days", _parse_retention_days, base.retention_days),
        role=get("role", _parse_role, base.role),
        job_lease=get("job_lease", _parse_positive_duration, base.job_lease),
        log_level=get("log_level", _parse_log_level, base.log_level),
    )


def _tls_pair(sources: _Sources) -> tuple[Path | None, Path | None]:
    """The TLS certificate and key files: both or neither."""
    cert = sources.get("tls_cert", _parse_existing_file, None)
    key = sources.get("tls_key", _parse_existing_file, None)
    if (cert is None) != (key is None):
        given, missing = ("tls_cert", "tls_key") if cert is not None else ("tls_key", "tls_cert")
        raise ConfigError(f"{sources.label(missing)}: required when {sources.label(given)} is set")
    return cert, key


def _resolve_secret_key(sources: _Sources, database_url: str, data_dir: Path) -> str:
    """The configured key; on SQLite only, the one kept in (or first made in) the data dir."""
    key = sources.get("secret_key", _parse_secret_key, None)
    if key is not None:
        return key
    if _is_postgres_url(database_url):
        reason = "every process of a fleet must share it"
        raise ConfigError(f"POSTHASTE_SECRET_KEY is required with PostgreSQL: {reason}")
    return load_or_create_secret_key(data_dir)


@dataclass(frozen=True)
class _RegionOverrides:
    delivery: dict[str, DeliveryTarget]
    smtp_timeout: dict[str, float]
    mx_host: dict[str, str]
    spf_include: dict[str, str]

    @classmethod
    def parse(
        cls, tables: list[_RegionTable], regions: tuple[str, ...], regions_label: str
    ) -> _RegionOverrides:
        """Validate ``[regions.<name>]`` tables: known regions and keys, valid values."""
        overrides = cls(delivery={}, smtp_timeout={}, mx_host={}, spf_include={})
        for table in tables:
            if table.name not in regions:
                listed = ", ".join(regions)
                message = f"region {table.name!r} is not in {regions_label} ({listed})"
                raise ConfigError(f"{table.label}: {message}")
            overrides._add(table)
        return overrides

    def _add(self, table: _RegionTable) -> None:
        unknown = sorted(set(table.values) - set(_REGION_TABLE_KEYS))
        if unknown:
            raise ConfigError(f"{table.label}: unknown keys: {', '.join(unknown)}")
        sources = _Sources()
        for key, value in table.values.items():
            label = table.key_label(key)
            sources.set(key, label, _toml_text(value, label))
        delivery = sources.get("delivery", DeliveryTarget.parse, None)
        if delivery is not None:
            self.delivery[table.name] = delivery
        timeout = sources.get("smtp_timeout", _parse_positive_duration, None)
        if timeout is not None:
            self.smtp_timeout[table.name] = timeout
        for key, mapping in (("mx_host", self.mx_host), ("spf_include", self.spf_include)):
            host = sources.get(key, _parse_hostname, "")
            if host:
                mapping[table.name] = host


# --- value parsers: text -> value, or ValueError("expected ..., got ...") -------------------


def _parse_path(text: str) -> Path:
    return Path(text.strip()).expanduser()


def _parse_existing_file(text: str) -> Path:
    path = _parse_path(text)
    if not path.is_file():
        raise ValueError(f"expected an existing file, got {text.strip()!r}")
    return path


def _parse_port(text: str) -> int:
    return _parse_whole_number(text, 0, 65535, "an integer 0-65535")


def _parse_retention_days(text: str) -> int:
    return _parse_whole_number(text, 1, 1_000_000, "a whole number of days, at least 1")


def _parse_whole_number(text: str, low: int, high: int, expected: str) -> int:
    value = text.strip()
    if not value.isascii() or not value.isdigit() or not low <= int(value) <= high:
        raise ValueError(f"expected {expected}, got {value!r}")
    return int(value)


def _parse_bool(text: str) -> bool:
    value = _BOOLEANS.get(text.strip().lower())
    if value is None:
        raise ValueError(f"expected true/false, 1/0 or yes/no, got {text.strip()!r}")
    return value


def _parse_jitter(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < 1:
        raise ValueError(
            f"expected a fraction from 0 up to (not including) 1, got {text.strip()!r}"
        )
    return value


def _parse_positive_duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError(f"expected a duration above zero, got {text.strip()!r}")
    return seconds


def _parse_secret_key(text: str) -> str:
    key = text.strip()
    if len(key) < SECRET_KEY_MIN_LENGTH:
        # Never echo the key itself: only its length.
        raise ValueError(f"expected at least {SECRET_KEY_MIN_LENGTH} characters, got {len(key)}")
    return key


def _parse_role(text: str) -> Role:
    role = _ROLES.get(text.strip().lower())
    if role is None:
        raise ValueError(f"expected one of api, smtp, worker, all, got {text.strip()!r}")
    return role


def _parse_log_level(text: str) -> str:
    level = text.strip().lower()
    if level not in _LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(_LOG_LEVELS)}, got {text.strip()!r}")
    return level


def _parse_bind_host(text: str) -> str:
    host = text.strip().removeprefix("[").removesuffix("]")
    if not host or any(char.isspace() or char in "/[]" for char in host):
        raise ValueError(f"expected a host name or IP address to listen on, got {text.strip()!r}")
    return host


def _parse_hostname(text: str) -> str:
    host = text.strip().rstrip(".").lower()
    if len(host) > 253 or not _HOSTNAME.fullmatch(host):
        raise ValueError(f"expected a DNS name such as mx.example.com, got {text.strip()!r}")
    return host


def _parse_public_url(text: str) -> str:
    url = text.strip().rstrip("/")
    expected = f"expected an absolute http(s) URL such as https://mail.example.com, got {url!r}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a malformed port
    except ValueError:
        raise ValueError(expected) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(expected)
    return url


def _parse_database_url(text: str) -> str:
    url = text.strip()
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///").partition("?")[0]
        if path in ("", ":memory:"):
            raise ValueError(f"expected a SQLite file path after sqlite:///, got {url!r}")
        return url
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix) and len(url) > len(prefix):
            return "postgresql://" + url.removeprefix(prefix)
    expected = "expected sqlite:///<path> or postgresql://user@host/db"
    raise ValueError(f"{expected}, got {_redact(url)!r}")


def _is_postgres_url(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def _parse_blob_store(text: str) -> str:
    value = text.strip()
    if value == "database":
        return value
    match = _S3_URL.fullmatch(value)
    if match is None:
        raise ValueError(f"expected 'database' or s3://bucket/prefix, got {value!r}")
    prefix = (match["prefix"] or "").strip("/")
    return f"s3://{match['bucket']}/{prefix}" if prefix else f"s3://{match['bucket']}"


def _parse_regions(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(","))
    for name in names:
        if not _REGION_NAME.fullmatch(name):
            expected = "expected comma-separated region names of a-z, 0-9 and '-'"
            raise ValueError(f"{expected}, got {text.strip()!r}")
        if names.count(name) > 1:
            raise ValueError(f"expected each region once, got {name!r} twice")
    return names


def _parse_nameservers(text: str) -> tuple[tuple[str, int], ...]:
    return tuple(_parse_nameserver(entry.strip()) for entry in text.split(",") if entry.strip())


def _parse_nameserver(entry: str) -> tuple[str, int]:
    """``ip``, ``ip:port``, ``[ipv6]:port`` or a bare IPv6 address; the port defaults to 53."""
    host, port_text = _split_host_port(entry)
    try:
        ipaddress.ip_address(host)
        port = 53 if port_text is None else _parse_port(port_text)
    except ValueError:
        port = 0
    if port == 0:
        expected = "expected IP[:port] entries such as 1.1.1.1,[::1]:53"
        raise ValueError(f"{expected}, got {entry!r}")
    return host, port


def _split_host_port(entry: str) -> tuple[str, str | None]:
    if entry.startswith("["):
        host, closed, rest = entry[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            return "", None
        return host, rest[1:] if rest else None
    if entry.count(":") == 1:
        host, _, port_text = entry.partition(":")
        return host, port_text
    return entry, None


# --- smtp:// delivery URLs ------------------------------------------------------------------


def _parse_smtp_url(url: str) -> DeliveryTarget:
    """``smtp://[user:pass@]host[:port][?tls=...]``; the port defaults to 465 or 587 by TLS mode."""
    parts = _split_smtp_url(url)
    tls = _parse_tls_query(parts.query)
    username, password = _smtp_credentials(parts)
    port = _smtp_port(parts) or (465 if tls == "implicit" else 587)
    return DeliveryTarget(
        kind="smtp", host=parts.hostname, port=port, username=username, password=password, tls=tls
    )


def _split_smtp_url(url: str) -> SplitResult:
    expected = f"expected {_DELIVERY_FORMS}, got {_redact(url)!r}"
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ValueError(expected) from None
    if not parts.hostname or parts.path not in ("", "/") or parts.fragment:
        raise ValueError(expected)
    return parts


def _parse_tls_query(query: str) -> TlsMode:
    if not query:
        return "starttls"
    try:
        params = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=True))
    except ValueError:
        params = {}
    mode = _TLS_MODES.get(params.get("tls", "")) if set(params) == {"tls"} else None
    if mode is None:
        raise ValueError(f"expected ?tls=starttls|implicit|none in the smtp:// URL, got {query!r}")
    return mode


def _smtp_credentials(parts: SplitResult) -> tuple[str | None, str | None]:
    if parts.username is None and parts.password is None:
        return None, None
    if not parts.username or parts.password is None:
        raise ValueError("expected both user and password in the smtp:// URL (user:pass@host)")
    return unquote(parts.username), unquote(parts.password)


def _smtp_port(parts: SplitResult) -> int | None:
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise ValueError("expected a port 1-65535 in the smtp:// URL")
    return port


def _redact(url: str) -> str:
    """``url`` with any password replaced by ``***``, for error messages."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.split("://", 1)[0] + "://..." if "@" in url else url
    if parts.password is None:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return parts._replace(netloc=f"{user}:***@{hostport}").geturl()

"""The ``Settings`` of a process: every setting's type and default, and the rules that span keys.

``Settings.load`` reads raw texts through ``sources.py``, parses each with ``parsers.py``, then
applies what no single value decides: derived defaults (database URL, public URL), the TLS
certificate and key given together, ``[regions.<name>]`` tables naming listed regions, and the
secret key required on PostgreSQL.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from posthaste.config.parsers import (
    ALL_ROLES,
    DELIVERY_FORMS,
    Roles,
    TlsMode,
    is_postgres_url,
    parse_bind_host,
    parse_blob_store,
    parse_bool,
    parse_chunk_size,
    parse_claim_size,
    parse_database_url,
    parse_existing_file,
    parse_hostname,
    parse_jitter,
    parse_log_level,
    parse_metrics_token,
    parse_nameservers,
    parse_path,
    parse_port,
    parse_positive_duration,
    parse_processes,
    parse_public_url,
    parse_regions,
    parse_retention_days,
    parse_roles,
    parse_secret_key,
    parse_secret_keys,
    parse_size,
    parse_smtp_url,
    parse_trusted_proxies,
    redact,
)
from posthaste.config.sources import (
    DESTINATIONS,
    POOLS,
    RegionTable,
    Sources,
    load_or_create_secret_key,
    read_previous_secret_keys,
    read_sources,
)
from posthaste.core.destinations import NO_OVERRIDES, POLICY_KEYS, Policies, parse_rate
from posthaste.core.durations import parse_schedule
from posthaste.core.pools import (
    NO_POOLS,
    POOL_KEYS,
    WARMUP_KEYS,
    Pool,
    Pools,
    check_addresses_apart,
    parse_per_day,
    parse_pool_name,
    parse_source_address,
)
from posthaste.errors import ConfigError

DeliveryKind = Literal["capture", "mx", "smtp"]

DEFAULT_DATA_DIR = Path("./posthaste-data")
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
            url = parse_smtp_url(value)
            return cls(
                kind="smtp",
                host=url.host,
                port=url.port,
                username=url.username,
                password=url.password,
                tls=url.tls,
            )
        raise ValueError(f"expected {DELIVERY_FORMS}, got {redact(value)!r}")


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
    # CA bundle for verified outbound TLS (MTA-STS policies and MX hosts, the smarthost);
    # None: the system's CAs.
    tls_ca_file: Path | None = None
    # Fetch MTA-STS policies from loopback/private addresses too (tests, private networks).
    mta_sts_allow_private: bool = False
    delivery_retry_schedule: tuple[float, ...] = parse_schedule("1m,5m,15m,30m,1h,2h,4h,8h,16h,24h")
    # How long mail held by its IP pool's warm-up cap may wait before it bounces (seconds);
    # never less than the whole retry schedule.
    max_queue_age: float = 5 * 86_400.0
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(48), repr=False)
    # Keys still accepted after a rotation (POSTHASTE_SECRET_KEY_PREVIOUS): open, never seal.
    secret_key_previous: tuple[str, ...] = field(default=(), repr=False)
    retention_days: int = 30
    role: Roles = ALL_ROLES  # POSTHASTE_ROLE: the roles this process runs (all, or some)
    processes: int = 0  # 0 = auto: one per core (``supervisor.py``)
    job_lease: float = 60.0
    broadcast_chunk_size: int = 1000  # members per transaction of a broadcast's expansion
    automation_claim_size: int = 256  # automation step jobs a claim takes at most
    # Bytes of large request bodies (1 MiB and more) one API process works on at once.
    request_memory: int = 100 * 1024 * 1024
    log_level: str = "info"
    # GET /metrics: with a token, any peer presenting it; without, loopback peers only.
    metrics_token: str = field(default="", repr=False)
    # The reverse proxies whose X-Forwarded-For/-Proto the API believes (none by default).
    trusted_proxies: tuple[str, ...] = ()
    # ``[destinations.<name>]`` tables of the TOML file over the shipped policies.
    destinations: Policies = field(default=NO_OVERRIDES, hash=False)
    # ``[pools.<name>]`` tables of the TOML file: source addresses of mx delivery.
    pools: Pools = field(default=NO_POOLS, hash=False)

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
        sources, region_tables = read_sources(env, SETTING_KEYS)
        return _build_settings(sources, region_tables)

    @property
    def secret_keys(self) -> tuple[str, ...]:
        """The key ring: the current key, then the previous ones (``core/crypto.py``)."""
        return (self.secret_key, *self.secret_key_previous)

    @property
    def async_database_url(self) -> str:
        """The URL for SQLAlchemy's async engine: aiosqlite or asyncpg."""
        if is_postgres_url(self.database_url):
            return "postgresql+asyncpg://" + self.database_url.split("://", 1)[1]
        return "sqlite+aiosqlite:///" + self.database_url.removeprefix("sqlite:///")

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
    f.name for f in fields(Settings) if f.name not in (*_REGION_MAPPINGS, "destinations", "pools")
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


# --- building Settings ----------------------------------------------------------------------


def _build_settings(sources: Sources, region_tables: list[RegionTable]) -> Settings:
    """Parse every key, then the rules that span keys: derived defaults, TLS pair, regions, key."""
    base = Settings()  # the defaults
    get = sources.get
    data_dir = get("data_dir", parse_path, base.data_dir)
    database_url = get("database_url", parse_database_url, default_database_url(data_dir))
    http_host = get("http_host", parse_bind_host, base.http_host)
    http_port = get("http_port", parse_port, base.http_port)
    regions = get("regions", parse_regions, base.regions)
    tls_cert, tls_key = _tls_pair(sources)
    destination_tables = [t for t in region_tables if t.group == DESTINATIONS]
    pool_tables = [t for t in region_tables if t.group == POOLS]
    region_tables = [t for t in region_tables if t.group == "regions"]
    overrides = _RegionOverrides.parse(region_tables, regions, sources.label("regions"))
    return Settings(
        database_url=database_url,
        data_dir=data_dir,
        blob_store=get("blob_store", parse_blob_store, base.blob_store),
        http_host=http_host,
        http_port=http_port,
        public_url=get("public_url", parse_public_url, ""),
        smtp_relay_port=get("smtp_relay_port", parse_port, base.smtp_relay_port),
        smtp_relay_tls_port=get("smtp_relay_tls_port", parse_port, base.smtp_relay_tls_port),
        smtp_inbound_port=get("smtp_inbound_port", parse_port, base.smtp_inbound_port),
        tls_cert=tls_cert,
        tls_key=tls_key,
        delivery=get("delivery", DeliveryTarget.parse, base.delivery),
        region_delivery=overrides.delivery,
        smtp_timeout=get("smtp_timeout", parse_positive_duration, base.smtp_timeout),
        region_smtp_timeout=overrides.smtp_timeout,
        dns_nameservers=get("dns_nameservers", parse_nameservers, ()),
        regions=regions,
        mx_host=get("mx_host", parse_hostname, base.mx_host),
        spf_include=get("spf_include", parse_hostname, base.spf_include),
        region_mx_host=overrides.mx_host,
        region_spf_include=overrides.spf_include,
        webhook_retry_schedule=get(
            "webhook_retry_schedule", parse_schedule, base.webhook_retry_schedule
        ),
        webhook_jitter=get("webhook_jitter", parse_jitter, base.webhook_jitter),
        webhook_timeout=get("webhook_timeout", parse_positive_duration, base.webhook_timeout),
        webhook_allow_private=get("webhook_allow_private", parse_bool, base.webhook_allow_private),
        tls_ca_file=get("tls_ca_file", parse_existing_file, None),
        mta_sts_allow_private=get("mta_sts_allow_private", parse_bool, base.mta_sts_allow_private),
        delivery_retry_schedule=get(
            "delivery_retry_schedule", parse_schedule, base.delivery_retry_schedule
        ),
        max_queue_age=get("max_queue_age", parse_positive_duration, base.max_queue_age),
        secret_key=_resolve_secret_key(sources, database_url, data_dir),
        secret_key_previous=_previous_secret_keys(sources, data_dir),
        retention_days=get("retention_days", parse_retention_days, base.retention_days),
        role=get("role", parse_roles, base.role),
        processes=get("processes", parse_processes, base.processes),
        job_lease=get("job_lease", parse_positive_duration, base.job_lease),
        request_memory=get("request_memory", parse_size, base.request_memory),
        automation_claim_size=get(
            "automation_claim_size", parse_claim_size, base.automation_claim_size
        ),
        broadcast_chunk_size=get(
            "broadcast_chunk_size", parse_chunk_size, base.broadcast_chunk_size
        ),
        log_level=get("log_level", parse_log_level, base.log_level),
        metrics_token=get("metrics_token", parse_metrics_token, base.metrics_token),
        trusted_proxies=get("trusted_proxies", parse_trusted_proxies, base.trusted_proxies),
        destinations=_destination_policies(destination_tables),
        pools=_pools(pool_tables),
    )


def _destination_policies(tables: list[RegionTable]) -> Policies:
    """Validate ``[destinations.<name>]`` tables: known keys, valid values."""
    configured: dict[str, dict[str, object]] = {}
    for table in tables:
        unknown = sorted(set(table.values) - set(POLICY_KEYS))
        if unknown:
            raise ConfigError(f"{table.label}: unknown keys: {', '.join(unknown)}")
        sources = table.sources()
        values: dict[str, object] = {}
        for key in ("max_connections", "messages_per_connection"):
            count = sources.get(key, parse_positive_int, None)
            if count is not None:
                values[key] = count
        rate = sources.get("rate", parse_rate, None)
        if rate is not None:
            values["rate"] = rate
        configured[table.name.lower()] = values
    return Policies(configured)


def _pools(tables: list[RegionTable]) -> Pools:
    """Validate ``[pools.<name>]`` tables: a name, addresses, a HELO name, a warm-up."""
    pools = [_pool(table) for table in tables]
    try:
        check_addresses_apart(pools)
    except ValueError as exc:
        raise ConfigError(f"pools in {tables[0].path}: {exc}") from exc
    return Pools({pool.name: pool for pool in pools})


def _pool(table: RegionTable) -> Pool:
    unknown = sorted(set(table.values) - set(POOL_KEYS))
    if unknown:
        raise ConfigError(f"{table.label}: unknown keys: {', '.join(unknown)}")
    try:
        name = parse_pool_name(table.name, "a pool's name")
    except ValueError as exc:
        raise ConfigError(f"{table.label}: {exc}") from exc
    addresses = table.values.get("addresses", [])
    if not isinstance(addresses, list) or not addresses:
        example = 'addresses = ["192.0.2.10", "192.0.2.11"]'
        raise ConfigError(f"{table.key_label('addresses')}: expected a list such as {example}")
    try:
        parsed = tuple(dict.fromkeys(parse_source_address(a) for a in addresses))
    except ValueError as exc:
        raise ConfigError(f"{table.key_label('addresses')}: {exc}") from exc
    helo = None
    if "helo" in table.values:
        try:
            helo = parse_hostname(str(table.values["helo"]))
        except ValueError as exc:
            raise ConfigError(f"{table.key_label('helo')}: {exc}") from exc
    return Pool(name, parsed, helo, _warmup(table))


def _warmup(table: RegionTable) -> tuple[int, ...]:
    warmup = table.values.get("warmup")
    if warmup is None:
        return ()
    label = table.key_label("warmup")
    if not isinstance(warmup, dict):
        raise ConfigError(f"{label}: expected a table such as [pools.{table.name}.warmup]")
    unknown = sorted(set(warmup) - set(WARMUP_KEYS))
    if unknown:
        raise ConfigError(f"{label}: unknown keys: {', '.join(unknown)}")
    try:
        return parse_per_day(warmup.get("per_day"))
    except ValueError as exc:
        raise ConfigError(f"{table.key_label('warmup.per_day')}: {exc}") from exc


def parse_positive_int(value: str) -> int:
    if not value.strip().isdigit() or int(value) < 1:
        raise ValueError(f"expected a whole number of at least 1, got {value!r}")
    return int(value)


def _tls_pair(sources: Sources) -> tuple[Path | None, Path | None]:
    """The TLS certificate and key files: both or neither."""
    cert = sources.get("tls_cert", parse_existing_file, None)
    key = sources.get("tls_key", parse_existing_file, None)
    if (cert is None) != (key is None):
        given, missing = ("tls_cert", "tls_key") if cert is not None else ("tls_key", "tls_cert")
        raise ConfigError(f"{sources.label(missing)}: required when {sources.label(given)} is set")
    return cert, key


def _previous_secret_keys(sources: Sources, data_dir: Path) -> tuple[str, ...]:
    """The configured previous keys; without a configured key, those kept beside the data
    dir's own (``posthaste keys rotate-secret`` moves the old key there)."""
    if sources.get("secret_key", str, None) is not None:
        return sources.get("secret_key_previous", parse_secret_keys, ())
    return read_previous_secret_keys(data_dir)


def _resolve_secret_key(sources: Sources, database_url: str, data_dir: Path) -> str:
    """The configured key; on SQLite only, the one kept in (or first made in) the data dir."""
    key = sources.get("secret_key", parse_secret_key, None)
    if key is not None:
        return key
    if is_postgres_url(database_url):
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
        cls, tables: list[RegionTable], regions: tuple[str, ...], regions_label: str
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

    def _add(self, table: RegionTable) -> None:
        unknown = sorted(set(table.values) - set(_REGION_TABLE_KEYS))
        if unknown:
            raise ConfigError(f"{table.label}: unknown keys: {', '.join(unknown)}")
        sources = table.sources()
        delivery = sources.get("delivery", DeliveryTarget.parse, None)
        if delivery is not None:
            self.delivery[table.name] = delivery
        timeout = sources.get("smtp_timeout", parse_positive_duration, None)
        if timeout is not None:
            self.smtp_timeout[table.name] = timeout
        for key, mapping in (("mx_host", self.mx_host), ("spf_include", self.spf_include)):
            host = sources.get(key, parse_hostname, "")
            if host:
                mapping[table.name] = host

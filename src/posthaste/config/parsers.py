"""Value parsers: the text of one setting to its value, or ``ValueError("expected ..., got ...")``.

Each parser sees one value alone; rules that span settings (the TLS pair, the secret key on
PostgreSQL, region tables naming listed regions) live in ``settings.py``. The caller prefixes
the message with where the text came from (see ``sources.py``).
"""

from __future__ import annotations

import ipaddress
import math
import re
from pathlib import Path
from typing import Literal, NamedTuple
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from posthaste.core.durations import parse_duration

Role = Literal["api", "smtp", "inbound", "worker"]
Roles = frozenset[Role]
TlsMode = Literal["starttls", "implicit", "none"]

SECRET_KEY_MIN_LENGTH = 32
DELIVERY_FORMS = "capture, mx or smtp://[user:pass@]host:port[?tls=starttls|implicit|none]"

# In the order a process's roles are named (``roles_label``).
ROLE_ORDER: tuple[Role, ...] = ("api", "smtp", "inbound", "worker")
ALL_ROLES: Roles = frozenset(ROLE_ORDER)
_ROLES: dict[str, Role] = {role: role for role in ROLE_ORDER}
_TLS_MODES: dict[str, TlsMode] = {"starttls": "starttls", "implicit": "implicit", "none": "none"}
_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
_REGION_NAME = re.compile(r"[a-z0-9-]+")
_HOST_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOSTNAME = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*")
_S3_URL = re.compile(r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<prefix>[^?#]*))?")


def parse_path(text: str) -> Path:
    """A path, ``~`` expanded."""
    return Path(text.strip()).expanduser()


def parse_existing_file(text: str) -> Path:
    """A path naming a file that exists now (TLS certificate and key)."""
    path = parse_path(text)
    if not path.is_file():
        raise ValueError(f"expected an existing file, got {text.strip()!r}")
    return path


def parse_port(text: str) -> int:
    """A TCP port, 0 (any free port) to 65535."""
    return _parse_whole_number(text, 0, 65535, "an integer 0-65535")


def parse_retention_days(text: str) -> int:
    """A whole number of days, at least one."""
    return _parse_whole_number(text, 1, 1_000_000, "a whole number of days, at least 1")


def _parse_whole_number(text: str, low: int, high: int, expected: str) -> int:
    value = text.strip()
    if not value.isascii() or not value.isdigit() or not low <= int(value) <= high:
        raise ValueError(f"expected {expected}, got {value!r}")
    return int(value)


def parse_claim_size(text: str) -> int:
    """Jobs a claim takes at most of a kind claimed in a lane of its own: 1 to 10,000."""
    return _parse_whole_number(text, 1, 10_000, "an integer 1-10000")


def parse_chunk_size(text: str) -> int:
    """Members per chunk of a broadcast's expansion: 1 to 10,000."""
    return _parse_whole_number(text, 1, 10_000, "an integer 1-10000")


_SIZE_UNITS = {"": 1, "b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3}


def parse_size(text: str) -> int:
    """A size in bytes, or with a unit: ``100MiB``, ``512KiB``, ``2GiB`` (at least 1 MiB)."""
    value = text.strip().lower().replace(" ", "")
    digits = value.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = value[len(digits) :]
    if not digits.isdigit() or unit not in _SIZE_UNITS:
        raise ValueError(f"expected a size such as 100MiB, got {text.strip()!r}")
    size = int(digits) * _SIZE_UNITS[unit]
    if size < 1024**2:
        raise ValueError(f"expected at least 1MiB, got {text.strip()!r}")
    return size


def parse_bool(text: str) -> bool:
    """true/false, 1/0 or yes/no, in any case."""
    value = _BOOLEANS.get(text.strip().lower())
    if value is None:
        raise ValueError(f"expected true/false, 1/0 or yes/no, got {text.strip()!r}")
    return value


def parse_jitter(text: str) -> float:
    """A fraction from 0 up to (not including) 1."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < 1:
        raise ValueError(
            f"expected a fraction from 0 up to (not including) 1, got {text.strip()!r}"
        )
    return value


def parse_positive_duration(text: str) -> float:
    """A duration such as ``30s`` or ``2m``, in seconds, above zero."""
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError(f"expected a duration above zero, got {text.strip()!r}")
    return seconds


METRICS_TOKEN_MIN_LENGTH = 16


def parse_secret_key(text: str) -> str:
    """A secret key of at least ``SECRET_KEY_MIN_LENGTH`` characters."""
    key = text.strip()
    if len(key) < SECRET_KEY_MIN_LENGTH:
        # Never echo the key itself: only its length.
        raise ValueError(f"expected at least {SECRET_KEY_MIN_LENGTH} characters, got {len(key)}")
    return key


def parse_secret_keys(text: str) -> tuple[str, ...]:
    """Secret keys separated by commas (the previous keys of a rotation), each a valid key."""
    return tuple(parse_secret_key(part) for part in text.split(",") if part.strip())


def parse_metrics_token(text: str) -> str:
    """The bearer token of ``GET /metrics``: at least ``METRICS_TOKEN_MIN_LENGTH`` characters,
    none of them white space (it travels in an ``Authorization`` header)."""
    token = text.strip()
    if any(character.isspace() for character in token):
        raise ValueError("expected no white space inside the token")
    if len(token) < METRICS_TOKEN_MIN_LENGTH:
        raise ValueError(
            f"expected at least {METRICS_TOKEN_MIN_LENGTH} characters, got {len(token)}"
        )
    return token


def parse_roles(text: str) -> Roles:
    """What a process runs: ``all``, or roles separated by commas (``api,smtp``)."""
    names = [name.strip() for name in text.strip().lower().split(",")]
    if names == ["all"]:
        return ALL_ROLES
    roles = {_ROLES.get(name) for name in names}
    if None in roles:
        choices = ", ".join(ROLE_ORDER)
        raise ValueError(
            f"expected all, or some of {choices} separated by commas, got {text.strip()!r}"
        )
    return frozenset(role for role in roles if role is not None)


def roles_label(roles: Roles) -> str:
    """``roles`` as ``--role`` takes them: ``api,smtp``, or ``all``."""
    if roles == ALL_ROLES:
        return "all"
    return ",".join(role for role in ROLE_ORDER if role in roles)


def parse_processes(text: str) -> int:
    """``auto`` (0: one per core) or how many cores ``serve`` fills, 1 (one process) to 1024."""
    value = text.strip().lower()
    if value == "auto":
        return 0
    return _parse_whole_number(value, 1, 1024, "auto or an integer 1-1024")


def parse_log_level(text: str) -> str:
    """A logging level name, in lower case."""
    level = text.strip().lower()
    if level not in _LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(_LOG_LEVELS)}, got {text.strip()!r}")
    return level


def parse_bind_host(text: str) -> str:
    """A host name or IP address to listen on (an IPv6 address without its brackets)."""
    host = text.strip().removeprefix("[").removesuffix("]")
    if not host or any(char.isspace() or char in "/[]" for char in host):
        raise ValueError(f"expected a host name or IP address to listen on, got {text.strip()!r}")
    return host


def parse_hostname(text: str) -> str:
    """A DNS name, in lower case without its trailing dot."""
    host = text.strip().rstrip(".").lower()
    if len(host) > 253 or not _HOSTNAME.fullmatch(host):
        raise ValueError(f"expected a DNS name such as mx.example.com, got {text.strip()!r}")
    return host


def parse_public_url(text: str) -> str:
    """An absolute http(s) URL without query or fragment, without its trailing slash."""
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


def parse_database_url(text: str) -> str:
    """``sqlite:///<path>`` or ``postgresql://...`` (``postgres://`` is spelled out)."""
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
    raise ValueError(f"{expected}, got {redact(url)!r}")


def is_postgres_url(url: str) -> bool:
    """True for a PostgreSQL database URL, false for SQLite."""
    return url.startswith(("postgresql://", "postgres://"))


def parse_blob_store(text: str) -> str:
    """``database`` or ``s3://bucket[/prefix]`` (the prefix without outer slashes)."""
    value = text.strip()
    if value == "database":
        return value
    match = _S3_URL.fullmatch(value)
    if match is None:
        raise ValueError(f"expected 'database' or s3://bucket/prefix, got {value!r}")
    prefix = (match["prefix"] or "").strip("/")
    return f"s3://{match['bucket']}/{prefix}" if prefix else f"s3://{match['bucket']}"


def parse_regions(text: str) -> tuple[str, ...]:
    """Comma-separated region names of a-z, 0-9 and ``-``, each once."""
    names = tuple(name.strip() for name in text.split(","))
    for name in names:
        if not _REGION_NAME.fullmatch(name):
            expected = "expected comma-separated region names of a-z, 0-9 and '-'"
            raise ValueError(f"{expected}, got {text.strip()!r}")
        if names.count(name) > 1:
            raise ValueError(f"expected each region once, got {name!r} twice")
    return names


def parse_trusted_proxies(text: str) -> tuple[str, ...]:
    """Comma-separated addresses and networks (``10.0.0.0/8``) of the reverse proxies whose
    ``X-Forwarded-For`` and ``X-Forwarded-Proto`` the API believes. ``*`` is refused: trusting
    every peer would let any client choose the address recorded for it."""
    found = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            expected = "expected IP addresses or networks such as 127.0.0.1,10.0.0.0/8"
            raise ValueError(f"{expected}, got {entry!r}") from None
        found.append(str(network.network_address) if "/" not in entry else str(network))
    return tuple(found)


def parse_nameservers(text: str) -> tuple[tuple[str, int], ...]:
    """Comma-separated DNS servers as (IP, port) pairs."""
    return tuple(_parse_nameserver(entry.strip()) for entry in text.split(",") if entry.strip())


def _parse_nameserver(entry: str) -> tuple[str, int]:
    """``ip``, ``ip:port``, ``[ipv6]:port`` or a bare IPv6 address; the port defaults to 53."""
    host, port_text = _split_host_port(entry)
    try:
        ipaddress.ip_address(host)
        port = 53 if port_text is None else parse_port(port_text)
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


class SmtpUrl(NamedTuple):
    """The parts of an ``smtp://`` delivery URL."""

    host: str | None
    port: int
    username: str | None
    password: str | None
    tls: TlsMode


def parse_smtp_url(url: str) -> SmtpUrl:
    """``smtp://[user:pass@]host[:port][?tls=...]``; the port defaults to 465 or 587 by TLS mode."""
    parts = _split_smtp_url(url)
    tls = _parse_tls_query(parts.query)
    username, password = _smtp_credentials(parts)
    port = _smtp_port(parts) or (465 if tls == "implicit" else 587)
    return SmtpUrl(parts.hostname, port, username, password, tls)


def _split_smtp_url(url: str) -> SplitResult:
    expected = f"expected {DELIVERY_FORMS}, got {redact(url)!r}"
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


def redact(url: str) -> str:
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

"""MTA-STS (RFC 8461): the ``_mta-sts`` TXT record, the policy file, which MX hosts match, and
what a delivery does with what is cached (``plan_policy``).

Pure: the lookups, the HTTPS fetch and the cache live in ``adapters/mta_sts_http.py`` and
``services/mta_sts.py``. Parsing is strict where the RFC is (a record that does not begin with
``v=STSv1``, an ``id`` that is not 1 to 32 letters and digits, a policy without ``version:
STSv1`` or a known ``mode``) and liberal where it allows (unknown keys are ignored, lines end
with CRLF or LF). A ``max_age`` above the RFC's maximum (one year) is capped to it rather than
refused: refusing would leave the domain unprotected.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

MAX_AGE_LIMIT = 31_557_600  # seconds (RFC 8461 §3.2: one year)
# After a failed fetch, the same policy id is not fetched again for this long (RFC 8461 §3.3
# suggests five minutes or more, so that a struggling policy host is not hammered).
FAILED_FETCH_PAUSE_MS = 5 * 60_000
POLICY_SIZE_LIMIT = 64 * 1024  # bytes of a policy file we read at most
_ID = re.compile(r"[A-Za-z0-9]{1,32}")
_KEY = re.compile(r"[A-Za-z0-9_.-]{1,32}")
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")


class StsMode(StrEnum):
    ENFORCE = "enforce"  # only verified TLS to a matching MX host, else deferred
    TESTING = "testing"  # deliver as before, report what would have failed
    NONE = "none"  # the domain has withdrawn its policy


class PolicyError(ValueError):
    """A TXT record or a policy file that does not follow RFC 8461; the message says why."""


@dataclass(frozen=True)
class StsRecord:
    """The ``_mta-sts.<domain>`` TXT record: its policy ``id`` (changed with each policy)."""

    id: str


@dataclass(frozen=True)
class StsPolicy:
    """A parsed policy file; ``text`` is the file as served (for reports)."""

    mode: StsMode
    mx: tuple[str, ...]
    max_age: int
    text: str

    def matches(self, host: str) -> bool:
        """Whether MX ``host`` is allowed by one of the policy's ``mx`` patterns."""
        return any(mx_matches(pattern, host) for pattern in self.mx)

    def lines(self) -> list[str]:
        """The policy as the list of lines a TLS report's ``policy-string`` holds."""
        return [line.strip() for line in self.text.splitlines() if line.strip()]


def parse_record(texts: Iterable[str]) -> StsRecord | None:
    """The domain's record from its TXT strings: None when it has none. Records not beginning
    with ``v=STSv1`` are not ours; two of ours, or one that is invalid, is an error."""
    ours = [t for t in texts if t.strip().startswith("v=STSv1")]
    if not ours:
        return None
    if len(ours) > 1:
        raise PolicyError(f"{len(ours)} MTA-STS TXT records, expected one")
    fields: dict[str, str] = {}
    for part in ours[0].split(";"):
        if not part.strip():
            continue
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise PolicyError(f"MTA-STS TXT record field {part.strip()!r} has no '='")
        fields.setdefault(key.strip(), value.strip())
    if fields.get("v") != "STSv1":
        raise PolicyError("MTA-STS TXT record does not begin with v=STSv1")
    record_id = fields.get("id", "")
    if not _ID.fullmatch(record_id):
        raise PolicyError(f"MTA-STS TXT record id {record_id!r} is not 1-32 letters or digits")
    return StsRecord(record_id)


def parse_policy(text: str) -> StsPolicy:
    """A policy file (``version``, ``mode``, ``mx``, ``max_age``); PolicyError naming what is
    wrong."""
    fields: dict[str, str] = {}
    mx: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not _KEY.fullmatch(key):
            raise PolicyError(f"policy line {line[:80]!r} is not 'key: value'")
        if key == "mx":
            mx.append(parse_mx_pattern(value))
        else:
            fields.setdefault(key, value)
    if fields.get("version") != "STSv1":
        raise PolicyError(f"policy version {fields.get('version')!r}, expected 'STSv1'")
    try:
        mode = StsMode(fields.get("mode", ""))
    except ValueError:
        raise PolicyError(
            f"policy mode {fields.get('mode')!r}, expected enforce, testing or none"
        ) from None
    age = fields.get("max_age", "")
    if not age.isascii() or not age.isdigit() or len(age) > 10:
        raise PolicyError(f"policy max_age {age!r} is not a whole number of seconds")
    if not mx and mode is not StsMode.NONE:
        raise PolicyError(f"a policy in mode {mode} needs at least one mx line")
    return StsPolicy(mode, tuple(mx), min(int(age), MAX_AGE_LIMIT), text)


def parse_mx_pattern(value: str) -> str:
    """An ``mx`` value: a host name, or ``*.`` and a host name (one leftmost label)."""
    pattern = value.strip().rstrip(".").lower()
    name = pattern[2:] if pattern.startswith("*.") else pattern
    labels = name.split(".")
    if len(labels) < 2 or not all(_LABEL.fullmatch(label) for label in labels):
        raise PolicyError(f"policy mx {value!r} is not a host name or *.host name")
    return pattern


def mx_matches(pattern: str, host: str) -> bool:
    """RFC 8461 §4.1: equal names, or ``*.rest`` matching exactly one more leftmost label."""
    name = host.rstrip(".").lower()
    pattern = pattern.rstrip(".").lower()
    if pattern.startswith("*."):
        label, _, rest = name.partition(".")
        return bool(label) and rest == pattern[2:]
    return name == pattern


def allowed_hosts(policy: StsPolicy, hosts: Sequence[str]) -> list[str]:
    """The MX hosts ``policy`` lets mail go to, in their order."""
    return [host for host in hosts if policy.matches(host)]


@dataclass(frozen=True)
class StsDecision:
    """What applies to one delivery to a domain: its policy (None: none known), the id of its
    TXT record, and the failure to fetch or read a policy it announced (for TLS reports)."""

    policy: StsPolicy | None = None
    record_id: str = ""
    fetch_error: str = ""  # an RFC 8460 result type, '' when none
    # Not yet known: the policy is being fetched; the mail waits until then (epoch ms).
    hold_until: int | None = None

    @property
    def mode(self) -> StsMode:
        return self.policy.mode if self.policy is not None else StsMode.NONE

    def allows(self, host: str) -> bool:
        """Whether the policy (if any) lets mail go to MX ``host``."""
        return self.policy is None or self.policy.matches(host)


NO_POLICY = StsDecision()


@dataclass(frozen=True)
class CachedPolicy:
    """What the cache holds for a domain: its policy file as last fetched (``policy``) for the
    TXT record id ``record_id``, in force until ``expires_at`` (epoch ms); or, with ``policy``
    empty, a fetch that failed (``fetch_error``, an RFC 8460 result type, and ``fetch_detail``),
    not tried again for that id before ``expires_at``."""

    domain: str
    record_id: str
    policy: str
    fetched_at: int
    expires_at: int
    fetch_error: str = ""
    fetch_detail: str = ""

    @property
    def failed(self) -> bool:
        return not self.policy

    def live(self, now: int) -> bool:
        """A fetched policy that has not expired: the one that applies (RFC 8461 §5.1)."""
        return not self.failed and now < self.expires_at

    def half_spent(self, now: int) -> bool:
        """Past half its life: due for renewal, well before it expires rather than at the
        moment an attacker may be blocking the fetch."""
        return now - self.fetched_at > (self.expires_at - self.fetched_at) // 2

    def decision(self) -> StsDecision:
        """The cached policy as a delivery applies it."""
        if self.failed:
            return StsDecision(None, self.record_id, self.fetch_error)
        try:
            return StsDecision(parse_policy(self.policy), self.record_id)
        except PolicyError:  # stored only after parsing: cannot happen unless edited by hand
            return StsDecision(None, self.record_id, "sts-policy-invalid")


class Refresh(StrEnum):
    """Whether a delivery asks for the domain's policy to be fetched (in the background)."""

    NONE = "none"
    BACKGROUND = "background"  # what is cached applies meanwhile
    FIRST = "first"  # nothing usable is cached: the mail waits for the fetch


@dataclass(frozen=True)
class StsPlan:
    """What a delivery does: apply ``decision`` (None: wait for the fetch), ask for ``refresh``,
    and note ``why`` in the transcript ('' for the ordinary case)."""

    decision: StsDecision | None
    refresh: Refresh = Refresh.NONE
    why: str = ""


def plan_policy(record: StsRecord | None, cached: CachedPolicy | None, now: int) -> StsPlan:
    """The delivery's view of a domain from its TXT record (None: none, or not usable) and what
    is cached. A live cached policy always applies (RFC 8461 §5.1), and is renewed in the
    background when the record announces another id or half its ``max_age`` has passed; a
    failed fetch for the announced id leaves the domain without a policy until it is tried
    again; only a domain with nothing usable cached waits for a fetch."""
    live = cached if cached is not None and cached.live(now) else None
    if record is None:
        if live is None:
            return StsPlan(NO_POLICY)
        return StsPlan(
            live.decision(), why=f"no usable TXT record; cached policy id {live.record_id}"
        )
    if live is not None:
        if live.record_id != record.id:
            why = f"the TXT record announces id {record.id}; cached policy id {live.record_id} "
            return StsPlan(live.decision(), Refresh.BACKGROUND, why + "applies while it is fetched")
        if live.half_spent(now):
            why = f"policy id {live.record_id} past half its max_age; renewed in the background"
            return StsPlan(live.decision(), Refresh.BACKGROUND, why)
        return StsPlan(live.decision())
    if cached is not None and cached.failed and cached.record_id == record.id:
        refresh = Refresh.BACKGROUND if now >= cached.expires_at else Refresh.NONE
        why = (
            f"policy id {record.id} could not be fetched ({cached.fetch_error}: "
            f"{cached.fetch_detail}); sending as without a policy"
        )
        return StsPlan(cached.decision(), refresh, why)
    return StsPlan(None, Refresh.FIRST, f"no usable cached policy for id {record.id}; fetching it")

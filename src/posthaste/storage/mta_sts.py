"""The MTA-STS policy cache, the daily TLS session counts and the TLS reports produced."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update

from posthaste.core.ids import new_id
from posthaste.core.mta_sts import CachedPolicy
from posthaste.core.tls_reports import PolicyType, TlsCount, TlsResult
from posthaste.storage.database import Tx
from posthaste.storage.dialects import insert_for
from posthaste.storage.tables import mta_sts_policies, tls_report_counts, tls_reports

_POLICY_FIELDS = ("record_id", "policy", "fetched_at", "expires_at", "fetch_error", "fetch_detail")


@dataclass(frozen=True)
class StoredReport:
    id: str
    day: str
    policy_domain: str
    report: dict[str, Any]
    deliveries: list[dict[str, Any]]
    created_at: int


async def cached_policy(tx: Tx, domain: str) -> CachedPolicy | None:
    row = (
        await tx.conn.execute(select(mta_sts_policies).where(mta_sts_policies.c.domain == domain))
    ).first()
    if row is None:
        return None
    return CachedPolicy(row.domain, *(getattr(row, name) for name in _POLICY_FIELDS))


async def save_policy(tx: Tx, item: CachedPolicy) -> None:
    """Insert or replace the domain's cached policy (or failed fetch)."""
    row = {"domain": item.domain, **{name: getattr(item, name) for name in _POLICY_FIELDS}}
    query = (
        insert_for(tx, mta_sts_policies)
        .values(row)
        .on_conflict_do_update(
            index_elements=["domain"], set_={name: row[name] for name in _POLICY_FIELDS}
        )
    )
    await tx.conn.execute(query)


_COUNT_KEY = (
    "day",
    "policy_domain",
    "policy_type",
    "policy_id",
    "result",
    "mx_host",
    "receiving_ip",
    "sending_ip",
)


async def add_counts(tx: Tx, counts: Sequence[TlsCount]) -> None:
    """Add sessions to the day's counts, one statement per count (in key order, so that two
    workers never wait on each other's rows crosswise)."""
    for count in sorted(counts, key=_key):
        row: dict[str, object] = dict(zip(_COUNT_KEY, _key(count), strict=True))
        row.update(sessions=count.sessions, policy_text=count.policy_text)
        insert = insert_for(tx, tls_report_counts).values(row)
        query = insert.on_conflict_do_update(
            index_elements=list(_COUNT_KEY),
            set_={"sessions": tls_report_counts.c.sessions + insert.excluded.sessions},
        )
        await tx.conn.execute(query)


def _key(count: TlsCount) -> tuple[str, ...]:
    return (
        count.day,
        count.policy_domain,
        str(count.policy_type),
        count.policy_id,
        str(count.result),
        count.mx_host,
        count.receiving_ip,
        count.sending_ip,
    )


async def counted_days(tx: Tx, before: str) -> list[str]:
    """The days before ``before`` that have counts not yet reported, oldest first."""
    query = (
        select(tls_report_counts.c.day)
        .where(tls_report_counts.c.day < before)
        .distinct()
        .order_by(tls_report_counts.c.day)
    )
    return [row.day for row in await tx.conn.execute(query)]


async def counts_of_day(tx: Tx, day: str) -> list[TlsCount]:
    c = tls_report_counts.c
    query = select(tls_report_counts).where(c.day == day).order_by(*[c[k] for k in _COUNT_KEY])
    return [
        TlsCount(
            row.day,
            row.policy_domain,
            PolicyType(row.policy_type),
            row.policy_id,
            TlsResult(row.result),
            row.mx_host,
            row.receiving_ip,
            row.sessions,
            row.policy_text,
            row.sending_ip,
        )
        for row in await tx.conn.execute(query)
    ]


async def drop_day(tx: Tx, day: str) -> None:
    """Forget a day's counts once its reports are made."""
    await tx.conn.execute(delete(tls_report_counts).where(tls_report_counts.c.day == day))


async def save_report(
    tx: Tx,
    day: str,
    domain: str,
    report: dict[str, Any],
    deliveries: list[dict[str, Any]],
    now: int,
) -> str | None:
    """Store a produced report and answer its id; a second one for the same day and domain is
    ignored (None)."""
    row = {
        "id": new_id(),
        "day": day,
        "policy_domain": domain,
        "report": report,
        "deliveries": deliveries,
        "created_at": now,
    }
    query = insert_for(tx, tls_reports).values(row).on_conflict_do_nothing()
    stored = (await tx.conn.execute(query.returning(tls_reports.c.id))).first()
    return None if stored is None else str(stored.id)


async def get_report(tx: Tx, report_id: str, *, for_update: bool = False) -> StoredReport | None:
    """One stored report; ``for_update`` locks it (PostgreSQL) while its deliveries change."""
    query = select(tls_reports).where(tls_reports.c.id == report_id)
    row = (await tx.conn.execute(query.with_for_update() if for_update else query)).first()
    if row is None:
        return None
    return StoredReport(
        row.id, row.day, row.policy_domain, row.report, list(row.deliveries), row.created_at
    )


async def set_deliveries(tx: Tx, report_id: str, deliveries: list[dict[str, Any]]) -> None:
    """What became of each rua of a report, after another try."""
    query = update(tls_reports).where(tls_reports.c.id == report_id).values(deliveries=deliveries)
    await tx.conn.execute(query)


async def reported_domains(tx: Tx, day: str) -> set[str]:
    """The domains whose report for ``day`` is made."""
    query = select(tls_reports.c.policy_domain).where(tls_reports.c.day == day)
    return set((await tx.conn.execute(query)).scalars())


async def list_reports(tx: Tx, day: str | None = None, limit: int = 100) -> list[StoredReport]:
    """The newest first."""
    query = select(tls_reports).order_by(tls_reports.c.day.desc(), tls_reports.c.policy_domain)
    if day is not None:
        query = query.where(tls_reports.c.day == day)
    return [
        StoredReport(
            row.id, row.day, row.policy_domain, row.report, list(row.deliveries), row.created_at
        )
        for row in await tx.conn.execute(query.limit(limit))
    ]

"""Domains and claims: named queries, every one scoped by ``team_id`` except the two that decide
who owns a name across teams (``name_owner``) and the worker's lookup by id."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from posthaste.core.domains import DnsRecord, Domain, RecordStatus
from posthaste.errors import Conflict
from posthaste.storage.database import Tx
from posthaste.storage.dialects import insert_for
from posthaste.storage.keyset import read_page
from posthaste.storage.tables import domain_claims, domains

_COLUMNS = [c for c in domains.c if c.name != "dkim_private_key"]


def _query() -> Any:
    claimed = (
        select(domain_claims.c.domain_id)
        .where(domain_claims.c.domain_id == domains.c.id)
        .exists()
        .label("claimed")
    )
    return select(*_COLUMNS, claimed)


def _domain(row: Any) -> Domain:
    return Domain(
        id=row.id,
        team_id=row.team_id,
        name=row.name,
        region=row.region,
        status=RecordStatus(row.status),
        records=tuple(DnsRecord.from_dict(item) for item in row.records),
        dkim_selector=row.dkim_selector,
        key_provider=row.key_provider,
        open_tracking=bool(row.open_tracking),
        click_tracking=bool(row.click_tracking),
        tls=row.tls,
        receiving=bool(row.receiving),
        created_at=row.created_at,
        verified_at=row.verified_at,
        checking_since=row.checking_since,
        last_checked_at=row.last_checked_at,
        claim_token=row.claim_token,
        claimed=bool(row.claimed),
        pool=row.pool,
    )


def _records(records: Sequence[DnsRecord]) -> list[dict[str, Any]]:
    return [{k: v for k, v in record.as_dict().items() if k != "zone_value"} for record in records]


async def insert_domain(tx: Tx, domain: Domain, encrypted_key: str | None) -> None:
    """Store a new domain; the same name twice in one team is ``Conflict`` (also under races)."""
    row = {
        "id": domain.id,
        "team_id": domain.team_id,
        "name": domain.name,
        "region": domain.region,
        "status": domain.status.value,
        "records": _records(domain.records),
        "dkim_selector": domain.dkim_selector,
        "key_provider": domain.key_provider,
        "dkim_private_key": encrypted_key,
        "open_tracking": domain.open_tracking,
        "click_tracking": domain.click_tracking,
        "tls": domain.tls,
        "receiving": domain.receiving,
        "created_at": domain.created_at,
        "pool": domain.pool,
    }
    try:
        async with tx.conn.begin_nested():
            await tx.conn.execute(domains.insert().values(**row))
    except IntegrityError as exc:
        raise Conflict(
            f"This team already has the domain {domain.name!r}; see GET /domains."
        ) from exc


async def get_domain(
    tx: Tx, team_id: str, domain_id: str, *, for_update: bool = False
) -> Domain | None:
    query = _query().where(domains.c.team_id == team_id, domains.c.id == domain_id)
    if for_update:
        query = query.with_for_update(of=domains)
    row = (await tx.conn.execute(query)).first()
    return _domain(row) if row else None


async def get_domain_any_team(tx: Tx, domain_id: str, *, for_update: bool = False) -> Domain | None:
    """For the worker, which holds only the id from its job."""
    query = _query().where(domains.c.id == domain_id)
    if for_update:
        query = query.with_for_update(of=domains)
    row = (await tx.conn.execute(query)).first()
    return _domain(row) if row else None


async def find_by_name(tx: Tx, team_id: str, name: str) -> Domain | None:
    query = _query().where(domains.c.team_id == team_id, domains.c.name == name)
    row = (await tx.conn.execute(query)).first()
    return _domain(row) if row else None


async def stream_domains(tx: Tx, team_id: str) -> AsyncIterator[Domain]:
    """Every domain of the team, newest first, streamed (flat memory)."""
    query = (
        _query()
        .where(domains.c.team_id == team_id)
        .order_by(domains.c.created_at.desc(), domains.c.id.desc())
    )
    result = await tx.conn.stream(query.execution_options(yield_per=500))
    async for row in result:
        yield _domain(row)


async def page_domains(
    tx: Tx, team_id: str, limit: int, anchor: str | None, *, backwards: bool
) -> tuple[list[Domain], bool] | None:
    """A page of the team's domains (newest first) after the domain ``anchor`` (before it when
    ``backwards``), and whether more lie beyond; None when the team has no such domain."""
    return await read_page(
        tx,
        domains,
        _query(),
        _domain,
        team_id=team_id,
        limit=limit,
        anchor=anchor,
        newest_first=True,
        backwards=backwards,
    )


async def private_key_of(tx: Tx, team_id: str, name: str) -> tuple[Domain, str | None] | None:
    """The team's domain of that name with its encrypted private key."""
    query = _query().add_columns(domains.c.dkim_private_key)
    query = query.where(domains.c.team_id == team_id, domains.c.name == name)
    row = (await tx.conn.execute(query)).first()
    return (_domain(row), row.dkim_private_key) if row else None


async def update_domain(tx: Tx, domain: Domain) -> None:
    """Write the changeable state of a domain (settings, records, status, clocks)."""
    await tx.conn.execute(
        update(domains)
        .where(domains.c.id == domain.id, domains.c.team_id == domain.team_id)
        .values(
            status=domain.status.value,
            records=_records(domain.records),
            open_tracking=domain.open_tracking,
            click_tracking=domain.click_tracking,
            tls=domain.tls,
            receiving=domain.receiving,
            verified_at=domain.verified_at,
            checking_since=domain.checking_since,
            last_checked_at=domain.last_checked_at,
            claim_token=domain.claim_token,
            pool=domain.pool,
        )
    )


async def delete_domain(tx: Tx, team_id: str, domain_id: str) -> bool:
    await tx.conn.execute(delete(domain_claims).where(domain_claims.c.domain_id == domain_id))
    query = delete(domains).where(domains.c.team_id == team_id, domains.c.id == domain_id)
    return bool((await tx.conn.execute(query)).rowcount)


async def name_owner(tx: Tx, name: str) -> str | None:
    """The team that owns ``name``: the confirmed claimant, else the earliest verifier."""
    claim = select(domain_claims.c.team_id).where(domain_claims.c.name == name)
    claimant = (await tx.conn.execute(claim)).scalar()
    if claimant is not None:
        return str(claimant)
    first = (
        select(domains.c.team_id)
        .where(domains.c.name == name, domains.c.verified_at.is_not(None))
        .order_by(domains.c.verified_at, domains.c.id)
        .limit(1)
    )
    owner = (await tx.conn.execute(first)).scalar()
    return None if owner is None else str(owner)


async def claimant_domain(tx: Tx, name: str) -> str | None:
    """The id of the domain whose team holds the confirmed claim on ``name``."""
    query = select(domain_claims.c.domain_id).where(domain_claims.c.name == name)
    domain_id = (await tx.conn.execute(query)).scalar()
    return None if domain_id is None else str(domain_id)


async def set_claim(tx: Tx, domain: Domain, now: int) -> None:
    """Give the confirmed claim on the domain's name to its team, taking it from any holder."""
    values = {"team_id": domain.team_id, "domain_id": domain.id, "claimed_at": now}
    query = insert_for(tx, domain_claims).values(name=domain.name, **values)
    await tx.conn.execute(query.on_conflict_do_update(index_elements=["name"], set_=values))


async def release_claim(tx: Tx, domain: Domain) -> bool:
    query = delete(domain_claims).where(
        domain_claims.c.domain_id == domain.id, domain_claims.c.team_id == domain.team_id
    )
    return bool((await tx.conn.execute(query)).rowcount)

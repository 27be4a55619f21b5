"""The source addresses of IP pools: one row per address, shared by the fleet.

The hot statement is ``take``: one ``UPDATE … RETURNING`` that counts messages against the
address's day, starting the count over on a new UTC day, only while the count stays within the
day's cap. The same text on PostgreSQL and SQLite (``CASE``, integers only).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import BindParameter, Integer, bindparam, case, select, update

from posthaste.storage.database import Tx
from posthaste.storage.tables import pool_addresses

NO_CAP = 2**31 - 1


@dataclass(frozen=True)
class AddressCount:
    """A source address as stored: its warm-up's day 0 and its latest day's count."""

    address: str
    first_day: int
    day: int
    sent: int

    def sent_on(self, day: int) -> int:
        return self.sent if self.day == day else 0


_c = pool_addresses.c


def _int(name: str) -> BindParameter[int]:
    return bindparam(name, type_=Integer)


_TODAYS = case((_c.day == _int("today"), _c.sent), else_=0)
_TAKE = (
    update(pool_addresses)
    .where(_c.address == bindparam("source"), _TODAYS + _int("count") <= _int("cap"))
    .values(sent=_TODAYS + _int("count"), day=_int("today"), updated_at=bindparam("now"))
    .returning(_c.sent)
)


async def take(
    tx: Tx, address: str, today: int, count: int, cap: int | None, now: int
) -> int | None:
    """Count ``count`` messages against ``address`` today; its count after, or None when that
    would pass ``cap`` (None: no cap) or the address has no row."""
    params = {
        "source": address,
        "today": today,
        "count": count,
        "cap": NO_CAP if cap is None else cap,
        "now": now,
    }
    row = (await tx.conn.execute(_TAKE, params)).first()
    return None if row is None else int(row.sent)


async def ensure(tx: Tx, address: str, today: int, now: int) -> AddressCount:
    """The address's row, made with ``today`` as its warm-up's day 0 unless it exists."""
    row = {"address": address, "first_day": today, "day": today, "sent": 0, "updated_at": now}
    insert = tx.dialect.insert(pool_addresses).values(row)
    await tx.conn.execute(insert.on_conflict_do_nothing(index_elements=["address"]))
    found = (await tx.conn.execute(select(pool_addresses).where(_c.address == address))).one()
    return _count(found)


async def list_all(tx: Tx) -> dict[str, AddressCount]:
    rows = (await tx.conn.execute(select(pool_addresses))).all()
    return {row.address: _count(row) for row in rows}


def _count(row: object) -> AddressCount:
    return AddressCount(
        address=row.address,  # type: ignore[attr-defined]
        first_day=row.first_day,  # type: ignore[attr-defined]
        day=row.day,  # type: ignore[attr-defined]
        sent=row.sent,  # type: ignore[attr-defined]
    )

"""The database handle: engine, transactions, and cross-process wake-ups.

What differs between SQLite and PostgreSQL is its dialect's (``storage/dialects.py``), handed to
it by ``bootstrap``: the engine, the write lock (SQLite's writers queue in the process), read
units, and wake-ups. Listeners of a channel wake after commit: in this process at once, in the
others through ``NOTIFY``, heard on one ``LISTEN`` connection per process: sent just after
commit, gathered for a few milliseconds, on that connection (``dialects.Notifier``), or for the
caches' channels (``IN_TRANSACTION``) inside the transaction, delivered by PostgreSQL at commit.
On SQLite, other processes on the same file hear them through ``WakeFiles``
(``storage/dialects.py``), within 50 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

import orjson
from sqlalchemy import text
from sqlalchemy.engine import Dialect as SqlDialect
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from posthaste.errors import ServiceUnavailable
from posthaste.storage.dialects import Dialect, Forms, Listening, run_on_connection_thread
from posthaste.storage.engine import AsyncConnection, AsyncEngine

# asyncpg is imported by SQLAlchemy when a PostgreSQL engine connects, and by the PostgreSQL
# paths here when they run: a process on SQLite never loads it (~2 MiB resident each).
if TYPE_CHECKING:
    import asyncpg

log = logging.getLogger(__name__)

T = TypeVar("T")
Listener = Callable[[], None]
JOBS_CHANNEL = "posthaste_jobs"
KEYS_CHANNEL = "posthaste_keys"  # a key was revoked or a team's limits changed
EVENTS_CHANNEL = "posthaste_events"  # an event was recorded (the live stream)
WEBHOOKS_CHANNEL = "posthaste_webhooks"  # a webhook delivery fell due (the dispatcher)
DOMAINS_CHANNEL = "posthaste_domains"  # a domain or a claim was added, changed or removed
# On PostgreSQL, the channels NOTIFYed inside the transaction, delivered by its commit: the
# caches', so no process keeps a revoked key or a removed domain because the one that committed
# died before telling. Rare writes. The others (jobs, events, webhook deliveries: nearly every
# commit) are told after commit (``dialects.Notifier``): a NOTIFY in a transaction serialises
# its commit, WAL flush included, with every other notifying commit of the cluster.
IN_TRANSACTION = frozenset({KEYS_CHANNEL, DOMAINS_CHANNEL})
# Every channel a process may need; LISTENed from the start.
CHANNELS = (JOBS_CHANNEL, KEYS_CHANNEL, EVENTS_CHANNEL, WEBHOOKS_CHANNEL, DOMAINS_CHANNEL)


class Tx:
    """One open transaction; repositories take it, services open it.

    ``dialect`` is the database's (``storage/dialects.py``): a repository asks it for whatever
    is written differently on SQLite and PostgreSQL. ``driver`` is set in an ``autocommit()``
    unit on PostgreSQL: the asyncpg connection under ``conn``, for the send path's statements
    that run for every group (SQLAlchemy's own work per statement, ~50-100 µs, is more than
    they cost to build); each commits by itself. ``generic``, beside it in that unit: a second
    autocommit connection on generic plans, for the one statement that stores a group
    (``fetch_pg(..., generic=True)``; see ``Database.autocommit``)."""

    def __init__(
        self,
        conn: AsyncConnection,
        dialect: Dialect,
        driver: asyncpg.Connection | None = None,
        generic: asyncpg.Connection | None = None,
    ) -> None:
        self.conn = conn
        self.dialect = dialect
        self.driver = driver
        self.generic = generic
        self.channels: set[str] = set()
        self._sent: set[str] = set()
        self._adapted: Any = None  # SQLAlchemy's asyncpg adapter under ``conn`` (``_began``)

    def notify(self, channel: str, *, sent: bool = False) -> None:
        """Wake listeners of ``channel`` once this transaction commits. ``sent``: a statement of
        the transaction has called ``pg_notify`` for it already (PostgreSQL)."""
        self.channels.add(channel)
        if sent:
            self._sent.add(channel)

    def withdraw(self, owed: set[str]) -> None:
        """Owe only the wake-ups of ``owed`` (those owed before a write that then wrote
        nothing, and sent none: ``emails.store_rows`` with a listed recipient)."""
        self.channels &= owed

    async def fetch_pg(self, sql: str, *params: Any, generic: bool = False) -> list[Any]:
        """PostgreSQL: the rows of ``sql`` (asyncpg's ``$n`` parameters, asyncpg's records),
        on the asyncpg connection under ``conn``: ``driver`` in an autocommit unit (``generic``
        there: on the unit's connection on generic plans, for a statement whose plan does not
        depend on its values); else the same connection with the unit's transaction begun
        first, as SQLAlchemy begins it.

        Not through SQLAlchemy's ``exec_driver_sql``: its execution context, cursor and result
        cost ~120 µs of CPU per statement against asyncpg's own ~30 µs (bench/README.md,
        Delivery, 2026-11-28), and the delivery worker runs a dozen statements per lone email.
        Errors come back as SQLAlchemy raises them (``DBAPIError`` and its subclasses)."""
        if generic and self.generic is not None:
            return list(await self.generic.fetch(sql, *params))
        if self.driver is not None:
            return list(await self.driver.fetch(sql, *params))
        adapted = await self._began()
        try:
            return list(await adapted.driver_connection.fetch(sql, *params))
        except Exception as exc:
            raise await self._as_sqlalchemy(adapted, exc, sql, params) from exc

    async def rows(self, statement: Executable, params: Mapping[str, Any]) -> list[Any]:
        """The rows of a kept Core statement (built once and kept by its caller, e.g. with
        ``functools.cache``): on PostgreSQL compiled once and run through ``fetch_pg``, rows
        read by position (asyncpg's records); elsewhere through ``conn``. Bind parameters are
        plain values (ids, numbers, lists): no bind processing is applied."""
        if self.conn.dialect.name != "postgresql":
            return list((await self.conn.execute(statement, params)).all())
        sql, names, fixed = _compiled(self.conn.dialect, statement)
        values = [params[name] if name in params else fixed[name] for name in names]
        return await self.fetch_pg(sql, *values)

    async def commit(self) -> None:
        """PostgreSQL: commit what the unit began (``Database._lazy_unit``): through SQLAlchemy
        when a statement went through it (it knows of the transaction), else on the adapter."""
        if self.conn.in_transaction():
            await self.conn.commit()
            return
        adapted = self._adapted
        if adapted is None or adapted._transaction is None:
            return  # nothing was run: nothing to commit
        try:
            await adapted._call_and_discard(adapted._transaction.commit)
        except Exception as exc:
            raise await self._as_sqlalchemy(adapted, exc, "COMMIT", ()) from exc

    async def _began(self) -> Any:
        """SQLAlchemy's asyncpg adapter under ``conn``, its transaction begun (it begins one
        lazily, at the first statement sent through it: one sent to the driver before that
        would commit by itself). SQLAlchemy commits or rolls it back as usual."""
        if self._adapted is None:
            raw = await self.conn.get_raw_connection()
            self._adapted = raw.dbapi_connection
        adapted = self._adapted
        if adapted._transaction is None:
            async with adapted._execute_mutex:
                if adapted._transaction is None:
                    await adapted._start_transaction()
        return adapted

    async def _as_sqlalchemy(
        self, adapted: Any, exc: Exception, sql: str, params: tuple[Any, ...]
    ) -> Exception:
        """``exc`` of asyncpg as SQLAlchemy would raise it from the same statement: the
        adapter's translation (``IntegrityError`` and the rest) wrapped in ``DBAPIError``; a
        connection lost meanwhile is invalidated, not handed back to the pool."""
        try:
            adapted._handle_exception(exc)
        except Exception as translated:
            dialect = self.conn.dialect
            lost = dialect.is_disconnect(cast(Any, translated), None, None)
            if lost and not self.conn.invalidated:
                with contextlib.suppress(Exception):
                    await self.conn.invalidate()
            return DBAPIError.instance(
                sql,
                params,
                translated,
                dialect.loaded_dbapi.Error,
                dialect=dialect,
                connection_invalidated=lost,
            )
        return exc  # pragma: no cover - the adapter always raises

    async def run_sqlite(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """SQLite: ``work(connection)`` in the unit's transaction, on the connection's own
        thread, in one hop. Through SQLAlchemy, every statement costs three hops to aiosqlite's
        thread and back (a cursor, the statement, closing the cursor), each a wake-up of the
        thread and of the event loop: a group of statements sent as one costs one. Errors are
        SQLAlchemy's, as a statement sent through ``conn`` raises them."""
        if not self.conn.in_transaction():
            await self.conn.begin()
        raw = await self.conn.get_raw_connection()
        return await run_on_connection_thread(raw.driver_connection, work)

    def unsent(self) -> list[str]:
        """PostgreSQL: the channels to NOTIFY inside the transaction (``IN_TRANSACTION``) that
        no statement has notified yet, in a stable order."""
        return sorted((self.channels & IN_TRANSACTION) - self._sent)

    def after_commit(self) -> set[str]:
        """The channels to tell the other processes of once committed: those not NOTIFYed inside
        the transaction (on SQLite, all of them)."""
        return self.channels - self._sent


Unit = Callable[[], contextlib.AbstractAsyncContextManager[Tx]]


class Database:
    def __init__(self, url: str, dialect: Dialect, *, pool_size: int = 20) -> None:
        self.url = url
        self.dialect = dialect
        # orjson for JSON columns: several times faster than ``json`` on every insert and read.
        self.engine: AsyncEngine = dialect.create_engine(
            url, pool_size, json_serializer=_dump_json, json_deserializer=orjson.loads
        )
        self._write_lock = dialect.write_lock(url)
        self._announcer = dialect.announcer(url)
        # PostgreSQL runs an autocommit unit's statements each by itself on a connection kept
        # between units; SQLite has no such thing (a write takes the write lock either way).
        self._transaction: Unit = dialect.pick(
            Forms(postgresql=self._lazy_unit, sqlite=self._begun_unit)
        )
        autocommit: Forms[Unit] = Forms(postgresql=self._kept_unit, sqlite=self._begun_unit)
        self._autocommit = dialect.pick(autocommit)
        self._held: tuple[AsyncConnection, asyncpg.Connection] | None = None
        self._held_generic: tuple[AsyncConnection, asyncpg.Connection] | None = None
        self._held_lock = asyncio.Lock()
        self._listeners: dict[str, list[Listener]] = defaultdict(list)
        self._listen_conn: Listening | None = None
        self._reconnect_task: asyncio.Task[None] | None = None
        self._closing = False

    def transaction(self) -> contextlib.AbstractAsyncContextManager[Tx]:
        """A write transaction; listeners named through ``tx.notify`` wake after commit."""
        return self._transaction()

    @contextlib.asynccontextmanager
    async def _begun_unit(self) -> AsyncIterator[Tx]:
        """SQLite's transaction: SQLAlchemy's ``begin()`` (its ``BEGIN IMMEDIATE``)."""
        async with self._write_lock, _translate_db_errors(), self.engine.begin() as conn:
            tx = Tx(conn, self.dialect)
            yield tx
            await self.dialect.send_notifications(tx)
        self._fire_all(tx)

    @contextlib.asynccontextmanager
    async def _lazy_unit(self) -> AsyncIterator[Tx]:
        """PostgreSQL's transaction: begun by the unit's first statement (SQLAlchemy's adapter
        begins one then, whether the statement goes through SQLAlchemy or to asyncpg itself,
        ``Tx.fetch_pg``) and committed at the end (``Tx.commit``). Not ``engine.begin()``: its
        own begin and commit cost ~50-80 µs of CPU more per unit than the adapter's
        (bench/README.md, Delivery, 2026-11-28), and the delivery worker runs two units per lone
        email, and every worker process one more (an empty claim) per wake-up. An error in the
        unit rolls the transaction back as the connection goes back to the pool (its reset)."""
        async with _translate_db_errors(), self.engine.connect() as conn:
            tx = Tx(conn, self.dialect)
            yield tx
            await self.dialect.send_notifications(tx)
            await tx.commit()
        self._fire_all(tx)

    def autocommit(self) -> contextlib.AbstractAsyncContextManager[Tx]:
        """Work whose one write is a single statement (reads around it are fine): on PostgreSQL
        every statement commits by itself, which spares the BEGIN and COMMIT round trips of
        ``transaction()``; listeners wake as after a transaction. On SQLite, a transaction (a
        write takes the write lock either way).

        On PostgreSQL the connection is kept from one unit to the next (the send path's group
        commit runs one unit at a time): checking a connection out of SQLAlchemy's pool, setting
        its isolation level and handing it back cost ~0.2 ms of CPU per unit, as much as storing
        a group of one. An autocommit connection holds no transaction between units. One lost
        during a unit (closed, invalidated, cancelled mid-statement) is closed and the unit's
        error is a 503; one found closed is replaced before use. A unit that finds the kept
        connection in use takes one from the pool as before.

        Beside it a second kept connection, on generic plans (``plan_cache_mode = auto``), runs
        the one statement that stores a group (``Tx.fetch_pg(..., generic=True)``): its rows are
        inserted whatever the values, so planning it again at every send (0.3-0.4 ms, every
        session forcing custom plans: ``dialects._SESSION_SETTINGS``) bought nothing; the unit's
        lookups stay on custom plans. Each statement commits by itself, so which of the two runs
        it changes nothing else. Either lost, both are dropped."""
        return self._autocommit()

    @contextlib.asynccontextmanager
    async def _kept_unit(self) -> AsyncIterator[Tx]:
        """PostgreSQL's autocommit unit (see ``autocommit``)."""
        if self._held_lock.locked():
            async with _translate_db_errors(), self.engine.connect() as conn:
                tx = await self._autocommit_tx(conn)
                yield tx
                await self.dialect.send_notifications(tx)
            self._fire_all(tx)
            return
        async with self._held_lock, _translate_db_errors():
            tx = await self._held_tx()
            try:
                yield tx
                await self.dialect.send_notifications(tx)
            except BaseException as exc:
                lost = tx.conn.invalidated or _gone(tx.driver) or _gone(tx.generic)  # both kept
                if lost or not isinstance(exc, Exception):
                    await self._drop_held()
                else:
                    await self._end_unit(tx.conn)
                if lost and isinstance(exc, Exception) and not isinstance(exc, ServiceUnavailable):
                    raise ServiceUnavailable("The database connection was lost; retry.") from exc
                raise
            await self._end_unit(tx.conn)
        self._fire_all(tx)

    async def _held_tx(self) -> Tx:
        if (self._held is not None and _gone(self._held[1])) or (
            self._held_generic is not None and _gone(self._held_generic[1])
        ):  # lost since the last unit
            await self._drop_held()
        if self._held is None:
            self._held = await self._kept_connection(generic=False)
        if self._held_generic is None:
            self._held_generic = await self._kept_connection(generic=True)
        (conn, driver), (_, generic) = self._held, self._held_generic
        return Tx(conn, self.dialect, driver, generic)

    async def _kept_connection(
        self, *, generic: bool
    ) -> tuple[AsyncConnection, asyncpg.Connection]:
        conn = await self.engine.connect()
        driver = None
        try:
            tx = await self._autocommit_tx(conn)
            driver = tx.driver
            assert driver is not None
            if generic:  # dropped by invalidating it: the setting never goes back to the pool
                await driver.execute("SET plan_cache_mode = auto")
        except BaseException as exc:
            await _discard(conn)
            if driver is not None and driver.is_closed() and isinstance(exc, Exception):
                # asyncpg's own error (the pool handed out a connection the server had ended)
                raise ServiceUnavailable("The database connection was lost; retry.") from exc
            raise
        return conn, driver

    async def _autocommit_tx(self, conn: AsyncConnection) -> Tx:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        raw = await conn.get_raw_connection()
        return Tx(conn, self.dialect, raw.driver_connection)

    async def _end_unit(self, conn: AsyncConnection) -> None:
        """Close what SQLAlchemy began for the unit's own statements (with AUTOCOMMIT, only its
        bookkeeping: each statement is committed already), so the next unit starts clean."""
        if conn.in_transaction():
            try:
                await conn.rollback()
            except Exception:
                await self._drop_held()

    async def _drop_held(self) -> None:
        kept = (self._held, self._held_generic)
        self._held = self._held_generic = None
        for held in kept:
            if held is not None:
                await _discard(held[0])

    def _fire_all(self, tx: Tx) -> None:
        if tx.channels:
            after = tx.after_commit()
            if after:
                self._announcer.announce(after)
        # This process hears at once, without waiting for its own NOTIFY to come back (which
        # fires the listeners a second time; they are idempotent: wake up, forget a key).
        for channel in tx.channels:
            self._fire(channel)

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[Tx]:
        """A read-only unit of work (no write lock on SQLite)."""
        async with _translate_db_errors(), self.engine.connect() as conn:
            yield Tx(await self.dialect.reading(conn), self.dialect)

    @contextlib.asynccontextmanager
    async def driver(self) -> AsyncIterator[asyncpg.Connection]:
        """PostgreSQL only: the asyncpg connection under a pooled one, for the few statements
        that run so often that SQLAlchemy's own cost per statement shows (the webhook
        dispatcher's claim and group commit). Each statement commits by itself (autocommit)."""
        async with _translate_db_errors(), self.engine.connect() as conn:
            raw = await conn.get_raw_connection()
            import asyncpg

            if not isinstance(raw.driver_connection, asyncpg.Connection):
                raise RuntimeError("Database.driver() is for PostgreSQL only")
            yield raw.driver_connection

    def wake(self, channel: str) -> None:
        """Wake ``channel``'s listeners after a write that committed outside a unit (a
        ``driver()`` statement): in this process at once, in the others as after a unit."""
        self._announcer.announce((channel,))
        self._fire(channel)

    def add_listener(self, channel: str, callback: Listener) -> None:
        self._listeners[channel].append(callback)

    def _fire(self, channel: str) -> None:
        for callback in self._listeners.get(channel, ()):
            callback()

    async def start_listening(self) -> None:
        """Hear other processes' wake-ups on every channel, where the dialect has them
        (PostgreSQL's LISTEN); reconnects by itself if the link drops."""
        if self._listen_conn is not None:
            return
        channels = sorted({*CHANNELS, *self._listeners})
        self._listen_conn = await self.dialect.listen(
            self.url, channels, self._fire, self._on_listen_lost
        )
        self._announcer.through(self._listen_conn)

    def _on_listen_lost(self) -> None:
        if self._closing:
            return
        self._listen_conn = None
        self._announcer.through(None)
        self._reconnect_task = asyncio.get_running_loop().create_task(self._relisten())

    async def _relisten(self) -> None:
        delay = 0.5
        while not self._closing and self._listen_conn is None:
            try:
                await self.start_listening()
            except _postgres_errors(OSError):
                log.warning("LISTEN connection lost; retrying in %.1fs", delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30)
                continue
            for channel in list(self._listeners):
                self._fire(channel)  # catch up on anything missed while disconnected

    async def ping(self) -> bool:
        try:
            async with self.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
            return True
        except _postgres_errors(OSError, DBAPIError):
            return False

    async def close(self) -> None:
        await self._announcer.close()  # what this process owes the others is told first
        self._closing = True
        async with self._held_lock:
            await self._drop_held()
        if self._listen_conn is not None:
            await self._listen_conn.close()
            self._listen_conn = None
        await self.engine.dispose()


_COMPILED_MAX = 512
_COMPILED: dict[tuple[int, int], tuple[Any, Any, tuple[str, tuple[str, ...], dict[str, Any]]]] = {}


def _compiled(
    dialect: SqlDialect, statement: Executable
) -> tuple[str, tuple[str, ...], dict[str, Any]]:
    """``statement``'s text for asyncpg (``$n``), its parameters' names in order, and the
    values fixed in it (literals): compiled once per kept statement and dialect."""
    key = (id(dialect), id(statement))
    found = _COMPILED.get(key)
    if found is None:
        if len(_COMPILED) >= _COMPILED_MAX:  # statements not kept after all: never unbounded
            _COMPILED.clear()
        compiled = cast(SQLCompiler, cast(ClauseElement, statement).compile(dialect=dialect))
        names = tuple(compiled.positiontup or ())
        fixed = dict(compiled.construct_params(_check=False) or {})
        # The objects are kept with their ids: an id is never reused while they live.
        found = _COMPILED[key] = (dialect, statement, (compiled.string, names, fixed))
    return found[2]


def _dump_json(value: Any) -> str:
    return orjson.dumps(value).decode()


@contextlib.asynccontextmanager
async def _translate_db_errors() -> AsyncIterator[None]:
    """A database that cannot be reached is 503, never a stack trace."""
    try:
        yield
    except _unreachable() as exc:
        raise ServiceUnavailable("The database is unreachable; retry shortly.") from exc
    except DBAPIError as exc:
        if _is_unavailable(exc):
            raise ServiceUnavailable("The database is unreachable; retry shortly.") from exc
        raise


def _postgres_errors(*others: type[Exception]) -> tuple[type[Exception], ...]:
    """``others`` and asyncpg's own error, once asyncpg is loaded (before, nothing can have
    raised it)."""
    asyncpg = sys.modules.get("asyncpg")
    return others if asyncpg is None else (*others, asyncpg.PostgresError)


def _unreachable() -> tuple[type[Exception], ...]:
    """What a lost or refused connection raises, through SQLAlchemy or (``Tx.driver``)
    asyncpg itself; asyncpg's errors once asyncpg is loaded (on PostgreSQL only)."""
    asyncpg = sys.modules.get("asyncpg")
    if asyncpg is None:
        return (OSError, ConnectionError)
    return (
        OSError,
        ConnectionError,
        asyncpg.CannotConnectNowError,
        asyncpg.PostgresConnectionError,  # the connection is gone (class 08)
        asyncpg.exceptions.AdminShutdownError,  # the server ended it (57P01)
        asyncpg.exceptions.CrashShutdownError,  # ... after another backend crashed (57P02)
        asyncpg.exceptions.TooManyConnectionsError,  # 53300
    )


async def _discard(conn: AsyncConnection) -> None:
    """Close a kept connection for good (invalidated: never back to the pool, whatever its
    session settings), whatever state it is in."""
    with contextlib.suppress(Exception):
        await conn.invalidate()
    with contextlib.suppress(Exception):
        await conn.close()


def _gone(driver: asyncpg.Connection | None) -> bool:
    return driver is None or driver.is_closed()


def _is_unavailable(exc: DBAPIError) -> bool:
    """A failure of the database itself rather than of the statement: the connection was lost
    or refused (SQLAlchemy wraps asyncpg's error, e.g. 57P03 "the database system is starting
    up" while a connection is made), or SQLite cannot write now (locked, disk full, I/O)."""
    if exc.connection_invalidated:
        return True
    original = exc.orig
    cause = original.__cause__ if original is not None else None
    unreachable = _unreachable()
    if isinstance(original, unreachable) or isinstance(cause, unreachable):
        return True
    if not isinstance(exc, OperationalError):
        return False
    message = str(original).lower()
    return any(marker in message for marker in _SQLITE_UNAVAILABLE)


_SQLITE_UNAVAILABLE = (
    "connect",
    "unable to open",
    "database is locked",
    "disk is full",
    "disk i/o",
)

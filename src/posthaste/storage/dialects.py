"""The one object that knows which database this is: SQLite (one machine) or PostgreSQL (a fleet).

``dialect_for(url)`` picks it from the database URL, once, in ``bootstrap``; ``Database`` is
handed it, and every unit of work carries it as ``tx.dialect``. Everything that differs between
the two is asked of it, so no other module tests which database it runs on:

- ``Database``'s engine (pool, SQLite's pragmas and ``BEGIN IMMEDIATE``), its write lock, its
  read units, its wake-ups (``NOTIFY`` and ``LISTEN``, or in-process and ``WakeFiles``), the
  migration lock;
- what the repositories write differently: ``insert`` (``ON CONFLICT``), ``among`` (``IN``);
- ``pick(forms)``: a query with a PostgreSQL and a SQLite form keeps both side by side under one
  name in its repository, ``Forms(postgresql=…, sqlite=…)`` (``suppressions._LISTED``,
  ``bulk._INSERT``, ``webhook_queue._CLAIM_DUE``…); the dialect hands back its own, a call
  that costs what the ``is_postgres`` test it replaces did. The forms are built at import.

Alembic's migrations (``migrations/versions``) are frozen history and keep their own
``op.get_bind().dialect.name`` tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from sqlalchemy import ARRAY, ColumnElement, Table, any_, bindparam, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import ConnectionPoolEntry, PoolResetState
from sqlalchemy.util import await_only

from posthaste.storage.engine import AsyncConnection, AsyncEngine, create_async_engine

if TYPE_CHECKING:
    import asyncpg

    from posthaste.storage.database import Tx

T = TypeVar("T")
log = logging.getLogger(__name__)
# Called with the channel of each NOTIFY heard; called with nothing when the link is lost.
Heard = Callable[[str], None]
Lost = Callable[[], None]
# How long a process gathers the wake-ups of its commits before it NOTIFYs them (``Notifier``):
# the other processes hear a commit that much later at most, and each process sends at most
# 1 / (this + a round trip) NOTIFYs a second, whatever its commit rate.
NOTIFY_GATHER_SECONDS = 0.005
# How often a SQLite process looks whether another has woken a channel (``WakeFiles``).
SQLITE_WATCH_SECONDS = 0.05
_MIGRATIONS_LOCK = 7031996  # the advisory lock ``posthaste migrate`` holds on PostgreSQL

# Every statement is planned for the values it runs with. asyncpg prepares each statement once
# per connection, and PostgreSQL switches a prepared statement to a generic plan after five runs
# and keeps it for the connection's life: a plan made while a table is small (a new install, or
# a queue drained empty) stays a sequential scan as the table grows, until an ANALYZE happens to
# invalidate it. Measured on the delivery path (bench/README.md, issue #18): the recipients'
# lookups by ``email_id = ANY(...)`` went from 18-34 ms a batch on a cached sequential scan to an
# index scan, for a fraction of a millisecond of planning each. (The statement that stores a
# group runs on generic plans all the same, on a connection of its own: ``Database.autocommit``.)
_SESSION_SETTINGS = {"plan_cache_mode": "force_custom_plan"}


@dataclass(frozen=True)
class Forms(Generic[T]):
    """A query's (or a step's) PostgreSQL and SQLite forms under one name; the dialect of the
    unit of work takes its own (``Dialect.pick``)."""

    postgresql: T
    sqlite: T


class Listening(Protocol):
    """What ``Dialect.listen`` hands back: closed when the database closes."""

    async def close(self) -> None: ...


class Announcer(Protocol):
    """Tells the other processes, once a transaction has committed, the channels it woke that
    it did not NOTIFY inside the transaction; closed with the database, once told."""

    def announce(self, channels: Collection[str]) -> None: ...

    def through(self, listening: Listening | None) -> None:
        """The process's ``listen`` connection, now open (or lost: None)."""
        ...

    async def close(self) -> None: ...


class Dialect(Protocol):
    """What differs between SQLite and PostgreSQL, and nothing else."""

    def __hash__(self) -> int:
        """Dialects are values (frozen): statements built for one are kept by it."""
        ...

    def pick(self, forms: Forms[T]) -> T:
        """This dialect's form of ``forms``."""
        ...

    def insert(self, table: Table) -> Any:
        """The dialect's INSERT, which offers ``on_conflict_do_nothing`` / ``_do_update``."""
        ...

    def among(self, column: Any, values: Collection[Any]) -> ColumnElement[bool]:
        """``column`` is one of ``values``."""
        ...

    def among_param(self, column: Any, name: str) -> ColumnElement[bool]:
        """``column`` is one of the values given as parameter ``name`` when the statement runs
        (a list): ``among`` for a statement built once per dialect and kept (a hot path's
        read: building a statement and its cache key can cost more than running it)."""
        ...

    def prepare(self, data_dir: Path) -> None:
        """Make what the database needs on this machine before it is first opened."""
        ...

    def create_engine(self, url: str, pool_size: int, **options: Any) -> AsyncEngine:
        """SQLAlchemy's async engine for ``url`` (a ``+aiosqlite`` or ``+asyncpg`` URL)."""
        ...

    def write_lock(self, url: str) -> contextlib.AbstractAsyncContextManager[Any]:
        """What a write transaction holds while it runs."""
        ...

    async def reading(self, conn: AsyncConnection) -> AsyncConnection:
        """``conn`` made ready for a read-only unit."""
        ...

    async def send_notifications(self, tx: Tx) -> None:
        """Tell other processes, at commit, about the channels ``tx`` owes inside the
        transaction (``Tx.unsent``), and mark them sent."""
        ...

    def announcer(self, url: str) -> Announcer:
        """What tells other processes, after a commit, the channels it woke that
        ``send_notifications`` did not, inside the transaction."""
        ...

    async def listen(
        self, url: str, channels: Collection[str], heard: Heard, lost: Lost
    ) -> Listening | None:
        """What hears other processes' wake-ups, or None where none can come."""
        ...

    def migrating(self, conn: AsyncConnection) -> contextlib.AbstractAsyncContextManager[None]:
        """Held while migrations run, so processes starting together migrate one at a time."""
        ...

    @property
    def alters_by_copy(self) -> bool:
        """Alembic must rebuild a table to alter it (its "batch" mode): SQLite's ALTER TABLE."""
        ...


def dialect_for(url: str) -> Dialect:
    """The dialect of a database URL (``sqlite:///…``, ``postgresql://…``, with or without the
    async driver): the one place where the choice is made."""
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        return SqliteDialect()
    if backend in ("postgresql", "postgres"):
        return PostgresDialect()
    raise ValueError(f"no dialect for {backend!r} databases: expected sqlite or postgresql")


def insert_for(tx: Tx, table: Table) -> Any:
    """The unit's dialect's INSERT into ``table`` (``ON CONFLICT`` clauses differ)."""
    return tx.dialect.insert(table)


def among(tx: Tx, column: Any, values: Collection[Any]) -> ColumnElement[bool]:
    """``column`` is one of ``values``, in the unit's dialect's best form."""
    return tx.dialect.among(column, values)


@dataclass(frozen=True)
class SqliteDialect:
    """One machine: a file in WAL mode; writers queue on a lock in the process, then on one
    beside the file across processes (``WritersLock``); wake-ups are the in-process callbacks
    ``Database`` fires after commit, and, for the other processes on the file (``posthaste
    serve`` supervises several), a ``CommitWatch``."""

    alters_by_copy = True

    def pick(self, forms: Forms[T]) -> T:
        return forms.sqlite

    def insert(self, table: Table) -> Any:
        return sqlite.insert(table)

    def among(self, column: Any, values: Collection[Any]) -> ColumnElement[bool]:
        clause: ColumnElement[bool] = column.in_(list(values))
        return clause

    def among_param(self, column: Any, name: str) -> ColumnElement[bool]:
        clause: ColumnElement[bool] = column.in_(bindparam(name, expanding=True))
        return clause

    def prepare(self, data_dir: Path) -> None:
        # The database file lives in the data directory unless the URL names another path.
        data_dir.mkdir(parents=True, exist_ok=True)

    def create_engine(self, url: str, pool_size: int, **options: Any) -> AsyncEngine:
        # Connections are threads of aiosqlite's; writers are serialised anyway.
        # The pool's own reset is a rollback whenever a connection comes back outside a
        # transaction SQLAlchemy ended itself (after every ``engine.begin()`` unit: a hop to
        # the connection's thread for nothing); ``_sqlite_on_reset`` rolls back only what is open.
        engine = create_async_engine(
            url, pool_size=8, max_overflow=8, pool_reset_on_return=None, **options
        )
        event.listen(engine.sync_engine, "connect", _sqlite_on_connect)
        event.listen(engine.sync_engine, "begin", _sqlite_on_begin)
        event.listen(engine.sync_engine.pool, "reset", _sqlite_on_reset)
        return engine

    def write_lock(self, url: str) -> contextlib.AbstractAsyncContextManager[Any]:
        # Writers queue here instead of sleeping in SQLite's busy handler.
        path = make_url(url).database
        if not path or path == ":memory:":
            return asyncio.Lock()
        return WritersLock(path + "-writers.lock")

    async def reading(self, conn: AsyncConnection) -> AsyncConnection:
        return await conn.execution_options(sqlite_read=True)  # a plain BEGIN: no write lock

    async def send_notifications(self, tx: Tx) -> None:
        return None

    def announcer(self, url: str) -> Announcer:
        path = make_url(url).database
        if not path or path == ":memory:":
            return _Nobody()  # no other process can open it
        return WakeFiles(path)

    async def listen(
        self, url: str, channels: Collection[str], heard: Heard, lost: Lost
    ) -> Listening | None:
        path = make_url(url).database
        if not path or path == ":memory:":
            return None  # no other process can open it
        return WakeWatch.start(WakeFiles(path), channels, heard)

    def migrating(self, conn: AsyncConnection) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()  # the migration's own write transaction serialises


@dataclass(frozen=True)
class PostgresDialect:
    """A fleet: an asyncpg pool; wake-ups are ``NOTIFY`` after commit (``Notifier``; the
    caches' in the transaction, delivered at commit) and one ``LISTEN`` connection per
    process."""

    alters_by_copy = False

    def pick(self, forms: Forms[T]) -> T:
        return forms.postgresql

    def insert(self, table: Table) -> Any:
        return postgresql.insert(table)

    def among(self, column: Any, values: Collection[Any]) -> ColumnElement[bool]:
        # ``column = ANY(:array)``: one statement text whatever the count, so asyncpg's prepared
        # statement and its plan are reused by every batch (an ``IN`` of N parameters is a new
        # statement, prepared and planned again, for every N).
        name = f"{column.table.name}_{column.name}_any"
        clause: ColumnElement[bool] = column == any_(
            bindparam(name, list(values), type_=ARRAY(column.type))
        )
        return clause

    def among_param(self, column: Any, name: str) -> ColumnElement[bool]:
        clause: ColumnElement[bool] = column == any_(bindparam(name, type_=ARRAY(column.type)))
        return clause

    def prepare(self, data_dir: Path) -> None:
        return None

    def create_engine(self, url: str, pool_size: int, **options: Any) -> AsyncEngine:
        return create_async_engine(
            url,
            pool_size=pool_size,
            max_overflow=pool_size,
            pool_pre_ping=False,
            connect_args={"server_settings": _SESSION_SETTINGS},
            **options,
        )

    def write_lock(self, url: str) -> contextlib.AbstractAsyncContextManager[Any]:
        return contextlib.nullcontext()  # row locks and MVCC: writers run side by side

    async def reading(self, conn: AsyncConnection) -> AsyncConnection:
        return conn

    async def send_notifications(self, tx: Tx) -> None:
        # One round trip for the channels no statement has notified (delivered at commit).
        channels = tx.unsent()
        if channels:
            await tx.conn.execute(text(_notify_sql(tuple(channels))))
            for channel in channels:
                tx.notify(channel, sent=True)

    def announcer(self, url: str) -> Announcer:
        return Notifier(url)

    async def listen(
        self, url: str, channels: Collection[str], heard: Heard, lost: Lost
    ) -> Listening | None:
        import asyncpg  # here: a process on SQLite never loads it (storage/database.py)

        conn: asyncpg.Connection = await asyncpg.connect(_asyncpg_dsn(url))
        for channel in channels:
            await conn.add_listener(channel, lambda _c, _pid, name, _payload: heard(name))
        conn.add_termination_listener(lambda _c: lost())
        listening: Listening = conn
        return listening

    @contextlib.asynccontextmanager
    async def migrating(self, conn: AsyncConnection) -> AsyncIterator[None]:
        await conn.exec_driver_sql(f"SELECT pg_advisory_lock({_MIGRATIONS_LOCK})")
        yield
        await conn.exec_driver_sql(f"SELECT pg_advisory_unlock({_MIGRATIONS_LOCK})")


class WritersLock:
    """SQLite's writers, of this process and of the others on the file, queue here in turn:
    an asyncio lock in the process, then an ``flock`` on a file beside the database. SQLite's
    own busy handler would have them sleep and look again, up to 100 ms at a time, while the
    lock is free; ``flock`` wakes a waiter as soon as the holder lets go."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._local = asyncio.Lock()
        self._fd: int | None = None

    async def __aenter__(self) -> None:
        await self._local.acquire()
        try:
            self._fd = await self._lock_file()
        except BaseException:
            self._local.release()
            raise

    async def __aexit__(self, *_: object) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # releases the flock
        self._local.release()

    async def _lock_file(self) -> int:
        """The lock file, open and locked; a new descriptor each time (closing it unlocks)."""
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            pass  # another writer has it: wait in a thread, the event loop runs on
        except BaseException:
            os.close(fd)
            raise
        waiting = asyncio.ensure_future(asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX))
        try:
            await asyncio.shield(waiting)
        except BaseException:
            # Cancelled while the thread waits: close the file once it has the lock (or fails).
            waiting.add_done_callback(lambda _: os.close(fd))
            raise
        return fd


async def run_on_connection_thread(driver: Any, work: Callable[[sqlite3.Connection], T]) -> T:
    """``work(connection)`` on the thread of an aiosqlite connection (``driver``), queued
    after whatever it runs now: one hop there and back. aiosqlite has no public call for it;
    this is its own queue, which SQLAlchemy's aiosqlite adapter uses in the same way (to set
    the isolation level). sqlite3's errors come back as SQLAlchemy's (``DBAPIError``), as
    they do through a statement SQLAlchemy sends."""
    try:
        result: T = await driver._execute(functools.partial(_call, work, driver))
    except sqlite3.Error as exc:
        raise DBAPIError.instance(None, None, exc, sqlite3.Error) from exc
    return result


def _call(work: Callable[[sqlite3.Connection], T], driver: Any) -> T:
    return work(driver._conn)


class _Nobody:
    """No other process to tell (an in-memory SQLite database)."""

    def announce(self, channels: Collection[str]) -> None:
        return None

    def through(self, listening: Listening | None) -> None:
        return None

    async def close(self) -> None:
        return None


class Notifier:
    """PostgreSQL: the wake-ups a commit owes the other processes, NOTIFYed just after it, not
    inside the transaction. PostgreSQL holds one lock on its notification queue from before a
    notifying transaction's commit record until the transaction ends, WAL flush included:
    every notifying commit of the cluster waits for the one before it, group commit lost, and
    a flush slowed by a checkpoint (80-250 ms measured) holds up every sender behind it. A
    NOTIFY alone writes no WAL and flushes nothing (``bench.notify_commit``, 16 clients: an
    INSERT with its NOTIFY, 3,700 commits/s; the INSERT, then the NOTIFY by itself, 8,600/s).

    What a process's commits owe is gathered for ``NOTIFY_GATHER_SECONDS`` and sent in one
    statement, one at a time: at most ~200 a second per process whatever its commit rate, and
    as few for every other process to hear. It goes out on the process's ``LISTEN``
    connection when it has one (``through``): that backend hands the process its own
    notification back in the same answer, where a NOTIFY from elsewhere has it woken to
    deliver it (one NOTIFY per commit on a connection of its own cost ~150 µs more of
    PostgreSQL's CPU per lone send than one in the transaction; this way, ~30 µs). Else on a
    connection of its own, opened when first needed (a CLI command).

    A wake-up lost (the process dies between its commit and the NOTIFY; the statement fails
    twice) costs a listener its next look (``idle_check``, 30 s at most for the workers), as
    one missed while a ``LISTEN`` connection reconnects does."""

    def __init__(self, url: str) -> None:
        self._url = _asyncpg_dsn(url)
        self._pending: set[str] = set()
        self._sending: asyncio.Task[None] | None = None
        self._conn: asyncpg.Connection | None = None  # its own
        self._listening: asyncpg.Connection | None = None

    def through(self, listening: Listening | None) -> None:
        self._listening = cast("asyncpg.Connection | None", listening)

    def announce(self, channels: Collection[str]) -> None:
        self._pending.update(channels)
        if self._sending is None or self._sending.done():
            loop = asyncio.get_running_loop()
            self._sending = loop.create_task(self._send(), name="posthaste-notify")

    async def _send(self) -> None:
        while self._pending:
            await asyncio.sleep(NOTIFY_GATHER_SECONDS)
            channels = sorted(self._pending)
            self._pending.clear()
            for attempt in (1, 2):  # a connection the server ended is replaced once
                try:
                    await (await self._connection()).execute(_notify_sql(tuple(channels)))
                    break
                except Exception as exc:  # a task of its own: nobody else would hear of it
                    self._discard()
                    if attempt == 2:
                        log.warning(
                            "NOTIFY of %s failed (%s); listeners look again later",
                            ", ".join(channels),
                            exc,
                        )

    async def _connection(self) -> asyncpg.Connection:
        if self._listening is not None and not self._listening.is_closed():
            return self._listening
        if self._conn is None or self._conn.is_closed():
            import asyncpg  # here: a process on SQLite never loads it (storage/database.py)

            self._conn = await asyncpg.connect(self._url, timeout=10)
        return self._conn

    def _discard(self) -> None:
        """After a failed NOTIFY: its own connection closed, the ``LISTEN`` one no longer used
        (the database's to close; ``through`` hands over the next)."""
        if self._listening is not None:
            self._listening = None
            return
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()

    async def close(self) -> None:
        if self._sending is not None:
            await asyncio.wait([self._sending])  # what is owed is told first
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close(timeout=5)


def _asyncpg_dsn(url: str) -> str:
    """The database URL as asyncpg's own ``connect`` takes it (no ``+asyncpg``)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@functools.cache
def _notify_sql(channels: tuple[str, ...]) -> str:
    """One statement NOTIFYing ``channels`` (Posthaste's own names), written out: asyncpg
    sends a statement without parameters as a simple query, with no prepare and bind to pay
    for (``Notifier``; in a transaction, ``PostgresDialect.send_notifications``)."""
    for channel in channels:
        if not channel.replace("_", "").isalnum() or not channel.isascii():
            raise ValueError(f"not a channel name: {channel!r}")
    return "SELECT " + ", ".join(f"pg_notify('{channel}', '')" for channel in channels)


class WakeFiles:
    """SQLite's wake-ups across processes (``posthaste serve`` runs several on one file): SQLite
    has no NOTIFY, so a commit that wakes a channel sets the modification time of that
    channel's file, in a directory beside the database, to the present nanosecond (an explicit
    time: the file system's own clock ticks too coarsely to tell two commits apart), and every
    process looks at the files' times every ``SQLITE_WATCH_SECONDS`` (``WakeWatch``). A
    channel wakes only its own listeners: a commit of an accepted email wakes the workers, not
    the caches of API keys and domains, which a watch of the whole database (``PRAGMA
    data_version``) cleared at every commit, nor the webhook dispatchers."""

    def __init__(self, database: str) -> None:
        self.directory = Path(database + "-wake")

    def announce(self, channels: Collection[str]) -> None:
        for channel in channels:
            stamp = time.time_ns()
            path = self.directory / channel
            try:
                os.utime(path, ns=(stamp, stamp))
            except FileNotFoundError:
                self.directory.mkdir(mode=0o700, exist_ok=True)
                path.touch(mode=0o600)
                os.utime(path, ns=(stamp, stamp))
            except OSError:
                pass  # a missed wake-up: listeners look again at their own pace anyway

    def through(self, listening: Listening | None) -> None:
        return None  # the files are touched, not a connection

    async def close(self) -> None:
        return None  # every announcement is made as the commit's is

    def stamps(self, channels: Collection[str]) -> dict[str, int]:
        found = {}
        for channel in channels:
            try:
                found[channel] = os.stat(f"{self.directory}/{channel}").st_mtime_ns
            except OSError:
                found[channel] = 0
        return found


class WakeWatch:
    """Every ``SQLITE_WATCH_SECONDS``, the channels whose ``WakeFiles`` time changed are heard:
    at most 20 times a second per channel, whatever the commit rate."""

    def __init__(self, files: WakeFiles, channels: Collection[str], heard: Heard) -> None:
        self._files = files
        self._channels = tuple(channels)
        self._heard = heard
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def start(cls, files: WakeFiles, channels: Collection[str], heard: Heard) -> WakeWatch:
        watch = cls(files, channels, heard)
        watch._task = asyncio.get_running_loop().create_task(watch._run(), name="sqlite-watch")
        return watch

    async def _run(self) -> None:
        seen = self._files.stamps(self._channels)  # a few µs a look: on the event loop
        while True:
            await asyncio.sleep(SQLITE_WATCH_SECONDS)
            now = self._files.stamps(self._channels)
            for channel, stamp in now.items():
                if stamp != seen[channel]:
                    self._heard(channel)
            seen = now

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _sqlite_on_connect(dbapi_conn: Any, _record: ConnectionPoolEntry) -> None:
    # Let SQLAlchemy's "begin" event emit BEGIN itself (pysqlite's implicit BEGIN is deferred).
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_on_begin(conn: Any) -> None:
    # BEGIN IMMEDIATE for writes: two writers never deadlock upgrading a read lock to a write one.
    # Sent in one hop to the connection's thread (``exec_driver_sql`` takes three).
    # Marked until the BEGIN is known to have run: a unit cancelled while it waits leaves the
    # BEGIN queued on the connection's thread, to run after the connection is back in the pool.
    read = conn.get_execution_options().get("sqlite_read")
    begin = functools.partial(_execute, "BEGIN" if read else "BEGIN IMMEDIATE")
    info = conn.connection.info
    info[_BEGINNING] = True
    await_only(run_on_connection_thread(conn.connection.driver_connection, begin))
    info[_BEGINNING] = False


def _sqlite_on_reset(dbapi_conn: Any, record: ConnectionPoolEntry, state: PoolResetState) -> None:
    # What the pool's rollback-on-return was for: a connection never goes back to the pool
    # with a transaction open (a write one would hold the database's write lock). Open, or
    # perhaps about to be: a BEGIN that was sent and not seen to end (the rollback is queued
    # after it on the connection's thread, so it ends what the BEGIN starts).
    driver = record.driver_connection
    beginning = record.info.pop(_BEGINNING, False)
    if not (state.asyncio_safe and not state.transaction_was_reset and driver):
        return
    if beginning or driver.in_transaction:
        dbapi_conn.rollback()


_BEGINNING = "posthaste_beginning"  # in a pooled connection's ``info``: see _sqlite_on_begin


def _execute(statement: str, connection: sqlite3.Connection) -> None:
    connection.execute(statement)

"""Contact imports: a CSV checked whole and stored in parts with its job in one transaction,
then written by the ``import_contacts`` job one part per transaction.

A part's transaction writes its contacts, their ``contact.created|updated`` events, their
segment memberships and the import's progress (next part, counts, first errors) together: a
worker killed at any point leaves the import at a part boundary, and the job, claimed again
after its lease, goes on from there without counting or announcing a line twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

from posthaste.core.contact_imports import (
    MAX_ATTEMPTS,
    PART_ROWS,
    ContactImport,
    ImportedLine,
    ImportStatus,
    LineError,
    OnConflict,
    PartOutcome,
    check_csv,
    kept_errors,
    parse_header,
    parse_line,
    plan_part,
    read_csv,
)
from posthaste.core.cursors import PageRequest
from posthaste.core.events import EventType
from posthaste.core.ids import is_uuid, new_id, now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.models import Job, Principal
from posthaste.errors import NotFound, ValidationError
from posthaste.services.contacts import check_segments, contacts_created, record_contact_events
from posthaste.storage import contact_imports as repo
from posthaste.storage import contacts as contacts_repo
from posthaste.storage import jobs as jobs_repo
from posthaste.storage import segments as segments_repo
from posthaste.storage.database import Database, Tx
from posthaste.storage.dialects import Forms

PartLines = Sequence[ImportedLine | LineError]
RACE_RETRIES = 3  # a part redone when a contact's address was taken while it was planned
READ_AHEAD = Forms(postgresql=True, sqlite=False)  # the next part parsed while one is written


class ContactImportService:
    """Start a team's imports, show them, and run their jobs."""

    def __init__(self, db: Database, *, part_rows: int = PART_ROWS) -> None:
        self.db = db
        self.part_rows = part_rows  # lines per stored part: per transaction of the job

    async def start(
        self,
        principal: Principal,
        body: bytearray,
        on_conflict: OnConflict,
        segment_ids: tuple[str, ...],
    ) -> ContactImport:
        """Check the whole CSV, then store it in parts with its job; a bad CSV or an unknown
        segment stores nothing."""
        checked = await asyncio.to_thread(check_csv, body, self.part_rows)
        now = now_ms()
        item = ContactImport(
            new_id(), principal.team_id, ImportStatus.QUEUED, on_conflict, segment_ids,
            checked.header, len(checked.parts), 0, checked.total, now,
        )  # fmt: skip
        view = memoryview(body)  # parts are copied out one at a time
        async with self.db.transaction() as tx:
            await check_segments(tx, principal.team_id, segment_ids, "segment_id")
            await repo.insert_import(tx, item)
            for seq, span in enumerate(checked.parts):
                data = bytes(view[span.start : span.end])
                await repo.insert_part(tx, item.id, seq, span.first_line, data)
            await jobs_repo.enqueue(
                tx, JobKind.IMPORT_CONTACTS, item.id, principal.team_id, now, now
            )
        return item

    async def get(self, principal: Principal, import_id: str) -> ContactImport:
        found = None
        if is_uuid(import_id):
            async with self.db.read() as tx:
                found = await repo.get_import(tx, principal.team_id, import_id.lower())
        if found is None:
            raise NotFound(f"Contact import {import_id!r} was not found.")
        return found

    async def stream(self, principal: Principal) -> AsyncIterator[ContactImport]:
        """Every import of the team, newest first, in flat memory."""
        async with self.db.read() as tx:
            async for item in repo.stream_imports(tx, principal.team_id):
                yield item

    async def page(
        self, principal: Principal, request: PageRequest
    ) -> tuple[list[ContactImport], bool]:
        async with self.db.read() as tx:
            page = await repo.page_imports(
                tx, principal.team_id, request.limit, request.anchor, backwards=request.backwards
            )
        if page is None:
            raise ValidationError(f"'{request.name}' must be the id of one of your imports.")
        return page

    async def run(self, job: Job) -> None:
        """The ``import_contacts`` job: the import's parts not yet in, one transaction each.

        On PostgreSQL the next part is read and parsed while the server writes the current
        one: the job's time is this process's CPU and the server's one after the other, and
        the parsing, a fifth of ours, need not wait for the server (nor the server for it).
        At most two parts are held at a time. Not on SQLite, where it made the job slower
        (bench/README.md, Contact imports)."""
        item = await self._begin(job)
        ahead = self.db.dialect.pick(READ_AHEAD)
        reading: asyncio.Task[PartLines] | None = None
        try:
            while item is not None and item.status is ImportStatus.RUNNING:
                if reading is None:
                    reading = self._read_task(item, item.next_part)
                lines = await reading
                following = item.next_part + 1
                ahead_ok = ahead and following < item.parts
                reading = self._read_task(item, following) if ahead_ok else None
                item = await self._import_next_part(item, job, lines)
        finally:
            if reading is not None:
                await _discard(reading)

    async def _begin(self, job: Job) -> ContactImport | None:
        """The import to go on with, marked running; None when there is nothing to do."""
        async with self.db.transaction() as tx:
            item = await repo.get_import_to_run(tx, job.ref, for_update=True)
            if item is None or item.status in (ImportStatus.COMPLETED, ImportStatus.FAILED):
                await jobs_repo.finish(tx, job)
                return None
            if job.attempts > MAX_ATTEMPTS:
                message = f"The import stopped after {MAX_ATTEMPTS} attempts at this line."
                await self._fail(tx, item, job, message)
                return None
            if item.status is ImportStatus.QUEUED:
                item = replace(item, status=ImportStatus.RUNNING)
                await repo.save_progress(tx, item)
            return item

    async def _import_next_part(
        self, item: ContactImport, job: Job, lines: PartLines
    ) -> ContactImport | None:
        """Write the next part (its ``lines``); the import as it then stands, or None when
        another worker has moved it meanwhile (this one's lease ran out)."""
        for _ in range(RACE_RETRIES):
            try:
                async with self.db.transaction() as tx:
                    return await self._store_part(tx, item, lines, job)
            except contacts_repo.AddressTaken:
                continue
        raise RuntimeError(f"contact import {item.id}: addresses kept being taken meanwhile")

    def _read_task(self, item: ContactImport, seq: int) -> asyncio.Task[PartLines]:
        return asyncio.create_task(self._read_part(item, seq))

    async def _read_part(self, item: ContactImport, seq: int) -> PartLines:
        async with self.db.read() as tx:
            part = await repo.read_part(tx, item.id, seq)
        if part is None:
            raise RuntimeError(f"contact import {item.id}: part {seq} is missing")
        first_line, data = part
        columns = parse_header(item.header)
        return [parse_line(columns, record) for record in read_csv(data, first_line)]

    async def _store_part(
        self, tx: Tx, item: ContactImport, lines: PartLines, job: Job
    ) -> ContactImport | None:
        current = await repo.get_import_to_run(tx, item.id, for_update=True)
        if current is None or current.next_part != item.next_part:
            return None
        if not await self._segments_remain(tx, current):
            first = lines[0].line if lines else 0
            await self._fail(
                tx, current, job, "A segment of the import was deleted meanwhile.", first
            )
            return None
        now = now_ms()
        good = [line for line in lines if isinstance(line, ImportedLine)]
        outcome = await self._write_contacts(tx, current, good, now)
        errors = [line for line in lines if isinstance(line, LineError)]
        progressed = _progressed(current, outcome, errors)
        if progressed.next_part == progressed.parts:
            progressed = replace(progressed, status=ImportStatus.COMPLETED, completed_at=now)
            await self._close(tx, progressed, job)
        else:
            await repo.save_progress(tx, progressed)
        return progressed

    async def _segments_remain(self, tx: Tx, item: ContactImport) -> bool:
        known = await segments_repo.existing_ids(tx, item.team_id, item.segment_ids)
        return len(known) == len(item.segment_ids)

    async def _write_contacts(
        self, tx: Tx, item: ContactImport, good: Sequence[ImportedLine], now: int
    ) -> PartOutcome:
        keys = {line.address.lookup_key for line in good}
        existing = await contacts_repo.contacts_by_keys(tx, item.team_id, keys)
        outcome = plan_part(item.team_id, good, existing, item.on_conflict, now)
        created = list(outcome.created.values())
        updated = list(outcome.updated.values())
        new_ids = {contact.id for contact in created}
        # The new contacts and their memberships go in with their events: on PostgreSQL one
        # statement (three round trips fewer per part); the existing contacts' memberships,
        # which may be there already, by themselves.
        stored_with = [
            contacts_repo.inserted(created),
            segments_repo.new_memberships(item.team_id, item.segment_ids, new_ids, now),
        ]
        async with contacts_repo.new_addresses():
            await contacts_created(tx, created, now, stored_with)
        await contacts_repo.update_contacts(tx, updated)
        await record_contact_events(tx, updated, EventType.CONTACT_UPDATED, now)
        others = [contact_id for contact_id in outcome.contact_ids if contact_id not in new_ids]
        await segments_repo.add_memberships(tx, item.team_id, item.segment_ids, others, now)
        return outcome

    async def _fail(
        self, tx: Tx, item: ContactImport, job: Job, message: str, line: int | None = None
    ) -> None:
        if line is None:
            part = await repo.read_part(tx, item.id, item.next_part)
            line = part[0] if part else 0
        failed = replace(
            item,
            status=ImportStatus.FAILED,
            completed_at=now_ms(),
            errors=kept_errors(item.errors, [LineError(line, message)]),
        )
        await self._close(tx, failed, job)

    async def _close(self, tx: Tx, item: ContactImport, job: Job) -> None:
        """The import has finished: its progress written, its CSV dropped, its job done."""
        await repo.save_progress(tx, item)
        await repo.delete_parts(tx, item.id)
        await jobs_repo.finish(tx, job)


async def _discard(task: asyncio.Task[PartLines]) -> None:
    """Stop a part read ahead that is no longer wanted, and collect how it ended."""
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()


def _progressed(
    item: ContactImport, outcome: PartOutcome, errors: Sequence[LineError]
) -> ContactImport:
    return replace(
        item,
        next_part=item.next_part + 1,
        created=item.created + len(outcome.created),
        updated=item.updated + outcome.changed_lines,
        skipped=item.skipped + outcome.skipped_lines,
        failed=item.failed + len(errors),
        errors=kept_errors(item.errors, errors),
    )

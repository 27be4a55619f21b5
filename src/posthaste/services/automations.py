"""Automations: created, read, edited (a changed graph is a new version: running runs keep
theirs), enabled and disabled, duplicated, stopped and deleted; their runs listed, read and
cancelled; custom events (``POST /events/send``) that start runs and resume waiting ones."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from dataclasses import replace

from posthaste.core.automation_runs import (
    Automation,
    CustomEvent,
    Run,
    RunStatus,
    in_path_order,
)
from posthaste.core.automations import (
    AutomationChanges,
    AutomationStatus,
    Graph,
    NewAutomation,
    references,
)
from posthaste.core.contacts import Contact
from posthaste.core.cursors import PageRequest
from posthaste.core.ids import is_uuid, new_id, now_ms
from posthaste.core.jobs import JobKind
from posthaste.core.models import Principal
from posthaste.errors import Conflict, NotFound, ValidationError
from posthaste.services.automation_runs import end_run, start_runs
from posthaste.services.contacts import contacts_created, existing_contact
from posthaste.services.event_definitions import check_event_payload
from posthaste.storage import automations as repo
from posthaste.storage import contacts as contacts_repo
from posthaste.storage import jobs as jobs_repo
from posthaste.storage import segments as segments_repo
from posthaste.storage import templates as templates_repo
from posthaste.storage.database import Database, Tx

COPY_SUFFIX = " (copy)"


async def _existing(
    tx: Tx, principal: Principal, automation_id: str, *, for_update: bool = False
) -> Automation:
    found = None
    if is_uuid(automation_id):
        found = await repo.get_automation(
            tx, principal.team_id, automation_id.lower(), for_update=for_update
        )
    if found is None:
        raise NotFound(f"Automation {automation_id!r} was not found.")
    return found


async def _check_references(tx: Tx, team_id: str, graph: Graph) -> None:
    """Every template and segment the graph names is one of the team's."""
    named = references(graph)
    for key, ref in named.templates:
        if await templates_repo.get_sendable(tx, team_id, ref) is None:
            raise ValidationError(
                f"Step {key!r} (send_email): template {ref!r} was not found; give the id or "
                "alias of one of your templates."
            )
    known = await segments_repo.existing_ids(tx, team_id, {s for _, s in named.segments})
    for key, segment_id in named.segments:
        if segment_id not in known:
            raise ValidationError(
                f"Step {key!r}: segment {segment_id!r} is not one of your segments."
            )


class AutomationService:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(self, principal: Principal, new: NewAutomation) -> Automation:
        now = now_ms()
        automation = Automation(
            new_id(), principal.team_id, new.name, new.status, principal.key.mode, new_id(),
            new.graph, now, now,
        )  # fmt: skip
        async with self.db.transaction() as tx:
            await _check_references(tx, principal.team_id, new.graph)
            await repo.insert_automation(tx, automation)
        return automation

    async def get(self, principal: Principal, automation_id: str) -> Automation:
        async with self.db.read() as tx:
            return await _existing(tx, principal, automation_id)

    async def update(
        self, principal: Principal, automation_id: str, changes: AutomationChanges
    ) -> Automation:
        """Apply the changes; a new graph becomes a new version, for runs started after."""
        async with self.db.transaction() as tx:
            current = await _existing(tx, principal, automation_id, for_update=True)
            changed = replace(
                current,
                name=changes.name or current.name,
                status=changes.status or current.status,
                updated_at=max(now_ms(), current.created_at),
            )
            if changes.graph is not None:
                await _check_references(tx, principal.team_id, changes.graph)
                changed = replace(changed, graph=changes.graph, version_id=new_id())
                await repo.insert_version(tx, changed)
            await repo.update_automation(tx, changed)
        return changed

    async def delete(self, principal: Principal, automation_id: str) -> Automation:
        """Remove it with its runs; their pending jobs end when they next run."""
        async with self.db.transaction() as tx:
            found = await _existing(tx, principal, automation_id, for_update=True)
            await repo.delete_automation(tx, principal.team_id, found.id)
        return found

    async def duplicate(self, principal: Principal, automation_id: str) -> Automation:
        """A disabled copy with the same graph, named ``<name> (copy)``."""
        async with self.db.read() as tx:
            source = await _existing(tx, principal, automation_id)
        name = source.name[: 200 - len(COPY_SUFFIX)] + COPY_SUFFIX
        copy = NewAutomation(name, AutomationStatus.DISABLED, source.graph)
        return await self.create(principal, copy)

    async def stop(self, principal: Principal, automation_id: str) -> Automation:
        """Disable it and cancel its running runs now."""
        async with self.db.transaction() as tx:
            current = await _existing(tx, principal, automation_id, for_update=True)
            now = now_ms()
            stopped = replace(current, status=AutomationStatus.DISABLED, updated_at=now)
            await repo.update_automation(tx, stopped)
            await repo.cancel_running(tx, principal.team_id, current.id, now)
        return stopped

    async def stream(
        self, principal: Principal, status: AutomationStatus | None
    ) -> AsyncIterator[Automation]:
        async with self.db.read() as tx:
            async for automation in repo.stream_automations(tx, principal.team_id, status):
                yield automation

    async def page(
        self, principal: Principal, status: AutomationStatus | None, request: PageRequest
    ) -> tuple[list[Automation], bool]:
        async with self.db.read() as tx:
            page = await repo.page_automations(
                tx, principal.team_id, status, request.limit, request.anchor,
                backwards=request.backwards,
            )  # fmt: skip
        if page is None:
            raise ValidationError(f"'{request.name}' must be the id of one of your automations.")
        return page

    # Runs

    async def stream_runs(
        self, principal: Principal, automation_id: str, statuses: Collection[RunStatus]
    ) -> AsyncIterator[Run]:
        async with self.db.read() as tx:
            automation = await _existing(tx, principal, automation_id)
            async for run in repo.stream_runs(tx, principal.team_id, automation.id, statuses):
                yield run

    async def page_runs(
        self,
        principal: Principal,
        automation_id: str,
        statuses: Collection[RunStatus],
        request: PageRequest,
    ) -> tuple[list[Run], bool]:
        async with self.db.read() as tx:
            automation = await _existing(tx, principal, automation_id)
            page = await repo.page_runs(
                tx, principal.team_id, automation.id, statuses, request.limit, request.anchor,
                backwards=request.backwards,
            )  # fmt: skip
        if page is None:
            raise ValidationError(
                f"'{request.name}' must be the id of one of this automation's runs."
            )
        return page

    async def get_run(self, principal: Principal, automation_id: str, run_id: str) -> Run:
        async with self.db.read() as tx:
            return await _existing_run(tx, principal, automation_id, run_id)

    async def cancel_run(self, principal: Principal, automation_id: str, run_id: str) -> Run:
        """Cancel a running run (its pending step never executes); a finished run is 409."""
        async with self.db.transaction() as tx:
            run = await _existing_run(tx, principal, automation_id, run_id, lock=True)
            if run.status is not RunStatus.RUNNING:
                raise Conflict(
                    f"The run is {run.status.value}; only a running run can be cancelled."
                )
            await jobs_repo.drop(tx, JobKind.AUTOMATION_STEP, run.id)
            ended = await end_run(tx, run, RunStatus.CANCELLED, now_ms())
            return await _existing_run(tx, principal, automation_id, ended.id)

    # Custom events

    async def send_event(self, principal: Principal, event: CustomEvent) -> None:
        """Start the runs the event triggers and resume the contact's runs waiting for it.
        A payload its event's schema contradicts is refused first (422, nothing changed); an
        address that is no contact yet becomes one (docs/automations.md)."""
        async with self.db.transaction() as tx:
            await check_event_payload(tx, principal.team_id, event.name, event.payload)
            now = now_ms()
            contact, created = await _event_contact(tx, principal, event, now)
            # Only runs that waited before the event: one that it starts (or that the new
            # contact starts) may begin by waiting for this same event, and waits for the next.
            waiting = (
                []
                if created
                else await repo.waiting_runs(tx, principal.team_id, contact.id, event.name)
            )
            for run in waiting:
                await repo.update_run(tx, replace(run, waiting_for=None, event=event.payload))
                await jobs_repo.move(tx, JobKind.AUTOMATION_STEP, run.id, now)
            triggered = await repo.enabled_with_trigger(tx, principal.team_id, event.name)
            await start_runs(tx, triggered, [contact.id], event.payload, now)


async def _existing_run(
    tx: Tx, principal: Principal, automation_id: str, run_id: str, *, lock: bool = False
) -> Run:
    automation = await _existing(tx, principal, automation_id)
    found = None
    if is_uuid(run_id):
        found = await repo.get_run(
            tx, principal.team_id, run_id.lower(), automation_id=automation.id, lock=lock
        )
    if found is None:
        raise NotFound(f"Run {run_id!r} of automation {automation.id!r} was not found.")
    graph = automation.graph
    if found.version_id != automation.version_id:
        graph = await repo.graph_of_version(tx, found.version_id) or graph
    return in_path_order(found, graph)


async def _event_contact(
    tx: Tx, principal: Principal, event: CustomEvent, now: int
) -> tuple[Contact, bool]:
    """The contact the event is for, and whether it was created now: an address that is none
    yet becomes a contact (with ``contact.created``, which starts its automations too). Not
    locked: a step changing the contact locks its run first, and the runs are locked next (one
    order, no deadlock)."""
    if event.address is None:
        assert event.contact_id is not None
        return await existing_contact(tx, principal, event.contact_id), False
    found = await contacts_repo.get_contact(
        tx, principal.team_id, "email", event.address.lookup_key
    )
    if found is not None:
        return found, False
    address = event.address
    contact = Contact(
        new_id(), principal.team_id, address.address, address.lookup_key, None, None, False, {},
        now, now,
    )  # fmt: skip
    if not await contacts_repo.insert_contact(tx, contact):
        return await existing_contact(tx, principal, event.address.address), False
    await contacts_created(tx, [contact], now)
    return contact, True

"""The ``automation_step`` job: execute automation runs' steps, a claimed batch at a time.

A batch's jobs share one transaction (``StepBatch``: their runs locked and read together, their
jobs fenced by their claims, every write to the runs grouped), so a step's effect (an email
accepted, a contact changed, a membership added), its row, its run's progress and its job's
next due time (or end) commit together or not at all: if the worker dies before the commit,
nothing of the batch happened and its jobs are claimed again after their leases; once it
committed, its steps are done and never executed again. So a ``send_email`` step mails at most
once. If anything in the batch fails, it is rolled back whole and each of its jobs runs again
on its own, in a transaction of its own, so that one bad step holds up only itself.

A run goes on from one step to the next in the same batch while its next step is ready (a
delay that ended goes straight on to the email after it), until it waits, ends, or comes to an
email. The batch's emails then go through the send path together (``SendingService.accept_each_in``:
one suppression check per team, one insert for the lot), and the runs go on after them. Once
the batch committed, their deliveries are handed off to the worker (``core/jobs.Handoff``),
which takes them at once instead of after every step job due before them.

``delay`` and ``wait_for_event`` are due times: the step's row is written ``running`` and the
job is put back, due when the delay ends (or the wait times out); an awaited event moves the job
to now. A run whose first step is one of them starts it when it starts (``start_runs``). An
automation that is disabled (or deleted) cancels its runs at their next step.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

from posthaste.core.automation_runs import (
    Run,
    RunStatus,
    RunStep,
    StepStatus,
    condition_met,
    due_after,
    message_data,
)
from posthaste.core.automations import ConnectionType, Graph, Step, StepType
from posthaste.core.contacts import Contact, parse_contact_changes
from posthaste.core.events import EventType
from posthaste.core.ids import now_ms
from posthaste.core.jobs import Handoff, JobKind
from posthaste.core.models import Email, Job, KeyMode, Origin, Sender
from posthaste.core.send_request import SendRequest, parse_send_request
from posthaste.errors import PosthasteError, RecipientSuppressed, ServiceUnavailable
from posthaste.services.automation_batch import StepBatch
from posthaste.services.contacts import record_contact_events
from posthaste.services.sending import SendingService
from posthaste.storage import automations as repo
from posthaste.storage import contacts as contacts_repo
from posthaste.storage import segments as segments_repo
from posthaste.storage.database import Database, Tx

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """What a step did: the branch the run takes on (or ``wait_until``: not done yet), or the
    error that fails the run."""

    branch: ConnectionType = ConnectionType.DEFAULT
    output: dict[str, Any] | None = None
    error: str | None = None
    wait_until: int | None = None


class StepFailed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class _Walk:
    """A run under way in the batch: its job, the run as it now stands, its graph version and
    the mode its automation sends in."""

    job: Job
    run: Run
    graph: Graph
    mode: KeyMode


@dataclass(frozen=True)
class _Context:
    """A step being executed: its run, the step and its row, in the batch."""

    batch: StepBatch
    walk: _Walk
    step: Step
    row: RunStep

    @property
    def tx(self) -> Tx:
        return self.batch.tx

    @property
    def run(self) -> Run:
        return self.walk.run

    @property
    def now(self) -> int:
        return self.batch.now

    async def contact(self) -> Contact:
        found = self.batch.contacts.get(self.run.contact_id)
        if found is None:
            raise StepFailed("The run's contact was deleted.")
        return found


@dataclass(frozen=True)
class _Send:
    """A send step prepared to be accepted with the batch's others: its email's request."""

    context: _Context
    sender: Sender
    request: SendRequest


class StepRunner:
    def __init__(
        self, db: Database, sending: SendingService, graphs: int = 256, *, together: bool = True
    ) -> None:
        self.db = db
        self.sending = sending
        self.together = together  # False: each job in a transaction of its own (a baseline)
        self._graphs: OrderedDict[str, Graph] = OrderedDict()  # a version never changes
        self._graph_room = graphs

    async def run_steps(self, jobs: list[Job]) -> Handoff:
        """The claimed ``automation_step`` jobs, together in one transaction; if that fails,
        each on its own (module docstring). A job whose step raises comes back when its lease
        runs out. Hands off the deliveries of the emails the steps accepted, for the worker to
        take at once."""
        if self.together and len(jobs) > 1:
            try:
                return _deliveries(await self._run_batch(jobs))
            except ServiceUnavailable:
                raise
            except Exception:
                log.warning(
                    "%d automation steps failed together; one by one", len(jobs), exc_info=True
                )
        accepted: list[str] = []
        for job in jobs:
            try:
                accepted += await self._run_batch([job])
            except ServiceUnavailable:
                raise
            except Exception:
                log.exception("automation step job %s (run %s) failed", job.id, job.ref)
        return _deliveries(accepted)

    async def _run_batch(self, jobs: list[Job]) -> list[str]:
        """The jobs' steps in one transaction; the ids of the emails accepted, once committed."""
        accepted: list[str] = []
        async with self.db.transaction() as tx:
            batch = await StepBatch.load(tx, jobs, now_ms())
            sends: list[_Send] = []
            for job in batch.jobs:
                walk = await self._begun(batch, job)
                send = None if walk is None else await self._walk(batch, walk)
                if send is not None:
                    sends.append(send)
            while sends:
                sends = await self._send_together(batch, sends, accepted)
            await batch.write()
        return accepted

    async def _begun(self, batch: StepBatch, job: Job) -> _Walk | None:
        """The job's run to go on with; None when it has ended or is to end (cancelled, its
        automation disabled or deleted)."""
        run = batch.runs.get(job.ref)
        if run is None or run.status is not RunStatus.RUNNING:
            batch.finish(job)  # cancelled, or its automation deleted
            return None
        mode = batch.modes.get(run.automation_id)
        if mode is None:  # disabled (or deleted meanwhile)
            batch.end_run(run, RunStatus.CANCELLED)
            batch.finish(job)
            return None
        return _Walk(job, run, await self._graph(batch.tx, run.version_id), mode)

    async def _graph(self, tx: Tx, version_id: str) -> Graph:
        found = self._graphs.get(version_id)
        if found is None:
            found = await repo.graph_of_version(tx, version_id)
            assert found is not None
            self._graphs[version_id] = found
            if len(self._graphs) > self._graph_room:
                self._graphs.popitem(last=False)
        return found

    async def _walk(self, batch: StepBatch, walk: _Walk | None) -> _Send | None:
        """Execute the run's steps from its current one until it waits or ends (None), or
        comes to an email to send (returned: it goes with the batch's others)."""
        while walk is not None:
            run = walk.run
            step = None if run.current_step is None else walk.graph.step(run.current_step)
            if step is None:  # a graph of a trigger alone
                batch.end_run(run, RunStatus.COMPLETED)
                batch.finish(walk.job)
                return None
            row = run.step(step.key) or RunStep(
                run.id, step.key, step.type.value, StepStatus.RUNNING, batch.now
            )
            context = _Context(batch, walk, step, row)
            if step.type is StepType.SEND_EMAIL:
                prepared = await _prepared_email(context)
                if isinstance(prepared, tuple):
                    return _Send(context, *prepared)
                outcome = prepared  # nothing to send (unsubscribed, or the step failed)
            else:
                outcome = await _execute(context)
            walk = _recorded(context, outcome)
        return None

    async def _send_together(
        self, batch: StepBatch, sends: list[_Send], accepted: list[str]
    ) -> list[_Send]:
        """Accept the prepared emails in one go (their ids added to ``accepted``) and record
        their steps; the runs go on, up to their next emails (returned)."""
        items = [(send.sender, send.request) for send in sends]
        outcomes = await self.sending.accept_each_in(batch.tx, Origin.AUTOMATION, items)
        accepted += [email.id for email in outcomes if isinstance(email, Email)]
        following: list[_Send] = []
        for send, outcome in zip(sends, outcomes, strict=True):
            walk = _recorded(send.context, _sent(outcome))
            after = await self._walk(batch, walk)
            if after is not None:
                following.append(after)
        return following


def _deliveries(email_ids: list[str]) -> Handoff:
    return Handoff(JobKind.DELIVER_EMAIL, email_ids)


def _recorded(context: _Context, outcome: Outcome) -> _Walk | None:
    """Keep what the step did (its row, the run's progress or end, its job's next due time or
    end); the run at its next step when it goes on now, else None."""
    batch, walk, step, row = context.batch, context.walk, context.step, context.row
    run = walk.run
    if outcome.wait_until is not None:
        batch.save_step(run, row)
        batch.update_run(_waiting(run, step))
        batch.retry(walk.job, outcome.wait_until)
        return None
    status = StepStatus.FAILED if outcome.error else StepStatus.COMPLETED
    done = replace(
        row, status=status, completed_at=batch.now, output=outcome.output, error=outcome.error
    )
    batch.save_step(run, done)
    run = _with_step(run, done)
    following = None if outcome.error else walk.graph.after(step.key, outcome.branch)
    if following is None:  # failed, or the last step: the run ends with it, no job more
        ended = RunStatus.FAILED if outcome.error else RunStatus.COMPLETED
        batch.end_run(run, ended, outcome.error)
        batch.finish(walk.job)
        return None
    moved = replace(run, current_step=following, waiting_for=None)
    batch.update_run(moved)
    return replace(walk, run=moved)


def _with_step(run: Run, row: RunStep) -> Run:
    kept = tuple(s for s in run.steps if s.key != row.key)
    return replace(run, steps=(*kept, row))


def _waiting(run: Run, step: Step) -> Run:
    if step.type is StepType.WAIT_FOR_EVENT and run.step(step.key) is None:
        return replace(run, waiting_for=step.config["event"])
    return run


async def _execute(context: _Context) -> Outcome:
    try:
        return await _EFFECTS[context.step.type](context)
    except StepFailed as exc:
        return Outcome(error=exc.message)


async def _trigger(context: _Context) -> Outcome:
    return Outcome()


async def _prepared_email(context: _Context) -> tuple[Sender, SendRequest] | Outcome:
    """The email the step sends (its sender and request), or the step's outcome when there is
    none to send: the contact unsubscribed, or the step failed (contact deleted, a placeholder
    without a value, a header that would break)."""
    try:
        contact = await context.contact()
    except StepFailed as exc:
        return Outcome(error=exc.message)
    if contact.unsubscribed:
        return Outcome(output={"email_id": None, "skipped": "unsubscribed"})
    config = dict(context.step.config)
    data = message_data(
        config.pop("data", {}), contact, context.run.event, templated="template" in config
    )
    team = await context.batch.team(context.run.team_id)
    try:
        request = parse_send_request({**config, "to": contact.email, "data": data}, context.now)
    except PosthasteError as exc:
        return Outcome(error=exc.message)
    return Sender(team, system_mode=context.walk.mode), request


def _sent(outcome: Email | PosthasteError) -> Outcome:
    """A send step's outcome from its email's: accepted, skipped (suppressed) or failed."""
    if isinstance(outcome, RecipientSuppressed):
        return Outcome(output={"email_id": None, "skipped": "suppressed"})
    if isinstance(outcome, PosthasteError):
        return Outcome(error=outcome.message)
    return Outcome(output={"email_id": outcome.id})


async def _delay(context: _Context) -> Outcome:
    due = due_after(context.row, context.step.config["duration"])
    return Outcome(wait_until=due) if context.now < due else Outcome()


async def _wait_for_event(context: _Context) -> Outcome:
    """Waits until the event clears the run's ``waiting_for`` or the timeout falls due."""
    run, row = context.run, context.row
    if run.step(row.key) is not None and run.waiting_for is None:
        return Outcome(
            ConnectionType.EVENT_RECEIVED, output={"event": context.step.config["event"]}
        )
    due = due_after(row, context.step.config["timeout"])
    if context.now < due:
        return Outcome(wait_until=due)
    return Outcome(ConnectionType.TIMEOUT)


async def _condition(context: _Context) -> Outcome:
    met = condition_met(context.step.config, await context.contact(), context.run.event)
    branch = ConnectionType.CONDITION_MET if met else ConnectionType.CONDITION_NOT_MET
    return Outcome(branch, output={"met": met})


async def _contact_update(context: _Context) -> Outcome:
    contact = await context.contact()
    changed = parse_contact_changes(context.step.config).applied_to(contact, context.now)
    if changed != contact:
        if await contacts_repo.update_contact(context.tx, changed):
            context.batch.contacts[contact.id] = changed
        await record_contact_events(context.tx, [changed], EventType.CONTACT_UPDATED, context.now)
    return Outcome()


async def _contact_delete(context: _Context) -> Outcome:
    contact = await context.contact()
    await contacts_repo.delete_contact(context.tx, contact.team_id, contact.id)
    await record_contact_events(context.tx, [contact], EventType.CONTACT_DELETED, context.now)
    context.batch.contacts[contact.id] = None
    return Outcome()


async def _segment_id(context: _Context) -> str:
    segment_id: str = context.step.config["segment_id"]
    if (
        await segments_repo.get_segment(context.tx, context.run.team_id, segment_id, hold=True)
        is None
    ):
        raise StepFailed(f"The segment {segment_id!r} was deleted.")
    return segment_id


async def _add_to_segment(context: _Context) -> Outcome:
    contact = await context.contact()
    segment_id = await _segment_id(context)
    await segments_repo.add_members(
        context.tx, contact.team_id, contact.id, [segment_id], context.now
    )
    return Outcome()


async def _remove_from_segment(context: _Context) -> Outcome:
    contact = await context.contact()
    segment_id = await _segment_id(context)
    await segments_repo.remove_member(context.tx, contact.team_id, contact.id, segment_id)
    return Outcome()


_EFFECTS = {
    StepType.TRIGGER: _trigger,
    StepType.DELAY: _delay,
    StepType.WAIT_FOR_EVENT: _wait_for_event,
    StepType.CONDITION: _condition,
    StepType.CONTACT_UPDATE: _contact_update,
    StepType.CONTACT_DELETE: _contact_delete,
    StepType.ADD_TO_SEGMENT: _add_to_segment,
    StepType.REMOVE_FROM_SEGMENT: _remove_from_segment,
}

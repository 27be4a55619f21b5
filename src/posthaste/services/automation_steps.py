"""The ``automation_step`` job: execute a run's current step.

The run's row is locked, the step's effect (an email accepted, a contact changed, a membership
added), the step's row, the run's progress and the job's next due time (or its end) are written
in one transaction, fenced by the job's claim: if the worker dies before the commit, nothing of
the step happened and the job is claimed again after its lease; once it committed, the step is
done and is never executed again. So a ``send_email`` step mails at most once. The steps a
worker claims together share that transaction (one commit), each in its own savepoint.

The batch's ``send_email`` steps are accepted together: each is prepared in its savepoint (its
run locked, its email's request built), then every prepared email goes through the send path at
once (``SendingService.accept_each_in``: one suppression check per team, one insert for the
lot) and each step's outcome and progress are written, all in one more savepoint. If anything
in it fails (another worker took a job meanwhile, say), none of those emails or steps is kept
and the send steps run again one by one, each in its own savepoint, so a step's email still
commits only with its step.

``delay`` and ``wait_for_event`` are due times: the step's row is written ``running`` and the
job is put back, due when the delay ends (or the wait times out); an awaited event moves the job
to now. An automation that is disabled (or deleted) cancels its runs at their next step.
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
from posthaste.core.models import Email, Job, KeyMode, Origin, Sender
from posthaste.core.send_request import SendRequest, parse_send_request
from posthaste.errors import PosthasteError, RecipientSuppressed
from posthaste.services.automation_runs import end_run
from posthaste.services.contacts import record_contact_events
from posthaste.services.sending import SendingService
from posthaste.storage import automations as repo
from posthaste.storage import contacts as contacts_repo
from posthaste.storage import jobs as jobs_repo
from posthaste.storage import segments as segments_repo
from posthaste.storage import teams as teams_repo
from posthaste.storage.database import Database, Tx

log = logging.getLogger(__name__)


class LeaseLost(Exception):
    """Another worker holds the job now: this step's transaction must not commit."""


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
class _Context:
    """A step being executed: its run, automation, the step and its row."""

    tx: Tx
    sending: SendingService
    mode: KeyMode  # the automation's
    run: Run
    step: Step
    row: RunStep
    now: int

    async def contact(self) -> Contact:
        found = await contacts_repo.get_contact(
            self.tx, self.run.team_id, "id", self.run.contact_id
        )
        if found is None:
            raise StepFailed("The run's contact was deleted.")
        return found


class StepRunner:
    def __init__(
        self, db: Database, sending: SendingService, graphs: int = 256, *, together: bool = True
    ) -> None:
        self.db = db
        self.sending = sending
        self.together = together  # the batch's send steps accepted together (module docstring)
        self._graphs: OrderedDict[str, Graph] = OrderedDict()  # a version never changes
        self._graph_room = graphs

    async def run_steps(self, jobs: list[Job]) -> None:
        """The claimed ``automation_step`` jobs: each run's current step, all in one
        transaction (one commit for the lot), each step in its own savepoint, so a step that
        raises undoes only itself and its job comes back when its lease runs out; the send
        steps' emails accepted together (module docstring)."""
        async with self.db.transaction() as tx:
            sends: list[_Send] = []
            for job in jobs:
                try:
                    async with tx.conn.begin_nested():
                        send = await self._run_step(tx, job, together=self.together)
                except Exception:
                    log.exception("automation step job %s (run %s) failed", job.id, job.ref)
                else:
                    if send is not None:
                        sends.append(send)
            if sends:
                await self._send_together(tx, sends)

    async def _send_together(self, tx: Tx, sends: list[_Send]) -> None:
        """Accept the prepared emails in one go and complete their steps, in one savepoint;
        if it fails, each send step again on its own."""
        try:
            async with tx.conn.begin_nested():
                items = [(send.sender, send.request) for send in sends]
                accepted = await self.sending.accept_each_in(tx, Origin.AUTOMATION, items)
                for send, outcome in zip(sends, accepted, strict=True):
                    await _complete(send.context, send.job, send.graph, _sent(outcome))
            return
        except Exception:
            log.warning("%d send steps failed together; one by one", len(sends), exc_info=True)
        for send in sends:
            try:
                async with tx.conn.begin_nested():
                    await self._run_step(tx, send.job, together=False)
            except Exception:
                log.exception("automation step job %s (run %s) failed", send.job.id, send.job.ref)

    async def _run_step(self, tx: Tx, job: Job, *, together: bool) -> _Send | None:
        """Execute the job's step; a send step ``together`` is only prepared (returned)."""
        assert job.team_id is not None
        now = now_ms()
        run = await repo.get_run(tx, job.team_id, job.ref, lock=True)
        if run is None or run.status is not RunStatus.RUNNING:
            await _finish(tx, job)  # cancelled, or its automation deleted
            return None
        mode = await repo.enabled_mode(tx, run.team_id, run.automation_id)
        if mode is None:  # disabled (or deleted meanwhile)
            await end_run(tx, run, RunStatus.CANCELLED, now)
            await _finish(tx, job)
            return None
        graph = await self._graph(tx, run.version_id)
        return await self._advance(tx, job, mode, run, graph, now, together=together)

    async def _graph(self, tx: Tx, version_id: str) -> Graph:
        found = self._graphs.get(version_id)
        if found is None:
            found = await repo.graph_of_version(tx, version_id)
            assert found is not None
            self._graphs[version_id] = found
            if len(self._graphs) > self._graph_room:
                self._graphs.popitem(last=False)
        return found

    async def _advance(
        self, tx: Tx, job: Job, mode: KeyMode, run: Run, graph: Graph, now: int, *, together: bool
    ) -> _Send | None:
        step = None if run.current_step is None else graph.step(run.current_step)
        if step is None:  # a graph of a trigger alone
            await end_run(tx, run, RunStatus.COMPLETED, now)
            await _finish(tx, job)
            return None
        row = run.step(step.key) or RunStep(
            run.id, step.key, step.type.value, StepStatus.RUNNING, now
        )
        context = _Context(tx, self.sending, mode, run, step, row, now)
        if together and step.type is StepType.SEND_EMAIL:
            prepared = await _prepared_email(context)
            if isinstance(prepared, tuple):
                return _Send(context, job, graph, *prepared)
            outcome = prepared  # nothing to send (unsubscribed, or the step failed)
        else:
            outcome = await _execute(context)
        await _complete(context, job, graph, outcome)
        return None


@dataclass(frozen=True)
class _Send:
    """A send step prepared to be accepted with the batch's others: its email's request."""

    context: _Context
    job: Job
    graph: Graph
    sender: Sender
    request: SendRequest


async def _complete(context: _Context, job: Job, graph: Graph, outcome: Outcome) -> None:
    """Write what the step did: its row, the run's progress (or end) and its job's next due
    time (or end), fenced by the job's claim."""
    tx, run, step, row, now = context.tx, context.run, context.step, context.row, context.now
    if outcome.wait_until is not None:
        await repo.save_step(tx, run.team_id, row)
        await repo.update_run(tx, _waiting(run, step))
        return await _retry(tx, job, outcome.wait_until)
    status = StepStatus.FAILED if outcome.error else StepStatus.COMPLETED
    done = replace(row, status=status, completed_at=now, output=outcome.output, error=outcome.error)
    await repo.save_step(tx, run.team_id, done)
    if outcome.error is not None:
        await end_run(tx, run, RunStatus.FAILED, now, outcome.error)
        return await _finish(tx, job)
    following = graph.after(step.key, outcome.branch)
    if following is None:  # the last step: the run ends with it, no job more
        await end_run(tx, run, RunStatus.COMPLETED, now)
        return await _finish(tx, job)
    await repo.update_run(tx, replace(run, current_step=following, waiting_for=None))
    await _retry(tx, job, now)


def _waiting(run: Run, step: Step) -> Run:
    if step.type is StepType.WAIT_FOR_EVENT and run.step(step.key) is None:
        return replace(run, waiting_for=step.config["event"])
    return run


async def _finish(tx: Tx, job: Job) -> None:
    if not await jobs_repo.finish(tx, job):
        raise LeaseLost(f"job {job.id} was claimed by another worker")


async def _retry(tx: Tx, job: Job, due_at: int) -> None:
    if not await jobs_repo.retry_at(tx, job, due_at):
        raise LeaseLost(f"job {job.id} was claimed by another worker")


async def _execute(context: _Context) -> Outcome:
    try:
        return await _EFFECTS[context.step.type](context)
    except StepFailed as exc:
        return Outcome(error=exc.message)


async def _trigger(context: _Context) -> Outcome:
    return Outcome()


async def _send_email(context: _Context) -> Outcome:
    """The step on its own: its email accepted through the send path in its savepoint."""
    prepared = await _prepared_email(context)
    if not isinstance(prepared, tuple):
        return prepared
    sender, request = prepared
    [outcome] = await context.sending.accept_in(context.tx, sender, Origin.AUTOMATION, [request])
    return _sent(outcome)


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
    team = await teams_repo.get_team(context.tx, context.run.team_id)
    assert team is not None
    try:
        request = parse_send_request({**config, "to": contact.email, "data": data}, context.now)
    except PosthasteError as exc:
        return Outcome(error=exc.message)
    return Sender(team, system_mode=context.mode), request


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
        await contacts_repo.update_contact(context.tx, changed)
        await record_contact_events(context.tx, [changed], EventType.CONTACT_UPDATED, context.now)
    return Outcome()


async def _contact_delete(context: _Context) -> Outcome:
    contact = await context.contact()
    await contacts_repo.delete_contact(context.tx, contact.team_id, contact.id)
    await record_contact_events(context.tx, [contact], EventType.CONTACT_DELETED, context.now)
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
    StepType.SEND_EMAIL: _send_email,
    StepType.DELAY: _delay,
    StepType.WAIT_FOR_EVENT: _wait_for_event,
    StepType.CONDITION: _condition,
    StepType.CONTACT_UPDATE: _contact_update,
    StepType.CONTACT_DELETE: _contact_delete,
    StepType.ADD_TO_SEGMENT: _add_to_segment,
    StepType.REMOVE_FROM_SEGMENT: _remove_from_segment,
}

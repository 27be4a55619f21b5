"""Starting and ending automation runs, inside the caller's transaction.

``start_for_contacts`` is what a contact's creation calls (``POST /contacts``, a custom event
for a new address, an import): each of the team's enabled automations triggered by
``contact.created`` starts one run per contact. Starting many runs is a few statements whatever
their number: the runs, their first step rows, their ``automation.run.started`` events and
their jobs go in together. A job is due now, or, when the run's first step is a delay or a wait
for an event, when that ends: the step starts with the run. No process holds a timer for a run:
its job's due time is the timer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from posthaste.core.automation_configs import CONTACT_CREATED
from posthaste.core.automation_runs import (
    Automation,
    Run,
    RunStatus,
    RunStep,
    StepStatus,
    due_after,
)
from posthaste.core.automations import ConnectionType, Step, StepType
from posthaste.core.contacts import Contact
from posthaste.core.events import EventType
from posthaste.core.ids import format_ms, new_id
from posthaste.core.jobs import JobKind
from posthaste.core.models import Event, NewJob
from posthaste.storage import automations as repo
from posthaste.storage import events as events_repo
from posthaste.storage import jobs as jobs_repo
from posthaste.storage.database import Tx


async def start_for_contacts(
    tx: Tx, team_id: str, contacts: Sequence[Contact], now: int
) -> list[Run]:
    """Start the runs of the team's enabled ``contact.created`` automations for these new
    contacts (in the transaction that creates them)."""
    automations = await repo.enabled_with_trigger(tx, team_id, CONTACT_CREATED)
    return await start_runs(tx, automations, [c.id for c in contacts], {}, now)


async def start_runs(
    tx: Tx,
    automations: Sequence[Automation],
    contact_ids: Sequence[str],
    payload: Mapping[str, Any],
    now: int,
) -> list[Run]:
    """One run per automation and contact, its trigger step done, its next step due now (or
    started, when it waits: ``_waiting_from_start``)."""
    started = [
        _new_run(a, contact_id, payload, now) for a in automations for contact_id in contact_ids
    ]
    if not started:
        return []
    runs = [run for run, _ in started]
    jobs = [NewJob(JobKind.AUTOMATION_STEP, run.id, run.team_id, due) for run, due in started]
    events = [run_event(run, EventType.AUTOMATION_RUN_STARTED, now) for run in runs]
    also = [*repo.started_runs(runs), jobs_repo.enqueued(tx, jobs, now)]
    await events_repo.insert_events(tx, events, also)
    return runs


def _new_run(
    automation: Automation, contact_id: str, payload: Mapping[str, Any], now: int
) -> tuple[Run, int]:
    """The run, its trigger step done, and when its job falls due: now, or when the wait its
    first step starts ends."""
    trigger = automation.graph.trigger
    run_id = new_id()
    done = RunStep(run_id, trigger.key, trigger.type.value, StepStatus.COMPLETED, now, now)
    run = Run(
        id=run_id,
        team_id=automation.team_id,
        automation_id=automation.id,
        version_id=automation.version_id,
        contact_id=contact_id,
        status=RunStatus.RUNNING,
        current_step=automation.graph.after(trigger.key, ConnectionType.DEFAULT),
        event=dict(payload),
        waiting_for=None,
        created_at=now,
        steps=(done,),
    )
    first = None if run.current_step is None else automation.graph.step(run.current_step)
    return _waiting_from_start(run, first, now) if first is not None else (run, now)


def _waiting_from_start(run: Run, step: Step, now: int) -> tuple[Run, int]:
    """A first step that waits (a delay, a wait for an event) starts with the run: its row is
    stored ``running`` and the run's job is due when the wait ends, so no job runs only to
    start it."""
    if step.type is StepType.DELAY:
        duration, awaited = step.config["duration"], None
    elif step.type is StepType.WAIT_FOR_EVENT:
        duration, awaited = step.config["timeout"], step.config["event"]
    else:
        return run, now
    row = RunStep(run.id, step.key, step.type.value, StepStatus.RUNNING, now)
    waiting = replace(run, waiting_for=awaited, steps=(*run.steps, row))
    return waiting, due_after(row, duration)


async def end_run(tx: Tx, run: Run, status: RunStatus, now: int, error: str | None = None) -> Run:
    """Close the run (completed, failed or cancelled) with its event (none for cancelled)."""
    ended = replace(run, status=status, current_step=None, waiting_for=None, completed_at=now)
    await repo.update_run(tx, ended)
    kind = {
        RunStatus.COMPLETED: EventType.AUTOMATION_RUN_COMPLETED,
        RunStatus.FAILED: EventType.AUTOMATION_RUN_FAILED,
    }.get(status)
    if kind is not None:
        await events_repo.insert_events(tx, [run_event(ended, kind, now, error)])
    return ended


def run_event(run: Run, kind: EventType, now: int, error: str | None = None) -> Event:
    data: dict[str, Any] = {
        "object": "automation_run",
        "id": run.id,
        "automation_id": run.automation_id,
        "contact_id": run.contact_id,
        "status": run.status.value,
        "started_at": format_ms(run.created_at),
        "completed_at": format_ms(run.completed_at),
    }
    if error is not None:
        data["error"] = error
    return Event(new_id(), run.team_id, kind, None, now, data)

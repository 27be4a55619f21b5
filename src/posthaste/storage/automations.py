"""A team's automations with their graph versions, and their runs with the steps each reached."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from typing import Any

from sqlalchemy import Select, delete, select, tuple_, update

from posthaste.core.automation_runs import Automation, Run, RunStatus, RunStep, StepStatus
from posthaste.core.automations import AutomationStatus, Graph, graph_from_record, graph_record
from posthaste.core.models import KeyMode
from posthaste.storage import bulk
from posthaste.storage.database import Tx
from posthaste.storage.keyset import read_page
from posthaste.storage.tables import (
    automation_run_steps,
    automation_runs,
    automation_versions,
    automations,
)

STREAM_ROWS = 500


def _automation(row: Any) -> Automation:
    return Automation(
        id=row.id,
        team_id=row.team_id,
        name=row.name,
        status=AutomationStatus(row.status),
        mode=KeyMode(row.mode),
        version_id=row.version_id,
        graph=graph_from_record(row.graph),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _with_graph() -> Select[Any]:
    return select(automations, automation_versions.c.graph).join(
        automation_versions, automation_versions.c.id == automations.c.version_id
    )


async def insert_automation(tx: Tx, automation: Automation) -> None:
    await tx.conn.execute(
        automations.insert().values(
            id=automation.id, team_id=automation.team_id, created_at=automation.created_at,
            **_values(automation),
        )
    )  # fmt: skip
    await insert_version(tx, automation)


async def insert_version(tx: Tx, automation: Automation) -> None:
    """Store the automation's graph as the version ``automation.version_id``."""
    await tx.conn.execute(
        automation_versions.insert().values(
            id=automation.version_id, automation_id=automation.id, team_id=automation.team_id,
            graph=graph_record(automation.graph), created_at=automation.updated_at,
        )
    )  # fmt: skip


def _values(automation: Automation) -> dict[str, Any]:
    return {
        "name": automation.name,
        "status": automation.status.value,
        "mode": automation.mode.value,
        "version_id": automation.version_id,
        "trigger_event": automation.graph.trigger_event,
        "updated_at": automation.updated_at,
    }


async def get_automation(
    tx: Tx, team_id: str, automation_id: str, *, for_update: bool = False
) -> Automation | None:
    query = _with_graph().where(automations.c.team_id == team_id, automations.c.id == automation_id)
    if for_update:
        query = query.with_for_update(of=automations)
    row = (await tx.conn.execute(query)).first()
    return _automation(row) if row else None


async def enabled_modes(tx: Tx, keys: Collection[tuple[str, str]]) -> dict[str, KeyMode]:
    """The mode each enabled automation of these ``(team_id, automation_id)`` sends in, by
    automation id; the disabled and deleted ones are left out."""
    query = select(automations.c.id, automations.c.mode).where(
        tuple_(automations.c.team_id, automations.c.id).in_(sorted(set(keys))),
        automations.c.status == AutomationStatus.ENABLED.value,
    )
    return {row.id: KeyMode(row.mode) for row in await tx.conn.execute(query)}


async def update_automation(tx: Tx, automation: Automation) -> None:
    query = (
        update(automations)
        .where(automations.c.team_id == automation.team_id, automations.c.id == automation.id)
        .values(**_values(automation))
    )
    await tx.conn.execute(query)


async def delete_automation(tx: Tx, team_id: str, automation_id: str) -> None:
    """Remove the automation with its versions and runs (cascade); their jobs end alone."""
    query = delete(automations).where(
        automations.c.team_id == team_id, automations.c.id == automation_id
    )
    await tx.conn.execute(query)


def _listed(status: AutomationStatus | None) -> Select[Any]:
    query = _with_graph()
    return query if status is None else query.where(automations.c.status == status.value)


async def stream_automations(
    tx: Tx, team_id: str, status: AutomationStatus | None
) -> AsyncIterator[Automation]:
    query = (
        _listed(status)
        .where(automations.c.team_id == team_id)
        .order_by(automations.c.created_at, automations.c.id)
    )
    result = await tx.conn.stream(query.execution_options(yield_per=STREAM_ROWS))
    async for row in result:
        yield _automation(row)


async def page_automations(
    tx: Tx,
    team_id: str,
    status: AutomationStatus | None,
    limit: int,
    anchor: str | None,
    *,
    backwards: bool,
) -> tuple[list[Automation], bool] | None:
    return await read_page(
        tx, automations, _listed(status), _automation, team_id=team_id, limit=limit,
        anchor=anchor, newest_first=False, backwards=backwards,
    )  # fmt: skip


async def enabled_with_trigger(tx: Tx, team_id: str, event: str) -> list[Automation]:
    """The team's enabled automations whose trigger is ``event``."""
    query = _with_graph().where(
        automations.c.team_id == team_id,
        automations.c.trigger_event == event,
        automations.c.status == AutomationStatus.ENABLED.value,
    )
    return [_automation(row) for row in await tx.conn.execute(query)]


async def graph_of_version(tx: Tx, version_id: str) -> Graph | None:
    query = select(automation_versions.c.graph).where(automation_versions.c.id == version_id)
    graph = (await tx.conn.execute(query)).scalar()
    return None if graph is None else graph_from_record(graph)


# Runs


def run_row(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "team_id": run.team_id,
        "automation_id": run.automation_id,
        "version_id": run.version_id,
        "contact_id": run.contact_id,
        "status": run.status.value,
        "current_step": run.current_step,
        "event": run.event,
        "waiting_for": run.waiting_for,
        "created_at": run.created_at,
        "completed_at": run.completed_at,
    }


def step_row(team_id: str, step: RunStep) -> dict[str, Any]:
    return {
        "run_id": step.run_id,
        "key": step.key,
        "team_id": team_id,
        "type": step.type,
        "status": step.status.value,
        "started_at": step.started_at,
        "completed_at": step.completed_at,
        "output": step.output,
        "error": step.error,
    }


def started_runs(runs: Sequence[Run]) -> list[bulk.TableRows]:
    """New runs and the steps they start with, to store in one statement with their events
    and jobs (``events.insert_events``'s ``also``)."""
    steps = [step_row(run.team_id, step) for run in runs for step in run.steps]
    return [(automation_runs, [run_row(run) for run in runs]), (automation_run_steps, steps)]


def _run(row: Any, steps: Sequence[RunStep] = ()) -> Run:
    return Run(
        id=row.id,
        team_id=row.team_id,
        automation_id=row.automation_id,
        version_id=row.version_id,
        contact_id=row.contact_id,
        status=RunStatus(row.status),
        current_step=row.current_step,
        event=dict(row.event or {}),
        waiting_for=row.waiting_for,
        created_at=row.created_at,
        completed_at=row.completed_at,
        steps=tuple(steps),
    )


def _run_step(row: Any) -> RunStep:
    return RunStep(
        run_id=row.run_id,
        key=row.key,
        type=row.type,
        status=StepStatus(row.status),
        started_at=row.started_at,
        completed_at=row.completed_at,
        output=row.output,
        error=row.error,
    )


async def get_run(
    tx: Tx, team_id: str, run_id: str, *, automation_id: str | None = None, lock: bool = False
) -> Run | None:
    """The team's run with its steps (in the order they started); ``lock`` holds the run's row
    until the transaction ends, so one step of a run executes at a time."""
    query = select(automation_runs).where(
        automation_runs.c.team_id == team_id, automation_runs.c.id == run_id
    )
    if automation_id is not None:
        query = query.where(automation_runs.c.automation_id == automation_id)
    if lock:
        query = query.with_for_update()
    row = (await tx.conn.execute(query)).first()
    if row is None:
        return None
    steps = select(automation_run_steps).where(automation_run_steps.c.run_id == run_id)
    found = [_run_step(r) for r in await tx.conn.execute(steps)]
    return _run(row, sorted(found, key=lambda s: (s.started_at, s.completed_at or 0)))


async def lock_runs(tx: Tx, keys: Collection[tuple[str, str]]) -> dict[str, Run]:
    """The runs of these ``(team_id, run_id)`` with their steps, by run id, held until the
    transaction ends (in id order), so one step of a run executes at a time: two statements
    whatever their number. By id alone, the team checked on the rows (as
    ``contacts.get_contacts``: no plan through a team index while statistics are missing)."""
    wanted = set(keys)
    query = (
        select(automation_runs)
        .where(automation_runs.c.id.in_(sorted({run_id for _, run_id in wanted})))
        .order_by(automation_runs.c.id)
        .with_for_update()
    )
    found = (await tx.conn.execute(query)).all()
    rows = [row for row in found if (row.team_id, row.id) in wanted]
    if not rows:
        return {}
    steps: dict[str, list[RunStep]] = {row.id: [] for row in rows}
    query = select(automation_run_steps).where(automation_run_steps.c.run_id.in_(list(steps)))
    for found in await tx.conn.execute(query):
        steps[found.run_id].append(_run_step(found))
    return {
        row.id: _run(row, sorted(steps[row.id], key=lambda s: (s.started_at, s.completed_at or 0)))
        for row in rows
    }


def _progress(run: Run) -> dict[str, Any]:
    return {
        "team_id": run.team_id,
        "id": run.id,
        "status": run.status.value,
        "current_step": run.current_step,
        "waiting_for": run.waiting_for,
        "completed_at": run.completed_at,
    }


async def update_runs_progress(tx: Tx, runs: Sequence[Run]) -> None:
    """Write each run's status, current step, awaited event and end, in one statement."""
    if runs:
        await bulk.update_rows(tx, automation_runs, ["team_id", "id"], [_progress(r) for r in runs])


def new_steps(steps: Sequence[tuple[str, RunStep]]) -> bulk.TableRows:
    """Rows of ``(team_id, step)`` the runs did not have, to store with other rows in one
    statement (``events.insert_events``'s ``also``)."""
    return automation_run_steps, [step_row(team_id, step) for team_id, step in steps]


async def update_steps(tx: Tx, steps: Sequence[tuple[str, RunStep]]) -> None:
    """Overwrite the runs' rows of these ``(team_id, step)`` (their status, end, output and
    error), in one statement."""
    rows = [
        {k: v for k, v in step_row(team_id, step).items() if k not in ("type", "started_at")}
        for team_id, step in steps
    ]
    if rows:
        await bulk.update_rows(tx, automation_run_steps, ["team_id", "run_id", "key"], rows)


async def update_run(tx: Tx, run: Run) -> None:
    values = run_row(run)
    for fixed in ("id", "team_id", "automation_id", "version_id", "contact_id", "created_at"):
        del values[fixed]
    query = (
        update(automation_runs)
        .where(automation_runs.c.team_id == run.team_id, automation_runs.c.id == run.id)
        .values(**values)
    )
    await tx.conn.execute(query)


async def waiting_runs(tx: Tx, team_id: str, contact_id: str, event: str) -> list[Run]:
    """The contact's running runs waiting for ``event``, held until the transaction ends."""
    query = (
        select(automation_runs)
        .where(
            automation_runs.c.team_id == team_id,
            automation_runs.c.contact_id == contact_id,
            automation_runs.c.waiting_for == event,
            automation_runs.c.status == RunStatus.RUNNING.value,
        )
        .with_for_update()
    )
    return [_run(row) for row in await tx.conn.execute(query)]


async def cancel_running(tx: Tx, team_id: str, automation_id: str, now: int) -> int:
    """Mark every running run of the automation cancelled; their jobs end when they run."""
    query = (
        update(automation_runs)
        .where(
            automation_runs.c.team_id == team_id,
            automation_runs.c.automation_id == automation_id,
            automation_runs.c.status == RunStatus.RUNNING.value,
        )
        .values(status=RunStatus.CANCELLED.value, completed_at=now, waiting_for=None)
    )
    return int((await tx.conn.execute(query)).rowcount)


def _runs_of(automation_id: str, statuses: Collection[RunStatus]) -> Select[Any]:
    query = select(automation_runs).where(automation_runs.c.automation_id == automation_id)
    if statuses:
        query = query.where(automation_runs.c.status.in_([s.value for s in statuses]))
    return query


async def stream_runs(
    tx: Tx, team_id: str, automation_id: str, statuses: Collection[RunStatus]
) -> AsyncIterator[Run]:
    """The automation's runs, newest first, in flat memory (without their steps)."""
    query = (
        _runs_of(automation_id, statuses)
        .where(automation_runs.c.team_id == team_id)
        .order_by(automation_runs.c.created_at.desc(), automation_runs.c.id.desc())
    )
    result = await tx.conn.stream(query.execution_options(yield_per=STREAM_ROWS))
    async for row in result:
        yield _run(row)


async def page_runs(
    tx: Tx,
    team_id: str,
    automation_id: str,
    statuses: Collection[RunStatus],
    limit: int,
    anchor: str | None,
    *,
    backwards: bool,
) -> tuple[list[Run], bool] | None:
    return await read_page(
        tx, automation_runs, _runs_of(automation_id, statuses), _run, team_id=team_id,
        limit=limit, anchor=anchor, newest_first=True, backwards=backwards,
    )  # fmt: skip

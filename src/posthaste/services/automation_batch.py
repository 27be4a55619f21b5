"""What a claimed batch of ``automation_step`` jobs reads and writes, a few statements for the lot.

``StepBatch.load`` locks the batch's runs (with their steps), fences its jobs (those claimed
again by another worker meanwhile are left out, the others locked until the commit), and reads
the automations' modes and the runs' contacts: five statements whatever the batch's size. The
steps then execute against it in memory, except the effects that change other things (a
contact, a segment), which write at once; what the steps did to the runs (their step rows, the
runs' progress and ends with their events, each job's end or next due time) is kept and
written by ``write`` as grouped statements in the same transaction, before its one commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from posthaste.core.automation_runs import Run, RunStatus, RunStep
from posthaste.core.contacts import Contact
from posthaste.core.events import EventType
from posthaste.core.models import Event, Job, KeyMode, Team
from posthaste.services.automation_runs import run_event
from posthaste.storage import automations as repo
from posthaste.storage import contacts as contacts_repo
from posthaste.storage import events as events_repo
from posthaste.storage import jobs as jobs_repo
from posthaste.storage import teams as teams_repo
from posthaste.storage.database import Tx

_ENDED_EVENTS = {
    RunStatus.COMPLETED: EventType.AUTOMATION_RUN_COMPLETED,
    RunStatus.FAILED: EventType.AUTOMATION_RUN_FAILED,
}


@dataclass
class StepBatch:
    """The batch's jobs still held, their runs as locked, and the writes kept for ``write``."""

    tx: Tx
    now: int
    jobs: list[Job]
    runs: dict[str, Run]  # as loaded, by id
    modes: dict[str, KeyMode]  # of the enabled automations, by id
    contacts: dict[str, Contact | None]  # None: deleted (meanwhile, by a step)
    _teams: dict[str, Team] = field(default_factory=dict)
    _new_steps: dict[tuple[str, str], tuple[str, RunStep]] = field(default_factory=dict)
    _changed_steps: dict[tuple[str, str], tuple[str, RunStep]] = field(default_factory=dict)
    _progress: dict[str, Run] = field(default_factory=dict)
    _events: list[Event] = field(default_factory=list)
    _finished: list[Job] = field(default_factory=list)
    _retried: list[tuple[Job, int]] = field(default_factory=list)

    @classmethod
    async def load(cls, tx: Tx, claimed: list[Job], now: int) -> StepBatch:
        """Lock the runs first, then the jobs: the order of every other writer of both (an
        awaited event, a cancelled run), so none of them deadlocks with a batch."""
        runs = await repo.lock_runs(tx, [(_team(job), job.ref) for job in claimed])
        held = _one_per_run(await jobs_repo.still_held(tx, claimed))
        running = [runs[j.ref] for j in held if j.ref in runs]
        running = [run for run in running if run.status is RunStatus.RUNNING]
        modes = await repo.enabled_modes(tx, {(r.team_id, r.automation_id) for r in running})
        found = await contacts_repo.get_contacts(tx, {(r.team_id, r.contact_id) for r in running})
        contacts: dict[str, Contact | None] = dict(found)
        return cls(tx, now, held, runs, modes, contacts)

    async def team(self, team_id: str) -> Team:
        found = self._teams.get(team_id)
        if found is None:
            found = await teams_repo.get_team(self.tx, team_id)
            assert found is not None
            self._teams[team_id] = found
        return found

    def save_step(self, run: Run, step: RunStep) -> None:
        """Keep the run's row for ``step`` (a new one, or one the run had: overwritten)."""
        key = (run.id, step.key)
        loaded = self.runs.get(run.id)
        had = loaded is not None and loaded.step(step.key) is not None
        (self._changed_steps if had else self._new_steps)[key] = (run.team_id, step)

    def update_run(self, run: Run) -> None:
        self._progress[run.id] = run

    def end_run(self, run: Run, status: RunStatus, error: str | None = None) -> Run:
        """Close the run (completed, failed or cancelled) with its event (none for cancelled)."""
        ended = replace(
            run, status=status, current_step=None, waiting_for=None, completed_at=self.now
        )
        self._progress[run.id] = ended
        kind = _ENDED_EVENTS.get(status)
        if kind is not None:
            self._events.append(run_event(ended, kind, self.now, error))
        return ended

    def finish(self, job: Job) -> None:
        self._finished.append(job)

    def retry(self, job: Job, due_at: int) -> None:
        self._retried.append((job, due_at))

    async def write(self) -> None:
        """Everything kept, as grouped statements: the new step rows with the runs' events (one
        statement on PostgreSQL), the overwritten step rows, the runs' progress, the jobs."""
        also = [repo.new_steps(list(self._new_steps.values()))]
        await events_repo.insert_events(self.tx, self._events, also)
        await repo.update_steps(self.tx, list(self._changed_steps.values()))
        await repo.update_runs_progress(self.tx, list(self._progress.values()))
        await jobs_repo.finish_many(self.tx, self._finished)
        await jobs_repo.retry_many(self.tx, self._retried)


def _one_per_run(held: list[Job]) -> list[Job]:
    """A run has one job; should two of a run be claimed together, the second waits for its
    lease to run out (by then the first's progress is committed and it is read afresh)."""
    first: dict[str, Job] = {}
    for job in held:
        first.setdefault(job.ref, job)
    return list(first.values())


def _team(job: Job) -> str:
    assert job.team_id is not None
    return job.team_id

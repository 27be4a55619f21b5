"""The job-kind table: every kind services enqueue has exactly one handler that a worker runs."""

from __future__ import annotations

from posthaste.core.jobs import JobKind
from posthaste.workers.kinds import JOB_KINDS, Batched, OneByOne


def test_every_job_kind_has_an_entry_in_the_table() -> None:
    assert set(JOB_KINDS) == set(JobKind)


def test_deliveries_and_automation_steps_run_batched_the_others_one_by_one() -> None:
    assert isinstance(JOB_KINDS[JobKind.DELIVER_EMAIL], Batched)
    assert isinstance(JOB_KINDS[JobKind.AUTOMATION_STEP], Batched)
    assert isinstance(JOB_KINDS[JobKind.CHECK_DOMAIN], OneByOne)
    assert isinstance(JOB_KINDS[JobKind.IMPORT_CONTACTS], OneByOne)
    assert isinstance(JOB_KINDS[JobKind.EXPAND_BROADCAST], OneByOne)


def test_job_kinds_are_the_names_stored_in_the_queue() -> None:
    # Rows already queued carry these names: renaming a member must not change its value.
    assert {kind.value for kind in JobKind} == {
        "deliver_email",
        "check_domain",
        "import_contacts",
        "expand_broadcast",
        "automation_step",
        "purge",
        "tls_report",
        "upload_tls_report",
        "refresh_mta_sts",
    }

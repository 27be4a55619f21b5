"""The ``automation_step`` job kind: execute one automation run's current step, one job at a
time; see ``StepRunner.run_step`` in ``services/automation_steps.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from posthaste.workers.runner import Handler

if TYPE_CHECKING:
    from posthaste.bootstrap import Services


def run_automation_step(services: Services) -> Handler:
    """The handler of ``automation_step`` jobs: ``StepRunner.run_step``."""
    return services.automation_steps.run_step

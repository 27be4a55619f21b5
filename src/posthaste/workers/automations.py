"""The ``automation_step`` job kind: execute automation runs' current steps, the claimed ones
together in one transaction; see ``StepRunner.run_steps`` in ``services/automation_steps.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from posthaste.workers.runner import BatchHandler

if TYPE_CHECKING:
    from posthaste.bootstrap import Services


def run_automation_steps(services: Services) -> BatchHandler:
    """The handler of ``automation_step`` jobs: ``StepRunner.run_steps``."""
    return services.automation_steps.run_steps


def steps_a_claim(services: Services) -> int:
    """How many step jobs a claim takes at most (``POSTHASTE_AUTOMATION_CLAIM_SIZE``, 256): a
    batch's statements are the same whatever its size, so a step costs about half at 256 a
    claim what it costs at 32 (bench/README.md, "Automations")."""
    return services.settings.automation_claim_size

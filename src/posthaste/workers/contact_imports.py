"""The ``import_contacts`` job kind: one contact import, a part of its CSV per transaction.

Each part's progress is committed with its contacts (``ContactImportService.run`` in
``services/contact_imports.py``), so a job claimed again after a crash goes on where it stopped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from posthaste.workers.runner import Handler

if TYPE_CHECKING:
    from posthaste.bootstrap import Services


def import_contacts(services: Services) -> Handler:
    """The handler of ``import_contacts`` jobs: ``ContactImportService.run``."""
    return services.contact_imports.run

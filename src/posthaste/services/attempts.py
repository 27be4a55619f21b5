"""Reading an email's delivery attempts, scoped by team like every other read."""

from __future__ import annotations

from posthaste.core.delivery import DeliveryAttempt
from posthaste.core.models import Principal
from posthaste.errors import NotFound
from posthaste.storage import attempts as attempts_repo
from posthaste.storage import emails as emails_repo
from posthaste.storage.database import Database


class AttemptQueries:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def for_email(self, principal: Principal, email_id: str) -> list[DeliveryAttempt]:
        """Oldest first; another team's email is not found, exactly like a missing one."""
        async with self.db.read() as tx:
            if await emails_repo.get_email(tx, principal.team_id, email_id) is None:
                raise NotFound(f"Email {email_id!r} was not found.")
            return await attempts_repo.list_attempts(tx, principal.team_id, email_id)

"""Rotating the secret key: what is stored encrypted is sealed again with the current key.

After a rotation the key ring is the new key, then the previous ones (``core/crypto.py``):
tokens and links signed with an old key keep verifying, and secrets sealed with one keep
opening, for as long as it stays in ``POSTHASTE_SECRET_KEY_PREVIOUS``. ``reseal`` re-encrypts the
DKIM private keys and the webhook signing secrets with the current key, so that the previous
key is no longer needed for them. Row by row, each in its own short transaction; a secret that
no key of the ring opens is counted and left as it is.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import select, update

from posthaste.core.crypto import (
    DKIM_KEY_PURPOSE,
    WEBHOOK_SECRET_PURPOSE,
    DecryptionError,
    Keys,
    SecretBox,
)
from posthaste.storage.database import Database
from posthaste.storage.tables import domains, webhooks

log = logging.getLogger(__name__)


@dataclass
class Resealed:
    dkim_keys: int = 0
    webhook_secrets: int = 0
    unreadable: int = 0  # sealed with a key that is no longer in the ring


async def reseal(db: Database, keys: Keys) -> Resealed:
    """Seal every stored secret again with the current key (idempotent)."""
    dkim, hooks = SecretBox(keys, DKIM_KEY_PURPOSE), SecretBox(keys, WEBHOOK_SECRET_PURPOSE)
    done = Resealed()
    async with db.read() as tx:
        query = select(domains.c.id, domains.c.dkim_private_key).where(
            domains.c.dkim_private_key.is_not(None)
        )
        domain_rows = (await tx.conn.execute(query)).all()
        hook_rows = (
            await tx.conn.execute(
                select(webhooks.c.id, webhooks.c.secret, webhooks.c.previous_secret)
            )
        ).all()
    for domain in domain_rows:
        fresh = _resealed(dkim, domain.dkim_private_key, done, f"domain {domain.id}")
        if fresh is not None:
            sealed = domains.c.dkim_private_key
            async with db.transaction() as tx:
                await tx.conn.execute(
                    update(domains)
                    .where(domains.c.id == domain.id, sealed == domain.dkim_private_key)
                    .values(dkim_private_key=fresh)
                )
            done.dkim_keys += 1
    for hook in hook_rows:
        values: dict[str, str] = {}
        for column in ("secret", "previous_secret"):
            stored = getattr(hook, column)
            fresh = None if stored is None else _resealed(hooks, stored, done, f"webhook {hook.id}")
            if fresh is not None:
                values[column] = fresh
        if values:
            async with db.transaction() as tx:
                await tx.conn.execute(
                    update(webhooks)
                    .where(webhooks.c.id == hook.id, webhooks.c.secret == hook.secret)
                    .values(values)
                )
            done.webhook_secrets += 1
    return done


def _resealed(box: SecretBox, stored: str, done: Resealed, what: str) -> str | None:
    try:
        return box.reseal(stored)
    except DecryptionError:
        log.error("%s: its secret opens with no key of the ring; left as it is", what)
        done.unreadable += 1
        return None

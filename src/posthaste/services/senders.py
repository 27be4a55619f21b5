"""Who may send from a domain (PRODUCT §7), as the send path's ``SenderPolicy``.

- A key restricted to a domain (``domain_id``) sends only from that domain's exact name.
- Test keys send from any domain; the email's region is that of the team's verified domain of
  the name, else the default region.
- Live keys send only from a name the team owns and has verified: the team holding the
  confirmed claim owns a name; without a claim, the team that verified it first (and is still
  verified) does. Another owner → ``domain_not_owned``; not verified here → ``domain_not_verified``.

Answers are remembered per process for a few seconds (``SENDER_CACHE_SECONDS``): the relay and
the API ask about the same sender for every message. Every change to domains or claims that an
answer depends on (``services.domains``: add, update, delete, a check that gains or loses the
verified state, a claim confirmed or released) notifies ``DOMAINS_CHANNEL`` at commit, which
clears every process's memory (at once in the committing process, a NOTIFY round trip later in
the others on PostgreSQL); the expiry bounds what a missed notification costs. An answer read
while a change was committing is not kept.
"""

from __future__ import annotations

import time
from weakref import WeakKeyDictionary

from posthaste.core.addresses import Address
from posthaste.core.domains import Domain
from posthaste.core.models import Sender
from posthaste.errors import DomainNotOwned, DomainNotVerified, PosthasteError
from posthaste.storage import domains as repo
from posthaste.storage.database import DOMAINS_CHANNEL, Database, Tx

SENDER_CACHE_SECONDS = 5.0
SENDER_CACHE_SIZE = 10_000

# A refusal is kept as its class and message and raised anew each time (a raised exception
# gathers the traceback of every raise).
_Answer = str | tuple[type[PosthasteError], str]
_Key = tuple[str, str, str | None, str]


class DomainSenders:
    def __init__(self, db: Database, default_region: str) -> None:
        self.default_region = default_region
        # (team, key mode, key's domain, sender domain) -> (expiry on the monotonic clock, answer)
        self._answers: dict[_Key, tuple[float, _Answer]] = {}
        self._generation = 0  # bumped by every clear: an answer read across one is not kept
        # And per transaction, whatever the clears: a batch asks once per distinct domain.
        self._in_tx: WeakKeyDictionary[Tx, dict[_Key, _Answer]] = WeakKeyDictionary()
        db.add_listener(DOMAINS_CHANNEL, self.forget)

    def forget(self) -> None:
        """Drop every remembered answer (a domain or a claim changed somewhere)."""
        self._answers.clear()
        self._generation += 1

    async def region_for(self, tx: Tx, sender: Sender, from_: Address) -> str:
        """The region to send in, or raise why this sender may not send from ``from_``'s domain."""
        key = (sender.team_id, sender.mode.value, sender.domain_id, from_.domain)
        now = time.monotonic()
        cached = self._answers.get(key)
        if cached is not None and cached[0] > now:
            answer = cached[1]
        else:
            in_tx = self._in_tx.setdefault(tx, {})
            if key not in in_tx:
                in_tx[key] = await self._answer(tx, sender, key, now)
            answer = in_tx[key]
        if isinstance(answer, str):
            return answer
        error, message = answer
        raise error(message)

    async def _answer(self, tx: Tx, sender: Sender, key: _Key, now: float) -> _Answer:
        generation = self._generation
        answer: _Answer
        try:
            answer = await self._decide(tx, sender, key[3])
        except (DomainNotOwned, DomainNotVerified) as exc:
            answer = (type(exc), exc.message)
        if generation == self._generation:
            if len(self._answers) >= SENDER_CACHE_SIZE:
                self._answers.clear()
            self._answers[key] = (now + SENDER_CACHE_SECONDS, answer)
        return answer

    async def _decide(self, tx: Tx, sender: Sender, name: str) -> str:
        if sender.domain_id is not None:
            await _check_key_domain(tx, sender, sender.domain_id, name)
        domain = await repo.find_by_name(tx, sender.team_id, name)
        if sender.is_test:
            return domain.region if domain is not None and domain.usable else self.default_region
        owner = await repo.name_owner(tx, name)
        if owner is not None and owner != sender.team_id:
            raise DomainNotOwned(_owned_elsewhere(name, domain))
        if domain is None or not domain.usable:
            raise DomainNotVerified(_not_verified(name, domain))
        return domain.region


async def _check_key_domain(tx: Tx, sender: Sender, domain_id: str, name: str) -> None:
    allowed = await repo.get_domain(tx, sender.team_id, domain_id)
    if allowed is None:
        raise DomainNotOwned(
            "This API key is restricted to a domain that was deleted; create a new key."
        )
    if allowed.name != name:
        raise DomainNotOwned(
            f"This API key may send only from {allowed.name!r}, not from {name!r}; use a key "
            "without a domain restriction, or one made for that domain."
        )


def _not_verified(name: str, domain: Domain | None) -> str:
    if domain is None:
        return (
            f"The domain {name!r} is not verified for this team. Add it with POST /domains, "
            "publish its records and verify it, or send with a test key."
        )
    return (
        f"The domain {name!r} is not verified for this team (status {domain.status.value}). "
        f"Publish its records and call POST /domains/{domain.id}/verify, or send with a test key."
    )


def _owned_elsewhere(name: str, domain: Domain | None) -> str:
    """Where to claim the name: this team's own domain entry for it, or how to make one."""
    if domain is None:
        return (
            f"The domain {name!r} is owned by another team. To send from it, add it with "
            "POST /domains and claim it (POST /domains/<its id>/claim) by publishing a DNS record."
        )
    return (
        f"The domain {name!r} is owned by another team. To send from it, claim it "
        f"(POST /domains/{domain.id}/claim) by publishing a DNS record."
    )

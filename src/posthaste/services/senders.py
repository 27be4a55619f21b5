"""Who may send from a domain (PRODUCT §7), as the send path's ``SenderPolicy``.

- A key restricted to a domain (``domain_id``) sends only from that domain's exact name.
- Test keys send from any domain; the email's region is that of the team's verified domain of
  the name, else the default region.
- Live keys send only from a name the team owns and has verified: the team holding the
  confirmed claim owns a name; without a claim, the team that verified it first (and is still
  verified) does. Another owner → ``domain_not_owned``; not verified here → ``domain_not_verified``.

A batch asks about up to 100 senders in one transaction, mostly the same domain: answers are
cached per transaction (a few queries per distinct domain, never per item).
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from posthaste.core.addresses import Address
from posthaste.core.domains import Domain
from posthaste.core.models import Principal
from posthaste.errors import DomainNotOwned, DomainNotVerified, PosthasteError
from posthaste.storage import domains as repo
from posthaste.storage.database import Tx

_Answer = str | PosthasteError


class DomainSenders:
    def __init__(self, default_region: str) -> None:
        self.default_region = default_region
        self._cache: WeakKeyDictionary[Tx, dict[tuple[str, str, str | None, str], _Answer]] = (
            WeakKeyDictionary()
        )

    async def region_for(self, tx: Tx, principal: Principal, sender: Address) -> str:
        """The region to send in, or raise why this key may not send from ``sender``'s domain."""
        key = (principal.team_id, principal.key.mode.value, principal.key.domain_id, sender.domain)
        answers = self._cache.setdefault(tx, {})
        if key not in answers:
            try:
                answers[key] = await self._decide(tx, principal, sender.domain)
            except PosthasteError as exc:
                answers[key] = exc
        answer = answers[key]
        if isinstance(answer, PosthasteError):
            raise answer
        return answer

    async def _decide(self, tx: Tx, principal: Principal, name: str) -> str:
        if principal.key.domain_id is not None:
            await _check_key_domain(tx, principal, principal.key.domain_id, name)
        domain = await repo.find_by_name(tx, principal.team_id, name)
        if principal.is_test:
            return domain.region if domain is not None and domain.usable else self.default_region
        owner = await repo.name_owner(tx, name)
        if owner is not None and owner != principal.team_id:
            raise DomainNotOwned(
                f"The domain {name!r} is owned by another team. To send from it, add it under "
                "/domains and claim it (POST /domains/{{id}}/claim) by publishing a DNS record."
            )
        if domain is None or not domain.usable:
            raise DomainNotVerified(_not_verified(name, domain))
        return domain.region


async def _check_key_domain(tx: Tx, principal: Principal, domain_id: str, name: str) -> None:
    allowed = await repo.get_domain(tx, principal.team_id, domain_id)
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
        "Publish its records and call POST /domains/{{id}}/verify, or send with a test key."
    )

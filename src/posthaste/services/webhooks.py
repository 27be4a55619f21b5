"""Webhook endpoints: create, change, rotate secrets, read deliveries and attempts, replay.

Delivery itself is the dispatcher's (``workers/webhooks.py``): nothing is posted in a request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from posthaste.adapters.webhook_http import HostLookup
from posthaste.core.crypto import SecretBox
from posthaste.core.cursors import PageRequest
from posthaste.core.ids import new_id, now_ms
from posthaste.core.models import Principal
from posthaste.core.netpolicy import Endpoint, endpoint_refusal, resolved_refusal
from posthaste.core.webhook_requests import NewWebhook, WebhookChanges
from posthaste.core.webhooks import (
    OLD_SECRET_GRACE_MS,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
    new_secret,
)
from posthaste.errors import Conflict, NotFound, ServiceUnavailable, ValidationError
from posthaste.storage import webhook_deliveries as deliveries
from posthaste.storage import webhook_endpoints as repo
from posthaste.storage.database import Database


class WebhookService:
    def __init__(
        self, db: Database, box: SecretBox, lookup: HostLookup, *, allow_private: bool
    ) -> None:
        self.db = db
        self.box = box
        self.lookup = lookup
        self.allow_private = allow_private

    async def create(self, principal: Principal, new: NewWebhook) -> tuple[Webhook, str]:
        """A new endpoint and its secret (the only time the secret is shown)."""
        await self._check_reachable(new.endpoint)
        now = now_ms()
        hook = Webhook(
            new_id(), principal.team_id, new.endpoint.url, list(new.events), new.enabled, now, now
        )
        secret = new_secret()
        async with self.db.transaction() as tx:
            await repo.insert_webhook(tx, hook, self.box.encrypt(secret.encode()))
        return hook, secret

    async def all(self, principal: Principal) -> list[Webhook]:
        async with self.db.read() as tx:
            return await repo.list_webhooks(tx, principal.team_id)

    async def page(self, principal: Principal, request: PageRequest) -> tuple[list[Webhook], bool]:
        """Resend's paging (oldest first): the page and whether more lie beyond it."""
        async with self.db.read() as tx:
            page = await repo.page_webhooks(
                tx, principal.team_id, request.limit, request.anchor, backwards=request.backwards
            )
        if page is None:
            raise ValidationError(f"'{request.name}' must be the id of one of your webhooks.")
        return page

    async def get(self, principal: Principal, webhook_id: str) -> Webhook:
        async with self.db.read() as tx:
            hook = await repo.get_webhook(tx, principal.team_id, webhook_id)
        if hook is None:
            raise _not_found(webhook_id)
        return hook

    async def update(
        self, principal: Principal, webhook_id: str, changes: WebhookChanges
    ) -> Webhook:
        """Change ``endpoint``, ``events`` and ``enabled``; re-enabling resumes paused retries."""
        if changes.endpoint is not None:
            await self._check_reachable(changes.endpoint)
        async with self.db.transaction() as tx:
            before = await repo.get_webhook(tx, principal.team_id, webhook_id)
            if before is None:
                raise _not_found(webhook_id)
            await repo.update_webhook(tx, principal.team_id, webhook_id, changes, now_ms())
            if changes.enabled and not before.enabled:
                await deliveries.resume_paused(tx, webhook_id)
        return await self.get(principal, webhook_id)

    async def delete(self, principal: Principal, webhook_id: str) -> None:
        async with self.db.transaction() as tx:
            if not await repo.delete_webhook(tx, principal.team_id, webhook_id):
                raise _not_found(webhook_id)

    async def rotate_secret(self, principal: Principal, webhook_id: str) -> tuple[Webhook, str]:
        """A new secret; the current one keeps signing (as a second signature) for 24 hours."""
        secret = new_secret()
        now = now_ms()
        async with self.db.transaction() as tx:
            target = await repo.get_target(tx, principal.team_id, webhook_id)
            if target is None:
                raise _not_found(webhook_id)
            sealed = self.box.encrypt(secret.encode())
            await repo.rotate_secret(tx, target, sealed, now + OLD_SECRET_GRACE_MS, now)
        return await self.get(principal, webhook_id), secret

    async def deliveries(
        self, principal: Principal, webhook_id: str
    ) -> AsyncIterator[WebhookDelivery]:
        """Every event sent (or to be sent) to the endpoint, newest first, streamed."""
        await self.get(principal, webhook_id)
        async with self.db.read() as tx:
            async for item in deliveries.iter_deliveries(tx, principal.team_id, webhook_id):
                yield item

    async def deliveries_page(
        self, principal: Principal, webhook_id: str, request: PageRequest
    ) -> tuple[list[WebhookDelivery], bool]:
        """Resend's paging of the endpoint's events (newest first)."""
        async with self.db.read() as tx:
            if await repo.get_webhook(tx, principal.team_id, webhook_id) is None:
                raise _not_found(webhook_id)
            page = await deliveries.page_deliveries(
                tx,
                principal.team_id,
                webhook_id,
                request.limit,
                request.anchor,
                backwards=request.backwards,
            )
        if page is None:
            raise ValidationError(
                f"'{request.name}' must be the id of one of this webhook's events."
            )
        return page

    async def delivery(
        self, principal: Principal, webhook_id: str, event_id: str
    ) -> WebhookDelivery:
        """One event sent (or to be sent) to the endpoint, with its delivery status."""
        async with self.db.read() as tx:
            if await repo.get_webhook(tx, principal.team_id, webhook_id) is None:
                raise _not_found(webhook_id)
            found = await deliveries.get_delivery(tx, principal.team_id, webhook_id, event_id)
        if found is None:
            raise _event_not_found(webhook_id, event_id)
        return found

    async def attempts(
        self, principal: Principal, webhook_id: str, event_id: str
    ) -> list[WebhookAttempt]:
        async with self.db.read() as tx:
            found = await deliveries.get_delivery(tx, principal.team_id, webhook_id, event_id)
            if found is None:
                raise _event_not_found(webhook_id, event_id)
            return await deliveries.list_attempts(tx, principal.team_id, webhook_id, event_id)

    async def replay(self, principal: Principal, webhook_id: str, event_id: str) -> WebhookDelivery:
        """Deliver the event again at once (same ``webhook-id``); the attempt is recorded."""
        async with self.db.transaction() as tx:
            hook = await repo.get_webhook(tx, principal.team_id, webhook_id)
            if hook is None:
                raise _not_found(webhook_id)
            if not hook.enabled:
                raise Conflict("The webhook is disabled; enable it (PATCH enabled: true) first.")
            found = await deliveries.get_delivery(tx, principal.team_id, webhook_id, event_id)
            if found is None:
                raise _event_not_found(webhook_id, event_id)
            await deliveries.replay(tx, found, now_ms())
            replayed = await deliveries.get_delivery(tx, principal.team_id, webhook_id, event_id)
        assert replayed is not None
        return replayed

    async def _check_reachable(self, endpoint: Endpoint) -> None:
        """Refuse an endpoint that leads to a non-public address (unless allowed).

        A name is resolved now (``POSTHASTE_DNS_NAMESERVERS``, else the system resolver): every
        address must be public; ``localhost`` names are refused without asking. Delivery checks
        again before each connection, so a name that changes its answer later is refused then.
        """
        if self.allow_private:
            return
        refusal = endpoint_refusal(endpoint)
        if refusal is None and endpoint.address is None:
            refusal = resolved_refusal(endpoint.host, await self._addresses(endpoint.host))
        if refusal is not None:
            raise ValidationError(_private_message(refusal))

    async def _addresses(self, host: str) -> list[str]:
        """A name's addresses now: a name without any is invalid, a lookup failing now a 503."""
        try:
            addresses = await self.lookup.addresses(host)
        except OSError as exc:
            raise ServiceUnavailable(
                f"The endpoint's host {host} could not be resolved now ({exc}); retry shortly."
            ) from None
        if not addresses:
            raise ValidationError(
                f"'endpoint' host {host} does not resolve to any address (no A or AAAA record)."
            )
        return addresses


def _private_message(reason: str) -> str:
    return (
        f"'endpoint' is not reachable from the service: {reason}. Webhooks go only to public "
        "addresses (an operator may set POSTHASTE_WEBHOOK_ALLOW_PRIVATE=true)."
    )


def _not_found(webhook_id: str) -> NotFound:
    return NotFound(f"Webhook {webhook_id!r} was not found.")


def _event_not_found(webhook_id: str, event_id: str) -> NotFound:
    return NotFound(f"Event {event_id!r} was not found for webhook {webhook_id!r}.")

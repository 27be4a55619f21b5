"""Outbound transports: how a built message leaves the service.

Each transport takes the envelope and the exact bytes and answers a ``DeliveryReport``: one
``RecipientReply`` per recipient and a ``SessionLog`` (with the SMTP transcript) per server it
spoke to. ``capture`` keeps mail on this machine (the raw message is already stored with the
email) and reports it delivered; ``smtp://`` hands everything to one relay; ``mx`` goes to each
recipient domain's MX hosts (``smtp_transports``). Test mode always uses ``capture``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from posthaste.adapters.dns import Resolver
from posthaste.adapters.envelope import DeliveryReport, Envelope, RecipientReply, SessionLog
from posthaste.adapters.smtp_client import (
    ClientOptions,
    ConnectionPool,
    TlsContextFactory,
    tls_context_for,
)
from posthaste.adapters.smtp_transports import (
    Busy,
    MachineAddress,
    MxTransport,
    SmarthostTransport,
    SourcePicker,
    Throttle,
    TlsPolicies,
    Unthrottled,
)
from posthaste.config import DeliveryTarget, Settings
from posthaste.core.ids import now_ms

__all__ = [
    "Busy",
    "CaptureTransport",
    "DeliveryReport",
    "Envelope",
    "RecipientReply",
    "SessionLog",
    "Transport",
    "TransportRegistry",
    "build_transports",
]


class Transport(Protocol):
    name: str

    async def send(self, envelope: Envelope, raw: bytes) -> DeliveryReport: ...


class CaptureTransport:
    """Keeps every message locally and reports it delivered: development and test mode."""

    name = "capture"

    async def send(self, envelope: Envelope, raw: bytes) -> DeliveryReport:
        replies = [
            RecipientReply(r, 250, "2.0.0 OK captured", True, envelope.message_id)
            for r in envelope.recipients
        ]
        log = SessionLog(self.name, None, list(envelope.recipients), now_ms(), 0, [])
        return DeliveryReport(replies, [log])


class TransportRegistry:
    """The transport per region, and the capture transport that test mode always uses."""

    def __init__(
        self,
        by_region: Mapping[str, Transport],
        capture: Transport,
        pool: ConnectionPool | None = None,
    ) -> None:
        self.by_region = dict(by_region)
        self.capture = capture
        self.pool = pool

    def for_email(self, region: str, test_mode: bool) -> Transport:
        if test_mode:
            return self.capture
        return self.by_region.get(region, self.capture)

    def secure_with(self, policies: TlsPolicies) -> None:
        """Let every ``mx`` transport apply MTA-STS through ``policies``."""
        for transport in self.by_region.values():
            if isinstance(transport, MxTransport):
                transport.tls_policies = policies

    def pace_with(self, throttle: Throttle) -> None:
        """Let ``throttle`` pace every ``mx`` transport that has none of its own."""
        for transport in self.by_region.values():
            if isinstance(transport, MxTransport) and isinstance(transport.throttle, Unthrottled):
                transport.throttle = throttle

    def draw_from(self, sources: SourcePicker) -> None:
        """Let every ``mx`` transport bind its messages to their IP pool's addresses."""
        for transport in self.by_region.values():
            if isinstance(transport, MxTransport) and isinstance(transport.sources, MachineAddress):
                transport.sources = sources

    def holding(self) -> bool:
        """Whether a transport knows a busy destination now (``busy`` may hold mail)."""
        return any(isinstance(t, MxTransport) and t.holding() for t in self.by_region.values())

    def busy(self, region: str, test_mode: bool, recipients: Sequence[str]) -> Busy | None:
        """The destination to hold mail to ``recipients`` for, when its every destination is
        known to be busy now (``MxTransport.busy``); None to send it now."""
        transport = self.for_email(region, test_mode)
        if isinstance(transport, MxTransport):
            return transport.busy(recipients)
        return None

    async def hold(self, region: str, busy: Busy, count: int) -> list[int]:
        """The turns (epoch ms) of ``count`` mails of ``region`` held for ``busy``."""
        transport = self.by_region.get(region)
        if isinstance(transport, MxTransport):
            return await transport.hold(busy, count)
        return [busy.at] * count

    async def close(self) -> None:
        """Close the idle pooled SMTP connections."""
        if self.pool is not None:
            await self.pool.close()


def build_transports(
    settings: Settings,
    *,
    tls_context: TlsContextFactory | None = None,
    mx_port: int = 25,
    per_destination: int = 8,
) -> TransportRegistry:
    """``tls_context`` and ``mx_port`` let tests trust their sink's certificate and port;
    without ``tls_context``, verified TLS trusts ``POSTHASTE_TLS_CA_FILE`` (else the system)."""
    tls_context = tls_context or tls_context_for(settings.tls_ca_file)
    capture = CaptureTransport()
    pool = ConnectionPool(per_destination)
    resolver = Resolver(settings.dns_nameservers, cached=True)
    by_region: dict[str, Transport] = {}
    for region in settings.regions:
        options = ClientOptions(
            settings.mx_host_for(region),
            timeout=settings.smtp_timeout_for(region),
            tls_context=tls_context,
        )
        target = settings.delivery_for(region)
        by_region[region] = _transport_for(target, capture, options, pool, resolver, mx_port)
    return TransportRegistry(by_region, capture, pool)


def _transport_for(
    target: DeliveryTarget,
    capture: Transport,
    options: ClientOptions,
    pool: ConnectionPool,
    resolver: Resolver,
    mx_port: int,
) -> Transport:
    if target.kind == "smtp":
        return SmarthostTransport(target, options, pool)
    if target.kind == "mx":
        return MxTransport(resolver, options, pool, mx_port)
    return capture

"""Outbound transports: how a built message leaves the service.

Each transport takes the envelope and the exact bytes and answers one ``RecipientReply`` per
recipient. ``capture`` keeps mail on this machine (the raw message is already stored with the
email) and reports it delivered; the ``smtp://`` and ``mx`` transports arrive with real delivery.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from posthaste.config import DeliveryTarget, Settings
from posthaste.errors import ConfigError


@dataclass(frozen=True)
class Envelope:
    mail_from: str
    recipients: Sequence[str]
    message_id: str
    smtputf8: bool = False


@dataclass(frozen=True)
class RecipientReply:
    recipient: str
    code: int
    text: str
    # True when the reply is the final destination's (a 250 means delivered, not just relayed).
    final: bool
    provider_message_id: str | None = None


class Transport(Protocol):
    name: str

    async def send(self, envelope: Envelope, raw: bytes) -> list[RecipientReply]: ...


class CaptureTransport:
    """Keeps every message locally and reports it delivered: development and test mode."""

    name = "capture"

    async def send(self, envelope: Envelope, raw: bytes) -> list[RecipientReply]:
        return [
            RecipientReply(r, 250, "2.0.0 OK captured", True, envelope.message_id)
            for r in envelope.recipients
        ]


class TransportRegistry:
    """The transport per region, and the capture transport that test mode always uses."""

    def __init__(self, by_region: Mapping[str, Transport], capture: Transport) -> None:
        self.by_region = dict(by_region)
        self.capture = capture

    def for_email(self, region: str, test_mode: bool) -> Transport:
        if test_mode:
            return self.capture
        return self.by_region.get(region, self.capture)


def build_transports(settings: Settings) -> TransportRegistry:
    capture = CaptureTransport()
    by_region: dict[str, Transport] = {}
    for region in settings.regions:
        by_region[region] = _transport_for(settings.delivery_for(region), capture)
    return TransportRegistry(by_region, capture)


def _transport_for(target: DeliveryTarget, capture: Transport) -> Transport:
    if target.kind == "capture":
        return capture
    raise ConfigError(
        f"POSTHASTE_DELIVERY: the {target.kind!r} transport is not available in this version; "
        "use 'capture'"
    )

"""The one reply classifier, and VERP tokens."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.delivery import Outcome, classify_smtp_reply, enhanced_status
from posthaste.core.verp import read_verp, verp_address, verp_signer

SIGNER = verp_signer("a-secret-key-" + "k" * 40)


@pytest.mark.parametrize(
    ("code", "text", "final", "outcome", "suppress", "subtype"),
    [
        (250, "2.0.0 OK", True, Outcome.DELIVERED, False, None),
        (250, "2.0.0 Ok: queued as X", False, Outcome.ACCEPTED, False, None),
        (451, "4.3.0 try later", True, Outcome.DEFERRED, False, None),
        (421, "4.4.1 Connection failed", True, Outcome.DEFERRED, False, None),
        (550, "5.1.1 User unknown", True, Outcome.BOUNCED, True, "NoEmail"),
        (550, "5.1.2 Bad domain", False, Outcome.BOUNCED, True, "NoEmail"),
        (
            550,
            "5.5.0 Requested action not taken: mailbox unavailable",
            True,
            Outcome.BOUNCED,
            True,
            "General",
        ),
        (550, "5.7.1 Refused as spam", True, Outcome.BOUNCED, False, "General"),
        (554, "5.7.26 DMARC policy", True, Outcome.BOUNCED, False, "General"),
        (552, "5.2.2 Mailbox full", True, Outcome.BOUNCED, False, "MailboxFull"),
        (552, "5.3.4 Message too big", True, Outcome.BOUNCED, False, "MessageTooLarge"),
        (550, "Mailbox unavailable", True, Outcome.BOUNCED, False, "General"),
        (553, "sorry, that domain isn't in my list", True, Outcome.BOUNCED, False, "General"),
    ],
)
def test_replies_are_classified(
    code: int, text: str, final: bool, outcome: Outcome, suppress: bool, subtype: str | None
) -> None:
    verdict = classify_smtp_reply(code, text, final_hop=final, last_attempt=False)
    assert verdict.outcome is outcome and verdict.suppress is suppress
    assert verdict.bounce_subtype == subtype
    assert verdict.bounce_type == ("Permanent" if outcome is Outcome.BOUNCED else None)


def test_simulator_bounces_never_suppress() -> None:
    verdict = classify_smtp_reply(
        550, "5.1.1 x", final_hop=True, last_attempt=False, simulated=True
    )
    assert verdict.outcome is Outcome.BOUNCED and not verdict.suppress


def test_the_last_deferral_is_a_transient_bounce() -> None:
    verdict = classify_smtp_reply(451, "4.2.2 full", final_hop=True, last_attempt=True)
    assert (verdict.outcome, verdict.bounce_type, verdict.suppress) == (
        Outcome.BOUNCED,
        "Transient",
        False,
    )


def test_enhanced_status_reads_only_a_leading_code() -> None:
    assert enhanced_status("5.1.1 <x@y>: unknown") == (5, 1, 1)
    assert enhanced_status("User unknown 5.1.1") is None
    assert enhanced_status("5.1.1x") is None


@given(st.uuids(version=4), st.sampled_from(["acme.test", "Mail.Example.COM", "xn--caf-dma.fr"]))
def test_verp_round_trips_and_stays_short(email_id: uuid.UUID, domain: str) -> None:
    address = verp_address(SIGNER, str(email_id), domain)
    local, _, host = address.partition("@")
    assert host == f"send.{domain.lower()}" and len(local) <= 64 and local == local.lower()
    assert read_verp(SIGNER, address) == str(email_id)
    assert read_verp(SIGNER, address.upper()) == str(email_id)


def test_a_forged_or_foreign_verp_address_reads_as_none() -> None:
    address = verp_address(SIGNER, str(uuid.uuid4()), "acme.test")
    local, _, host = address.partition("@")
    flipped = local[:-1] + ("a" if local[-1] != "a" else "b")
    assert read_verp(SIGNER, f"{flipped}@{host}") is None
    assert read_verp(verp_signer("another-secret-" + "z" * 40), address) is None
    for junk in ("bounces@send.acme.test", "bounces+!!@x", "someone@example.com", "bounces+@x"):
        assert read_verp(SIGNER, junk) is None

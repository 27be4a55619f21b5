"""Adaptive throttling per destination, end to end on loopback: a receiver that throttles as
Gmail does (``tests/throttling_receiver.py``) behind a dnslib zone, a plain sink for another
destination, real workers on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select, update

from posthaste.adapters.envelope import RecipientReply
from posthaste.adapters.smtp_client import SmtpUnavailable, Transcript
from posthaste.bootstrap import Services, build_services
from posthaste.config import DeliveryTarget, Settings
from posthaste.core import destinations as rules
from posthaste.core.destinations import Policies
from posthaste.core.ids import now_ms
from posthaste.services.destinations import DestinationThrottle
from posthaste.storage import destinations as repo
from posthaste.storage.tables import destinations, emails, jobs
from tests.apps import make_app
from tests.conftest import Tenant, _empty_tables, make_tenant
from tests.dns_server import ZoneServer
from tests.integration.test_api_emails import assert_error
from tests.openapi_check import checked_client
from tests.senders import AnySender
from tests.smtp_sink import Sink, running_sink
from tests.throttling_receiver import ThrottlingReceiver, running_receiver

GMAIL_ADDRESS = "127.0.0.2"


def _zone(zone: ZoneServer) -> None:
    # Two recipient domains on Google's MX hosts (one destination), one elsewhere.
    zone.set("gmail.test", "MX", (5, "gmail-smtp-in.l.google.com"))
    zone.set("workspace.test", "MX", (1, "aspmx.l.google.com"))
    zone.set("gmail-smtp-in.l.google.com", "A", GMAIL_ADDRESS)
    zone.set("aspmx.l.google.com", "A", GMAIL_ADDRESS)
    zone.set("other.test", "MX", (10, "mx.other.test"))
    zone.set("mx.other.test", "A", "127.0.0.1")


def _configured(settings: Settings, zone: ZoneServer, google_rate: float, **extra: Any) -> Settings:
    return dataclasses.replace(
        settings,
        delivery=DeliveryTarget(kind="mx"),
        dns_nameservers=zone.nameservers,
        # One retry, an hour away: a 421 that used up an attempt would stall its email.
        delivery_retry_schedule=(3600.0,),
        destinations=Policies({"google.com": {"rate": google_rate}, "default": {"rate": 500.0}}),
        **extra,
    )


@asynccontextmanager
async def _services(settings: Settings, mx_port: int, *, empty: bool) -> AsyncIterator[Services]:
    from posthaste.adapters.transports import build_transports

    built = build_services(
        settings,
        senders=AnySender(settings.default_region),
        transports=build_transports(settings, mx_port=mx_port),
    )
    if empty:
        await _empty_tables(built)
    await built.db.start_listening()
    try:
        yield built
    finally:
        await built.close()


@asynccontextmanager
async def _working(*services: Services, batch_size: int = 32) -> AsyncIterator[None]:
    workers = [s.make_worker(batch_size=batch_size) for s in services]
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        yield
    finally:
        for worker in workers:
            worker.stop()
        await asyncio.gather(*tasks)


async def _until(check: Callable[[], Awaitable[bool] | bool], deadline: float = 90.0) -> None:
    """Wait for ``check`` to hold, looking every 50 ms, for at most ``deadline`` seconds."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        found = check()
        if isinstance(found, Awaitable):
            found = await found
        if found:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the condition did not hold before the deadline")


async def _send(http: httpx.AsyncClient, tenant: Tenant, recipients: list[str]) -> list[str]:
    ids: list[str] = []
    for start in range(0, len(recipients), 100):
        body = [
            {"from": "hello@acme.test", "to": r, "subject": "Hi", "text": "Hello"}
            for r in recipients[start : start + 100]
        ]
        response = await http.post("/emails/batch", json=body, headers=tenant.headers("live"))
        assert response.status_code == 200, response.text
        ids.extend(item["id"] for item in response.json()["data"])
    return ids


async def _get(http: httpx.AsyncClient, tenant: Tenant, path: str) -> Any:
    response = await http.get(path, headers=tenant.headers("live"))
    assert response.status_code == 200, response.text
    return response.json()


async def test_a_throttling_receiver_is_obeyed_and_others_go_on(
    settings: Settings, zone: ZoneServer
) -> None:
    _zone(zone)
    gmail = [f"g{i}@{'gmail' if i % 2 else 'workspace'}.test" for i in range(20)]
    others = [f"o{i}@other.test" for i in range(20)]
    async with AsyncExitStack() as stack:
        sink = await stack.enter_async_context(running_sink(Sink()))
        # 5/s: slow enough that a loaded machine still sends faster than it takes (the test
        # needs it to push back), with room for the 421s before it would block.
        receiver = ThrottlingReceiver(per_second=5, block_after=60)
        await stack.enter_async_context(running_receiver(receiver, GMAIL_ADDRESS, sink.port))
        configured = _configured(settings, zone, google_rate=100.0)
        services = await stack.enter_async_context(_services(configured, sink.port, empty=True))
        http = await stack.enter_async_context(checked_client(make_app(services)))
        tenant = await make_tenant(services)
        others_done_at: list[int] = []

        def others_done() -> bool:
            if len(sink.messages) == len(others) and not others_done_at:
                others_done_at.append(len(receiver.delivered))
            return bool(others_done_at)

        ids = await _send(http, tenant, [*gmail, *others])
        async with _working(services):
            await _until(others_done)
            await _until(lambda: len(receiver.delivered) == len(gmail))

        assert not receiver.blocked
        assert receiver.refused, "the receiver never pushed back: nothing was tested"
        assert sorted(receiver.delivered) == sorted(gmail)
        # The other destination went at its own pace, not Google's: all of it was through
        # before Google's receiver had taken everything.
        assert others_done_at[0] < len(gmail)
        by_email = dict(zip([*gmail, *others], ids, strict=True))
        for address, email_id in by_email.items():
            record = await _get(http, tenant, f"/emails/{email_id}")
            assert record["last_event"] == "email.delivered", (address, record)
            attempts = (await _get(http, tenant, f"/emails/{email_id}/attempts"))["data"]
            # Held or refused with 421 as often as it took: still the first attempt.
            assert {a["attempt"] for a in attempts} == {1}, (address, attempts)
            if address.endswith("other.test"):
                assert len(attempts) == 1
        notes = [
            line.get("note", "")
            for email_id in (by_email[a] for a in gmail)
            for attempt in (await _get(http, tenant, f"/emails/{email_id}/attempts"))["data"]
            for line in attempt["transcript"]
        ]
        assert any("answered '421 4.7.28" in n and "suspended" in n for n in notes), notes

        listed = {d["name"]: d for d in (await _get(http, tenant, "/destinations"))["data"]}
        google = listed["google.com"]
        assert set(google["mx_hosts"]) <= {"gmail-smtp-in.l.google.com", "aspmx.l.google.com"}
        assert google["rate"] < 100.0  # halved at least once since
        assert any(r["reply"].startswith("421 4.7.28") for r in google["recent"])
        assert listed["other.test"]["state"] == "active"
        assert listed["other.test"]["recent"] == []

        # The same in /metrics: a receiver named by a policy always, any other once held back.
        scraped = await http.get("/metrics")
        assert scraped.status_code == 200, scraped.text
        series = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(scraped.text)
            for sample in family.samples
            if sample.name.startswith("posthaste_destination_")
        }
        google_rate = series[("posthaste_destination_rate", (("destination", "google.com"),))]
        assert google_rate < 100.0
        states = {
            dict(labels)["state"]: value
            for (name, labels), value in series.items()
            if name == "posthaste_destination_state" and dict(labels)["destination"] == "google.com"
        }
        assert sum(states.values()) == 1 and set(states) == {"active", "throttled", "suspended"}
        assert not any(dict(labels).get("destination") == "other.test" for _, labels in series)


async def test_two_workers_share_one_rate(settings: Settings, zone: ZoneServer) -> None:
    """Each worker alone would go at 12/s; together at 24/s the receiver (20/s) would push
    back. Sharing the rate in the database, the two together stay at 12/s: no 421 at all."""
    _zone(zone)
    gmail = [f"g{i}@gmail.test" for i in range(24)]
    async with AsyncExitStack() as stack:
        sink = await stack.enter_async_context(running_sink(Sink()))
        receiver = ThrottlingReceiver(per_second=20, block_after=40)
        await stack.enter_async_context(running_receiver(receiver, GMAIL_ADDRESS, sink.port))
        first = _configured(settings, zone, google_rate=12.0, mx_host="worker-1.test")
        second = dataclasses.replace(first, mx_host="worker-2.test")
        one = await stack.enter_async_context(_services(first, sink.port, empty=True))
        two = await stack.enter_async_context(_services(second, sink.port, empty=False))
        http = await stack.enter_async_context(checked_client(make_app(one)))
        tenant = await make_tenant(one)
        await _send(http, tenant, gmail)
        async with _working(one, two, batch_size=4):  # so that both take some
            await _until(lambda: len(receiver.delivered) == len(gmail))
        assert receiver.refused == []
        assert not receiver.blocked
        assert set(receiver.senders) == {"worker-1.test", "worker-2.test"}, receiver.senders


async def test_slots_are_claimed_in_blocks_and_never_while_suspended(services: Services) -> None:
    now_us = time.time_ns() // 1000
    now = now_us // 1000
    async with services.db.transaction() as tx:
        await repo.ensure(tx, "example.com", ["mx.example.com"], 50_000, now)
        first = await repo.claim_slots(tx, "example.com", 4, 50_000, now_us, 1_000_000)
        second = await repo.claim_slots(tx, "example.com", 4, 50_000, now_us, 1_000_000)
        assert first is not None and second is not None
        assert (first.start_us, first.step_us, first.count) == (now_us, 50_000, 4)
        assert second.start_us == now_us + 4 * 50_000  # right after the first block
        # A policy slower than the stored pace wins.
        third = await repo.claim_slots(tx, "example.com", 2, 100_000, now_us, 1_000_000)
        assert third is not None and third.start_us == now_us + 8 * 50_000
        assert third.step_us == 100_000
        # Promised more than the horizon ahead: no claim, nothing moves.
        assert await repo.claim_slots(tx, "example.com", 1, 50_000, now_us, 500_000) is None
        pace = await repo.get(tx, "example.com")
        assert pace is not None and pace.next_slot_us == now_us + 8 * 50_000 + 2 * 100_000
        suspension = repo.Suspension(100_000, now + 5_000, 1, 50_000)
        await repo.suspend(tx, "example.com", suspension, now, "421 4.7.28 slow", "halved")
        later_us = now_us + 2_000_000
        assert await repo.claim_slots(tx, "example.com", 1, 50_000, later_us, 10**9) is None
        after = now_us + 6_000_000
        resumed = await repo.claim_slots(tx, "example.com", 1, 50_000, after, 1_000_000)
        assert resumed is not None and resumed.start_us == after
        assert resumed.interval_us == 100_000 and resumed.strikes == 1
        replies = await repo.recent_replies(tx, 10)
        assert [r.reply for r in replies["example.com"]] == ["421 4.7.28 slow"]


async def test_the_pace_taken_is_never_measured_across_a_suspension(services: Services) -> None:
    """A window of sends that a suspension interrupted says nothing of the pace that drew the
    next "slow down": 40 sent in its first 0.4 s, then 1.5 s suspended, is no 21/s."""
    start_us = time.time_ns() // 1000
    start = start_us // 1000
    async with services.db.transaction() as tx:
        await repo.ensure(tx, "example.com", ["mx.example.com"], 10_000, start)
        await repo.claim_slots(tx, "example.com", 1, 10_000, start_us, 10**9)
        sent_us = start_us + 400_000
        await repo.claim_slots(tx, "example.com", 1, 10_000, sent_us, 10**9, sent=40)
        suspension = repo.Suspension(20_000, start + 500, 1, 10_000)
        await repo.suspend(tx, "example.com", suspension, sent_us // 1000, "421", "halved")
        after_us = start_us + 1_900_000
        block = await repo.claim_slots(tx, "example.com", 1, 10_000, after_us, 10**9, sent=1)
        assert block is not None and block.used_interval_us == 0  # unknown, not 21/s
        pace = await repo.get(tx, "example.com")
        assert pace is not None and pace.taken_interval_us(after_us + 300_000) == 300_000
        # A window begun after the suspension measures again: 20 more in its first 0.4 s.
        again_us = after_us + 400_000
        await repo.claim_slots(tx, "example.com", 1, 10_000, again_us, 10**9, sent=19)
        pace = await repo.get(tx, "example.com")
        assert pace is not None and pace.taken_interval_us(again_us) == 20_000


async def test_only_full_access_keys_see_destinations(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    listed = await client.get("/destinations", headers=tenant.headers("sending"))
    assert_error(listed, 401, "restricted_api_key")
    assert_error(await client.get("/destinations"), 401, "missing_api_key")
    empty = await client.get("/destinations", headers=tenant.headers("live"))
    assert empty.status_code == 200 and empty.json() == {"object": "list", "data": []}


def _reply(code: int, text: str) -> RecipientReply:
    return RecipientReply("a@example.com", code, text, True)


async def test_the_throttle_halves_suspends_holds_and_raises_again(services: Services) -> None:
    policy = Policies({"example.com": {"rate": 20.0}})
    throttle = DestinationThrottle(services.db, policy, rng=random.Random(3))
    mx = ["mx.example.com"]
    first = Transcript()
    admitted = await throttle.admit("example.com", mx, first)
    assert admitted.hold_until is None and admitted.max_connections == 8
    assert first.lines[-1]["note"] == "throttle: example.com at 20/s"

    slow = _reply(421, "4.7.28 unusual rate")
    noted = Transcript()
    until = await throttle.observe("example.com", [slow], None, noted)
    assert until is not None and until > now_ms() + 1_000
    assert "rate 20/s -> 10/s, suspended" in noted.lines[-1]["note"]
    # A second 421 from the same burst does not halve again.
    again = Transcript()
    assert await throttle.observe("example.com", [slow], None, again) is not None
    assert "already suspended" in again.lines[-1]["note"]
    async with services.db.read() as tx:
        pace = await repo.get(tx, "example.com")
    assert pace is not None and pace.interval_us == 100_000 and pace.strikes == 1

    # Another worker (its own throttle) learns the suspension from the database.
    other = DestinationThrottle(services.db, policy)
    held = await other.admit("example.com", mx, Transcript())
    assert held.hold_until is not None and held.hold_until >= pace.suspended_until

    # Once the suspension is over, steady success raises the rate a step (20/s + 2/s a step),
    # while the fleet takes the whole rate (10/s over the last window).
    async with services.db.transaction() as tx:
        past = now_ms() - 5_000
        await tx.conn.execute(
            update(destinations).values(
                suspended_until=past,
                changed_at=past,
                next_slot_us=0,
                window_us=now_ms() * 1000,
                used_interval_us=100_000,
            )
        )
    raised, later = Transcript(), DestinationThrottle(services.db, policy)
    for _ in range(rules.INCREASE_AFTER):
        await later.admit("example.com", mx, Transcript())
        await later.observe("example.com", [_reply(250, "2.0.0 OK")], None, raised)
    assert "steady success, rate 10/s -> 12/s" in raised.lines[-1]["note"]
    async with services.db.read() as tx:
        pace = await repo.get(tx, "example.com")
    assert pace is not None and pace.interval_us == 83_333 and pace.strikes == 0


async def test_the_throttle_forgets_quiet_destinations_and_keeps_a_held_one(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sender to many domains: the process's own state per destination stays bounded (the
    quiet ones are forgotten, their pace read again from the database), a suspended one is
    kept and still makes ``holding`` true, and a forgotten one is throttled as before."""
    from posthaste.services import destinations as throttle_module

    monkeypatch.setattr(throttle_module, "MAX_LOCAL", 4)
    # The suspension outlasts the test however slow the box (2 s by default: forty admissions
    # and observations took longer under load, and the destination was no longer held).
    monkeypatch.setattr(rules, "BACKOFF_BASE_MS", 600_000)
    monkeypatch.setattr(rules, "BACKOFF_CAP_MS", 600_000)
    throttle = DestinationThrottle(services.db, Policies({}), rng=random.Random(3))
    admitted = await throttle.admit("slow.test", ["mx.slow.test"], Transcript())
    assert admitted.hold_until is None
    await throttle.observe("slow.test", [_reply(421, "4.7.28 slow down")], None, Transcript())
    assert throttle.holding()
    for i in range(20):
        admission = await throttle.admit(f"d{i}.test", [f"mx.d{i}.test"], Transcript())
        assert admission.hold_until is None
        await throttle.observe(f"d{i}.test", [_reply(250, "OK")], None, Transcript())
    assert len(throttle._local) <= 8  # pruned to the busy ones, then doubled at most
    assert "slow.test" in throttle._local and throttle.holding()
    # The suspension is the database's: a destination forgotten and met again is held too.
    throttle._local.pop("slow.test")
    held = await throttle.admit("slow.test", ["mx.slow.test"], Transcript())
    assert held.hold_until is not None and throttle.holding()


async def test_the_rate_taken_not_the_rate_set_is_halved_and_raised(services: Services) -> None:
    """Workers that send less than the rate set: a "slow down" halves what they took, and
    steady success does not raise a rate the fleet does not use."""
    policy = Policies({"example.org": {"rate": 100.0}})
    throttle, mx = DestinationThrottle(services.db, policy), ["mx.example.org"]
    await throttle.admit("example.org", mx, Transcript())
    async with services.db.transaction() as tx:  # 40/s sent over the last window, of 100/s
        window = now_ms() * 1000
        await tx.conn.execute(
            update(destinations).values(window_us=window, used_interval_us=25_000, strikes=1)
        )
    for _ in range(rules.INCREASE_AFTER):
        await throttle.admit("example.org", mx, Transcript())
        await throttle.observe("example.org", [_reply(250, "2.0.0 OK")], None, Transcript())
    async with services.db.read() as tx:
        pace = await repo.get(tx, "example.org")
    assert pace is not None and pace.interval_us == 10_000  # not raised: 40/s is not 100/s

    noted = Transcript()
    slow = _reply(421, "4.7.28 slow down")
    assert await throttle.observe("example.org", [slow], None, noted) is not None
    # 40/s is under half the rate set: what it shows is 50/s (``rules.limit_shown``), halved
    # to 25/s; a count early in a window must not drop the rate to a fraction of it.
    assert "rate 40/s (taken of 100/s set) -> 25/s" in noted.lines[-1]["note"]
    async with services.db.read() as tx:
        pace = await repo.get(tx, "example.org")
    # 50/s remembered as too fast.
    assert pace is not None and pace.interval_us == 40_000 and pace.ceiling_us == 20_000


async def test_a_slow_down_after_a_step_up_is_answered_one_from_before_the_suspension_not(
    services: Services,
) -> None:
    """A reply from a session sent before the last suspension has been answered by it; one
    from a session sent after it is news, even when the rate was stepped up since."""
    policy = Policies({"example.net": {"rate": 100.0}})
    throttle, mx = DestinationThrottle(services.db, policy), ["mx.example.net"]
    await throttle.admit("example.net", mx, Transcript())
    now = now_ms()
    async with services.db.transaction() as tx:  # suspended 3 s ago, stepped up 1 s ago
        await tx.conn.execute(
            update(destinations).values(
                interval_us=20_000, strikes=1, suspended_until=now - 3_000, changed_at=now - 1_000
            )
        )
    slow = _reply(421, "4.7.28 slow down")
    late = Transcript()
    late.admitted_at = now - 4_000  # sent before the suspension ended: answered already
    assert await throttle.observe("example.net", [slow], None, late) is not None
    assert "let go before the last suspension ended" in late.lines[-1]["note"]
    fresh = Transcript()
    fresh.admitted_at = now - 2_000  # sent after it ended, before the step up: news
    assert await throttle.observe("example.net", [slow], None, fresh) is not None
    assert "rate 50/s -> 25/s" in fresh.lines[-1]["note"]
    async with services.db.read() as tx:
        pace = await repo.get(tx, "example.net")
    assert pace is not None and pace.interval_us == 40_000 and pace.suspended_until > now


async def test_mail_for_a_busy_destination_is_held_before_it_starts(
    settings: Settings, zone: ZoneServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Once a worker knows the destination is suspended, its mail goes back to the queue
    unstarted: no attempt, no status change, the job's claim counted as a hold, its reason
    kept and logged; the next real attempt's transcript starts with a note of the holds."""
    caplog.set_level(logging.DEBUG, logger="posthaste.services.delivery")
    _zone(zone)
    async with AsyncExitStack() as stack:
        sink = await stack.enter_async_context(running_sink(Sink()))
        configured = _configured(settings, zone, google_rate=20.0)
        services = await stack.enter_async_context(_services(configured, sink.port, empty=True))
        http = await stack.enter_async_context(checked_client(make_app(services)))
        tenant = await make_tenant(services)
        now = now_ms()
        async with services.db.transaction() as tx:
            await repo.ensure(tx, "google.com", ["gmail-smtp-in.l.google.com"], 50_000, now)
            suspension = repo.Suspension(100_000, now + 600_000, 1, 50_000)
            await repo.suspend(tx, "google.com", suspension, now, "421 4.7.28 slow", "halved")
        worker = services.make_worker()
        (first,) = await _send(http, tenant, ["first@gmail.test"])
        assert await worker.run_until_idle() == 1  # held by the session's throttle
        (second,) = await _send(http, tenant, ["second@gmail.test"])
        assert await worker.run_until_idle() == 1  # held before it was started

        async with services.db.read() as tx:
            query = select(
                jobs.c.ref, jobs.c.attempts, jobs.c.holds, jobs.c.hold_reason, jobs.c.available_at
            )
            rows = (await tx.conn.execute(query)).all()
            counted = dict((await tx.conn.execute(select(emails.c.id, emails.c.attempts))).all())
        assert {r.ref: (r.attempts, r.holds) for r in rows} == {first: (1, 1), second: (1, 1)}
        assert counted == {first: 0, second: 0}  # the email's retry count: no attempt used
        for email_id in (first, second):
            assert (await _get(http, tenant, f"/emails/{email_id}/attempts"))["data"] == []
        # The second was never started: still queued, no email.sending event.
        assert (await _get(http, tenant, f"/emails/{second}"))["last_event"] == "email.queued"
        assert sink.messages == []
        # Each was given its turn after the suspension, the second a step after the first (44 ms:
        # four fifths of 55.6 ms, the pace of 18/s it climbs back to, 90 % of the 20/s
        # remembered as too fast); each job says why it waits.
        due = {r.ref: r.available_at for r in rows}
        assert now + 600_000 < due[first] < due[second] <= due[first] + 45
        for row in rows:
            assert row.hold_reason.startswith("destination google.com at 10/s, suspended until")
        assert any(
            r.getMessage().startswith(f"email {second} held until")
            and "destination google.com" in r.getMessage()
            for r in caplog.records
        ), caplog.records

        # The destination frees: the next real attempt's transcript starts with the holds.
        receiver = ThrottlingReceiver(per_second=100, block_after=300)
        await stack.enter_async_context(running_receiver(receiver, GMAIL_ADDRESS, sink.port))
        async with services.db.transaction() as tx:
            await tx.conn.execute(update(destinations).values(suspended_until=0, next_slot_us=0))
            await tx.conn.execute(update(jobs).values(available_at=0))
        fresh = await stack.enter_async_context(_services(configured, sink.port, empty=False))
        async with _working(fresh):  # another worker: it never knew of the suspension
            await _until(lambda: len(receiver.delivered) == 2)
        for email_id in (first, second):
            (attempt,) = (await _get(http, tenant, f"/emails/{email_id}/attempts"))["data"]
            note = attempt["transcript"][0]["note"]
            assert note.startswith("held once without using up an attempt since it was queued at")
            assert re.search(r"queued at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \(", note)
            assert "the last time: destination google.com at 10/s, suspended until" in note


async def test_held_mail_is_given_turns_after_the_ones_before(services: Services) -> None:
    """The fleet's held mail comes back a step apart, after the turns already given, never
    before the destination frees."""
    now_us = time.time_ns() // 1000
    async with services.db.transaction() as tx:
        await repo.ensure(tx, "example.com", ["mx.example.com"], 10_000, now_us // 1000)
        first = await repo.queue_holds(tx, "example.com", 3, 8_000, now_us + 2_000_000)
        second = await repo.queue_holds(tx, "example.com", 2, 8_000, now_us)
        later = now_us + 60_000_000  # the queue has drained by then: from the earliest time
        third = await repo.queue_holds(tx, "example.com", 1, 8_000, later)
        assert await repo.queue_holds(tx, "unknown.example", 1, 8_000, now_us) is None
    assert first == now_us + 2_000_000 + 8_000  # turns 1-3: a step after the earliest time
    assert second == now_us + 2_000_000 + 4 * 8_000  # turns 4-5: after those
    assert third == later + 8_000

    # The throttle's turns: a little less than its interval apart (20/s: 50 ms, turns 40 ms).
    throttle = DestinationThrottle(services.db, Policies({"example.com": {"rate": 20.0}}))
    await throttle.admit("example.com", ["mx.example.com"], Transcript())
    earliest = later // 1000 + 60_000
    turns = await throttle.hold("example.com", earliest, 3)
    assert turns == [earliest + 40, earliest + 80, earliest + 120]
    assert throttle.holds == 3


async def test_a_burst_of_failed_connections_slows_the_destination(services: Services) -> None:
    throttle = DestinationThrottle(services.db)
    await throttle.admit("example.net", ["mx.example.net"], Transcript())
    refused = SmtpUnavailable(451, "4.4.1 Connection failed: refused")
    decisions = [
        await throttle.observe("example.net", [], refused, Transcript())
        for _ in range(rules.CONNECTION_BURST)
    ]
    assert decisions[:-1] == [None] * (rules.CONNECTION_BURST - 1)
    assert decisions[-1] is not None
    listed = {d.name: d for d in await services.destinations.list()}
    assert listed["example.net"].state == "suspended"
    assert listed["example.net"].recent[0].reply.startswith("451 4.4.1 Connection failed")


async def test_mail_held_longer_than_the_retry_schedule_uses_its_attempts(
    settings: Settings, zone: ZoneServer
) -> None:
    """A receiver that keeps the destination suspended for ever does not keep the mail for
    ever: past the whole retry schedule, held tries count and the last one bounces."""
    _zone(zone)
    configured = dataclasses.replace(
        _configured(settings, zone, google_rate=20.0), delivery_retry_schedule=(0.2, 0.2)
    )
    async with AsyncExitStack() as stack:
        sink = await stack.enter_async_context(running_sink(Sink()))
        services = await stack.enter_async_context(_services(configured, sink.port, empty=True))
        http = await stack.enter_async_context(checked_client(make_app(services)))
        tenant = await make_tenant(services)
        now = now_ms()
        async with services.db.transaction() as tx:
            await repo.ensure(tx, "google.com", ["gmail-smtp-in.l.google.com"], 50_000, now)
            suspension = repo.Suspension(100_000, now + 600_000, 1, 50_000)
            await repo.suspend(tx, "google.com", suspension, now, "421 4.7.28 slow", "halved")
        (email_id,) = await _send(http, tenant, ["late@gmail.test"])
        await asyncio.sleep(0.5)  # older than the whole schedule (0.4 s) before its first try

        async def bounced() -> bool:
            record = await _get(http, tenant, f"/emails/{email_id}")
            return bool(record["last_event"] == "email.bounced")

        async with _working(services):
            await _until(bounced, deadline=30)
        attempts = (await _get(http, tenant, f"/emails/{email_id}/attempts"))["data"]
        assert [a["attempt"] for a in attempts] == [1, 2, 3]
        assert all(a["host"] is None for a in attempts)  # never sent: held each time
        assert attempts[-1]["replies"][0]["text"].startswith("4.7.0 Held by Posthaste")
        assert sink.messages == []


async def test_a_destination_policy_caps_connections_and_messages_per_connection(
    settings: Settings, zone: ZoneServer
) -> None:
    _zone(zone)
    policy = {"other.test": {"max_connections": 1, "messages_per_connection": 2}}
    configured = dataclasses.replace(
        _configured(settings, zone, google_rate=20.0), destinations=Policies(policy)
    )
    async with AsyncExitStack() as stack:
        sink = await stack.enter_async_context(running_sink(Sink()))
        services = await stack.enter_async_context(_services(configured, sink.port, empty=True))
        http = await stack.enter_async_context(checked_client(make_app(services)))
        tenant = await make_tenant(services)
        await _send(http, tenant, [f"o{i}@other.test" for i in range(6)])
        async with _working(services):
            await _until(lambda: len(sink.messages) == 6)
        # One connection at a time, each closed after two messages.
        assert sink.connections == 3


async def test_a_slow_down_at_the_known_limit_settles_under_it_and_repeats_halve(
    services: Services,
) -> None:
    """With 50/s remembered as too fast, a "slow down" at 45/s sets 90 % of 45/s and rests a
    second, not half and seconds; the third in a row without a calm spell halves as before."""
    policy = Policies({"example.io": {"rate": 200.0}})
    throttle, mx = DestinationThrottle(services.db, policy, rng=random.Random(5)), ["mx.example.io"]
    await throttle.admit("example.io", mx, Transcript())
    now = now_ms()
    async with services.db.transaction() as tx:  # 45/s set, 50/s remembered, calm
        await tx.conn.execute(
            update(destinations).values(
                interval_us=22_222, ceiling_us=20_000, strikes=0, suspended_until=now - 60_000
            )
        )
    slow = _reply(421, "4.7.28 slow down")
    settled = Transcript()
    until = await throttle.observe("example.io", [slow], None, settled)
    assert until is not None
    note = settled.lines[-1]["note"]
    assert "rate 45/s -> 40.5/s (90% of it: the limit known, touched)" in note
    async with services.db.read() as tx:
        pace = await repo.get(tx, "example.io")
    assert pace is not None and pace.interval_us == int(22_222 / rules.SETTLE_MARGIN)
    assert pace.strikes == 1 and pace.suspended_until - now <= rules.SETTLE_MS + 1_000

    async def again() -> str:
        async with services.db.transaction() as tx:  # the rest over, the rate back at 45/s
            await tx.conn.execute(
                update(destinations).values(interval_us=22_222, suspended_until=now_ms() - 1)
            )
        noted = Transcript()
        assert await throttle.observe("example.io", [slow], None, noted) is not None
        return str(noted.lines[-1]["note"])

    assert "(90% of it: the limit known, touched)" in await again()  # strike 2
    third = await again()
    assert "rate 45/s -> 22.5/s, suspended" in third and "(strike 3)" in third
    async with services.db.read() as tx:
        pace = await repo.get(tx, "example.io")
    assert pace is not None and pace.interval_us == 44_444 and pace.strikes == 3

"""IP pools end to end on loopback: mail of a stream or domain with a pool leaves from the pool's
127.0.0.x source addresses with its HELO name (a sink records the peer and the greeting), a
warming address keeps to its daily cap and the mail past it waits for the next UTC day without
using up an attempt; the pools as the API, the CLI and the metrics show them. SQLite and
PostgreSQL."""

from __future__ import annotations

import dataclasses
import json
import random
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from posthaste.adapters.smtp_client import Transcript
from posthaste.adapters.smtp_transports import MxTransport
from posthaste.bootstrap import Services
from posthaste.config import DeliveryTarget, Settings
from posthaste.core import pools as rules
from posthaste.core.ids import now_ms
from posthaste.core.pools import Pool, Pools
from posthaste.services.pools import PoolSources
from posthaste.storage import pools as repo
from posthaste.storage.tables import emails, jobs
from tests.apps import make_app
from tests.conftest import Tenant, make_tenant
from tests.dns_server import ZoneServer
from tests.integration.test_api_emails import assert_error
from tests.integration.test_cli import run_cli
from tests.integration.test_destinations import _get, _services, _until, _working
from tests.openapi_check import checked_client
from tests.smtp_sink import Sink, running_sink

WARM = Pool("warm", ("127.0.0.2", "127.0.0.3"), "warm.example.test")
SOLO = Pool("solo", ("127.0.0.4",), "solo.example.test")


def _configured(settings: Settings, zone: ZoneServer, *pools: Pool) -> Settings:
    zone.set("pooled.test", "MX", (10, "mx.pooled.test"))
    zone.set("mx.pooled.test", "A", "127.0.0.1")
    return dataclasses.replace(
        settings,
        delivery=DeliveryTarget(kind="mx"),
        dns_nameservers=zone.nameservers,
        delivery_retry_schedule=(3600.0,),
        mx_host="machine.example.test",
        pools=Pools({pool.name: pool for pool in pools}),
    )


async def _send(
    http: httpx.AsyncClient, tenant: Tenant, sender: str, to: str, stream: str | None = None
) -> str:
    body = {"from": sender, "to": to, "subject": "Hi", "text": "Hello"}
    if stream is not None:
        body["stream_id"] = stream
    response = await http.post("/emails", json=body, headers=tenant.headers("live"))
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


async def _call(http: httpx.AsyncClient, tenant: Tenant, method: str, path: str, body: Any) -> Any:
    response = await http.request(method, path, json=body, headers=tenant.headers("live"))
    assert response.status_code in (200, 201), response.text
    return response.json()


async def _notes(http: httpx.AsyncClient, tenant: Tenant, email_id: str) -> list[str]:
    attempts = (await _get(http, tenant, f"/emails/{email_id}/attempts"))["data"]
    return [line.get("note", "") for a in attempts for line in a["transcript"]]


async def test_mail_leaves_from_its_pools_addresses_with_its_helo(
    settings: Settings, zone: ZoneServer
) -> None:
    """A stream's pool over its domain's, the domain's over default (the machine's address)."""
    configured = _configured(settings, zone, WARM, SOLO)
    async with AsyncExitStack() as stack:
        sink = await stack.enter_async_context(running_sink(Sink()))
        services = await stack.enter_async_context(_services(configured, sink.port, empty=True))
        http = await stack.enter_async_context(checked_client(make_app(services)))
        tenant = await make_tenant(services)
        stream = {"id": "news", "name": "News", "type": "broadcast", "pool": "warm"}
        assert (await _call(http, tenant, "POST", "/streams", stream))["pool"] == "warm"
        domain = await _call(http, tenant, "POST", "/domains", {"name": "acme.test"})
        assert domain["pool"] is None
        patched = await _call(http, tenant, "PATCH", f"/domains/{domain['id']}", {"pool": "solo"})
        assert patched["pool"] == "solo"
        # A pool given when the domain is added works as one set later.
        created = await _call(
            http, tenant, "POST", "/domains", {"name": "own.test", "pool": "solo"}
        )
        assert created["pool"] == "solo"
        assert (await _get(http, tenant, f"/domains/{created['id']}"))["pool"] == "solo"

        ids = {
            **{
                f"n{i}@pooled.test": await _send(
                    http, tenant, "hi@acme.test", f"n{i}@pooled.test", "news"
                )
                for i in range(4)
            },
            "t0@pooled.test": await _send(http, tenant, "hi@acme.test", "t0@pooled.test"),
            "t1@pooled.test": await _send(http, tenant, "hi@acme.test", "t1@pooled.test"),
            "d0@pooled.test": await _send(http, tenant, "hi@plain.test", "d0@pooled.test"),
            "o0@pooled.test": await _send(http, tenant, "hi@own.test", "o0@pooled.test"),
        }
        async with _working(services):
            await _until(lambda: len(sink.messages) == len(ids))

        came = {m.recipients[0]: (m.peer, m.helo) for m in sink.messages}
        news = [came[f"n{i}@pooled.test"] for i in range(4)]
        assert {peer for peer, _ in news} == {"127.0.0.2", "127.0.0.3"}  # both took some
        assert {helo for _, helo in news} == {"warm.example.test"}
        assert (
            came["t0@pooled.test"] == came["t1@pooled.test"] == ("127.0.0.4", "solo.example.test")
        )
        assert came["o0@pooled.test"] == ("127.0.0.4", "solo.example.test")
        assert came["d0@pooled.test"] == ("127.0.0.1", "machine.example.test")
        notes = await _notes(http, tenant, ids["n0@pooled.test"])
        assert any(n.startswith("pool warm: 127.0.0.") for n in notes), notes
        assert any("HELO warm.example.test" in n and "no warm-up cap" in n for n in notes), notes
        # A message may go on a connection another one opened: look at all four.
        every = [n for i in range(4) for n in await _notes(http, tenant, ids[f"n{i}@pooled.test"])]
        assert any(
            n.startswith("connecting to mx.pooled.test:") and "from 127.0.0." in n for n in every
        ), every
        default_notes = await _notes(http, tenant, ids["d0@pooled.test"])
        assert "pool default: the machine's own address" in default_notes

        listed = {p["name"]: p for p in (await _get(http, tenant, "/pools"))["data"]}
        assert set(listed) == {"default", "warm", "solo"}
        assert listed["default"]["addresses"] == [] and listed["default"]["helo"] is None
        warm = {a["address"]: a for a in listed["warm"]["addresses"]}
        assert set(warm) == {"127.0.0.2", "127.0.0.3"} and listed["warm"]["helo"] == WARM.helo
        # Past its warm-up a busy address is counted a few messages ahead: at least what it sent.
        for address, shown in warm.items():
            assert shown["warmup_day"] == 1 and shown["cap"] is None
            assert shown["sent_today"] >= sum(1 for peer, _ in news if peer == address)
        (solo,) = listed["solo"]["addresses"]
        assert solo["sent_today"] >= 3

        # A domain's pool taken away, the stream's cleared: default for both from now on.
        cleared = await _call(http, tenant, "PATCH", "/streams/news", {"pool": None})
        assert cleared["pool"] is None and cleared["name"] == "News"
        back = await _call(http, tenant, "PATCH", f"/domains/{domain['id']}", {"pool": None})
        assert back["pool"] is None
        await _send(http, tenant, "hi@acme.test", "n9@pooled.test", "news")
        async with _working(services):
            await _until(lambda: len(sink.messages) == len(ids) + 1)
        assert (sink.messages[-1].peer, sink.messages[-1].helo) == (
            "127.0.0.1",
            "machine.example.test",
        )


class _Clock:
    def __init__(self) -> None:
        self.now = now_ms()

    def __call__(self) -> int:
        return self.now


def _with_clock(services: Services, clock: _Clock) -> None:
    """The transport's pool sources on an injected clock, so that a test can turn the day."""
    for transport in services.transports.by_region.values():
        assert isinstance(transport, MxTransport)
        transport.sources = PoolSources(services.db, services.settings.pools, clock=clock)


async def test_a_warming_address_keeps_to_its_cap_and_the_rest_waits_for_the_next_day(
    settings: Settings, zone: ZoneServer
) -> None:
    slow = Pool("slow", ("127.0.0.2",), "slow.example.test", per_day=(2, 3))
    configured = _configured(settings, zone, slow)
    async with AsyncExitStack() as stack:
        sink = await stack.enter_async_context(running_sink(Sink()))
        services = await stack.enter_async_context(_services(configured, sink.port, empty=True))
        http = await stack.enter_async_context(checked_client(make_app(services)))
        clock = _Clock()
        _with_clock(services, clock)
        tenant = await make_tenant(services)
        await _call(http, tenant, "PATCH", "/streams/transactional", {"pool": "slow"})
        ids = {
            f"w{i}@pooled.test": await _send(http, tenant, "hi@acme.test", f"w{i}@pooled.test")
            for i in range(3)
        }

        next_day = rules.start_of_day(rules.day_of(clock.now) + 1)

        async def held_id() -> str | None:
            """The email not delivered whose job was held until the next UTC day."""
            for recipient, email_id in ids.items():
                if recipient in {m.recipients[0] for m in sink.messages}:
                    continue
                async with services.db.read() as tx:
                    query = jobs.select().where(jobs.c.ref == email_id)
                    job = (await tx.conn.execute(query)).one_or_none()
                if job is not None and job.holds and job.available_at >= next_day:
                    return email_id
            return None

        async def state() -> str:
            """What each email and its job came to: said when a wait below times out (a rare
            timeout in CI, not reproduced, whose cause its bare message did not tell)."""
            told = []
            for email_id in ids.values():
                record = await _get(http, tenant, f"/emails/{email_id}")
                async with services.db.read() as tx:
                    query = jobs.select().where(jobs.c.ref == email_id)
                    job = (await tx.conn.execute(query)).one_or_none()
                told.append(f"{email_id}: {record['last_event']}, job {job}, notes "
                            f"{await _notes(http, tenant, email_id)}")  # fmt: skip
            return f"{len(sink.messages)} delivered; " + "; ".join(told)

        async with _working(services):
            try:
                await _until(lambda: len(sink.messages) == 2)
                await _until(held_id)
            except AssertionError as exc:
                raise AssertionError(f"{exc}: {await state()}") from exc
        waiting = await held_id()
        assert waiting is not None and len(sink.messages) == 2
        record = await _get(http, tenant, f"/emails/{waiting}")
        assert record["last_event"] not in ("email.failed", "email.bounced", "email.delivered")
        # A hold is no attempt: nothing was sent, no attempt row written, no retry used up; it
        # waits for the next UTC day, not for a retry.
        assert (await _get(http, tenant, f"/emails/{waiting}/attempts"))["data"] == []
        listed = {p["name"]: p for p in (await _get(http, tenant, "/pools"))["data"]}
        (address,) = listed["slow"]["addresses"]
        assert (address["warmup_day"], address["cap"], address["sent_today"]) == (1, 2, 2)

        clock.now += rules.DAY_MS  # the next day: the job's time has come
        async with services.db.transaction() as tx:
            await tx.conn.execute(update(jobs).where(jobs.c.ref == waiting).values(available_at=0))
        async with _working(services):
            await _until(lambda: len(sink.messages) == 3)
        assert {(m.peer, m.helo) for m in sink.messages} == {("127.0.0.2", "slow.example.test")}

        async def delivered() -> bool:
            record = await _get(http, tenant, f"/emails/{waiting}")
            return bool(record["last_event"] == "email.delivered")

        await _until(delivered)
        attempts = (await _get(http, tenant, f"/emails/{waiting}/attempts"))["data"]
        assert [a["attempt"] for a in attempts] == [1]  # the hold used up no attempt
        notes = [line.get("note", "") for line in attempts[-1]["transcript"]]
        went = "pool slow: 127.0.0.2 (HELO slow.example.test), warm-up day 2 of 2: 1 of 3 today"
        assert went in notes, notes
        # The transcript starts with the holds it waited through, and why.
        assert notes[0].startswith("held once without using up an attempt since it was queued")
        assert "the last time: every address of pool slow has used up its warm-up cap" in notes[0]


async def _job(services: Services, email_id: str) -> Any:
    async with services.db.read() as tx:
        query = jobs.select().where(jobs.c.ref == email_id)
        return (await tx.conn.execute(query)).one_or_none()


async def _age(services: Services, email_ids: list[str], ms: int) -> None:
    """Make the emails ``ms`` older, as if queued that much earlier."""
    async with services.db.transaction() as tx:
        query = update(emails).where(emails.c.id.in_(email_ids))
        await tx.conn.execute(query.values(created_at=emails.c.created_at - ms))


async def test_mail_held_by_a_warmup_cap_waits_past_the_retry_schedule_then_bounces(
    settings: Settings, zone: ZoneServer
) -> None:
    """Our own cap uses up no attempt however long it holds the mail, the whole retry schedule
    and more; past the maximum queue age the mail bounces, saying why."""
    slow = Pool("slow", ("127.0.0.2",), "slow.example.test", per_day=(1,))
    configured = dataclasses.replace(
        _configured(settings, zone, slow), delivery_retry_schedule=(0.2,), max_queue_age=3600.0
    )
    async with AsyncExitStack() as stack:
        sink = await stack.enter_async_context(running_sink(Sink()))
        services = await stack.enter_async_context(_services(configured, sink.port, empty=True))
        http = await stack.enter_async_context(checked_client(make_app(services)))
        clock = _Clock()
        _with_clock(services, clock)
        tenant = await make_tenant(services)
        await _call(http, tenant, "PATCH", "/streams/transactional", {"pool": "slow"})
        ids = [await _send(http, tenant, "hi@acme.test", f"q{i}@pooled.test") for i in range(2)]
        await _age(services, ids, 10_000)  # older than the retry schedule (0.2 s), not 1 h
        next_day = rules.start_of_day(rules.day_of(clock.now) + 1)

        async def held() -> str | None:
            for email_id in ids:
                job = await _job(services, email_id)
                if job is not None and job.holds and job.available_at >= next_day:
                    return email_id
            return None

        async with _working(services):
            await _until(lambda: len(sink.messages) == 1)
            await _until(held)
        waiting = await held()
        assert waiting is not None
        record = await _get(http, tenant, f"/emails/{waiting}")
        assert record["last_event"] not in ("email.failed", "email.bounced", "email.delivered")
        assert (await _get(http, tenant, f"/emails/{waiting}/attempts"))["data"] == []

        # Older than the maximum queue age, tried again the same day (its cap still used up).
        await _age(services, [waiting], 2 * 3600 * 1000)
        async with services.db.transaction() as tx:
            await tx.conn.execute(update(jobs).where(jobs.c.ref == waiting).values(available_at=0))

        async def bounced() -> bool:
            record = await _get(http, tenant, f"/emails/{waiting}")
            return bool(record["last_event"] == "email.bounced")

        async with _working(services):
            await _until(bounced)
        (attempt,) = (await _get(http, tenant, f"/emails/{waiting}/attempts"))["data"]
        assert attempt["host"] is None  # never sent
        (reply,) = attempt["replies"]
        assert reply["outcome"] == "bounced"
        assert (
            "queued longer than the maximum queue age (1h, POSTHASTE_MAX_QUEUE_AGE)"
            in (reply["text"])
        )
        assert "every address of pool slow has used up its warm-up cap" in reply["text"]
        assert await _job(services, waiting) is None  # finished: no more tries
        assert len(sink.messages) == 1


async def test_addresses_take_turns_skip_those_used_up_and_share_counts(
    services: Services,
) -> None:
    pools = Pools({"warm": dataclasses.replace(WARM, per_day=(1, 2))})
    clock = _Clock()
    one = PoolSources(services.db, pools, clock=clock, rng=random.Random(1))
    other = PoolSources(services.db, pools, clock=clock)  # another worker of the fleet
    first, second = await one.pick("warm", Transcript()), await other.pick("warm", Transcript())
    assert {first.address, second.address} == {"127.0.0.2", "127.0.0.3"}
    noted = Transcript()
    held = await one.pick("warm", noted)
    assert held.address is None and held.hold_until is not None
    assert rules.day_of(held.hold_until) == rules.day_of(clock.now) + 1
    assert "every address of pool warm has used up" in noted.lines[-1]["note"]
    assert (await other.pick("warm", Transcript())).hold_until is not None

    clock.now += rules.DAY_MS
    picked = [(await one.pick("warm", Transcript())).address for _ in range(4)]
    assert sorted(picked) == ["127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"]
    assert picked[0] != picked[1]  # in turn
    assert (await one.pick("warm", Transcript())).hold_until is not None
    async with services.db.read() as tx:
        counts = await repo.list_all(tx)
    today = rules.day_of(clock.now)
    assert {a: c.sent_on(today) for a, c in counts.items()} == {"127.0.0.2": 2, "127.0.0.3": 2}
    # A pool a stream still names but the configuration no longer has: the default pool.
    gone = Transcript()
    assert (await one.pick("removed", gone)).address is None
    assert gone.lines[1]["note"] == "pool 'removed' is not configured: using the default pool"


async def test_a_day_count_starts_over_and_never_passes_the_cap(services: Services) -> None:
    now = now_ms()
    async with services.db.transaction() as tx:
        made = await repo.ensure(tx, "192.0.2.1", 100, now)
        assert (made.first_day, made.sent) == (100, 0)
        assert await repo.take(tx, "192.0.2.1", 100, 1, 2, now) == 1
        assert await repo.take(tx, "192.0.2.1", 100, 1, 2, now) == 2
        assert await repo.take(tx, "192.0.2.1", 100, 1, 2, now) is None
        assert await repo.take(tx, "192.0.2.1", 101, 1, 2, now) == 1  # a new day
        assert await repo.take(tx, "192.0.2.1", 101, 16, None, now) == 17
        again = await repo.ensure(tx, "192.0.2.1", 105, now)
        assert (again.first_day, again.day, again.sent) == (100, 101, 17)
        assert await repo.take(tx, "192.0.2.9", 100, 1, None, now) is None  # no row


async def test_a_pool_that_is_not_configured_is_refused_with_nothing_stored(
    settings: Settings, zone: ZoneServer, tmp_path: Path
) -> None:
    configured = _configured(settings, zone, WARM)
    async with AsyncExitStack() as stack:
        services = await stack.enter_async_context(_services(configured, 25, empty=True))
        http = await stack.enter_async_context(checked_client(make_app(services)))
        tenant = await make_tenant(services)
        h = tenant.headers("live")
        bad = {"id": "news", "name": "News", "type": "broadcast", "pool": "cold"}
        refused = await http.post("/streams", json=bad, headers=h)
        assert_error(refused, 422, "validation_error")
        assert "'pool' must be one of: default, warm" in refused.json()["message"]
        assert_error(await http.get("/streams/news", headers=h), 404, "not_found")
        for body in ({"pool": "cold"}, {"name": "Other", "pool": "cold"}, {"pool": 3}, {}):
            patched = await http.patch("/streams/transactional", json=body, headers=h)
            assert_error(patched, 422, "validation_error")
        stream = (await http.get("/streams/transactional", headers=h)).json()
        assert (stream["name"], stream["pool"]) == ("Transactional", None)
        for body in ({"name": "cold.test", "pool": "cold"}, {"name": "cold.test", "pool": 3}):
            created = await http.post("/domains", json=body, headers=h)
            assert_error(created, 422, "validation_error")
            assert "'pool' must be" in created.json()["message"]
        claimed = await http.post(
            "/domains/claim", json={"name": "cold.test", "pool": "cold"}, headers=h
        )
        assert_error(claimed, 422, "validation_error")
        assert (await http.get("/domains", headers=h)).json()["data"] == []
        domain = await _call(http, tenant, "POST", "/domains", {"name": "acme.test", "pool": None})
        assert domain["pool"] is None
        patched = await http.patch(f"/domains/{domain['id']}", json={"pool": "cold"}, headers=h)
        assert_error(patched, 422, "validation_error")
        assert (await http.get(f"/domains/{domain['id']}", headers=h)).json()["pool"] is None
        restricted = await http.get("/pools", headers=tenant.headers("sending"))
        assert_error(restricted, 401, "restricted_api_key")

        # The metrics: each address's count today, and its cap while it warms.
        async with services.db.transaction() as tx:
            await repo.ensure(tx, "127.0.0.2", rules.day_of(now_ms()), now_ms())
        scraped = await http.get("/metrics")
        series = {
            (s.name, s.labels["address"]): s.value
            for family in text_string_to_metric_families(scraped.text)
            for s in family.samples
            if s.name.startswith("posthaste_pool_")
        }
        assert series[("posthaste_pool_address_sent_today", "127.0.0.2")] == 0
        assert ("posthaste_pool_address_cap_today", "127.0.0.2") not in series  # no warm-up

    config = tmp_path / "posthaste.toml"
    config.write_text(
        '[pools.warm]\naddresses = ["127.0.0.2"]\nhelo = "warm.example.test"\n'
        "[pools.warm.warmup]\nper_day = [5, 10]\n"
    )
    listed = run_cli(settings, "pools", "--json", env={"POSTHASTE_CONFIG": str(config)})
    assert listed.returncode == 0, listed.stderr
    pools = {p["name"]: p for p in json.loads(listed.stdout)["data"]}
    assert pools["warm"]["warmup"] == {"per_day": [5, 10]}
    assert pools["warm"]["addresses"][0]["cap"] in (5, 10)
    text = run_cli(settings, "pools", env={"POSTHASTE_CONFIG": str(config)}).stdout
    assert "warm  helo warm.example.test  warm-up per day: 5, 10" in text
    bad_config = tmp_path / "bad.toml"
    bad_config.write_text('[pools.warm]\naddresses = ["127.0.0.300"]\n')
    failed = run_cli(settings, "pools", env={"POSTHASTE_CONFIG": str(bad_config)})
    assert failed.returncode != 0 and "pools.warm.addresses" in failed.stderr

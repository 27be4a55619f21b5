"""A broadcast's expansion and a contact import survive a worker killed with SIGKILL mid-way,
on SQLite and PostgreSQL.

The test drives the API in process; real ``posthaste serve --role worker`` processes run the
jobs. The first worker is SIGKILLed once the job has committed some of its work and not all;
a second one takes the job again after its lease and finishes it: every member is mailed
exactly once (the emails table counts), every line is imported and announced exactly once.
Chunks and parts are made small (``POSTHASTE_BROADCAST_CHUNK_SIZE``, the import service's
``part_rows``) so that a kill lands between two of them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from posthaste.storage.tables import emails, events
from tests.e2e.test_automation_workers import api, env_for, killed, post, until
from tests.e2e.test_worker_kill import database_url, worker_process

__all__ = ["database_url"]  # the fixture, shared with test_worker_kill

# Sizes: enough chunks (24) and parts (20) that the kill, sent as soon as the first one is seen,
# lands before the last; every member and line is still counted. (600 members and 1,000 lines
# made this file the suite's slowest, 90-130 s a test on a loaded machine, for the same proof.)
MEMBERS = 240
CHUNK = "10"
LINES = 400
PART_ROWS = 20


async def get(http: httpx.AsyncClient, path: str) -> dict[str, Any]:
    response = await http.get(path)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def imported(http: httpx.AsyncClient, csv: str, **query: str) -> str:
    """An import of ``csv`` started through the API; its id."""
    response = await http.post(
        "/contacts/imports", content=csv.encode(), params=query,
        headers={"Content-Type": "text/csv"},
    )  # fmt: skip
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


async def test_a_broadcast_resumes_after_its_worker_is_killed_and_mails_everyone_once(
    database_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "workers.log"
    async with api(database_url, tmp_path) as (services, http):
        segment = await post(http, "/segments", {"name": "Everyone"})
        members = [f"m{n:04}@example.com" for n in range(MEMBERS)]
        await imported(http, "email\n" + "\n".join(members) + "\n", segment_id=segment["id"])
        await services.make_worker().run_until_idle()  # the import, in process
        listed = await get(http, f"/segments/{segment['id']}/contacts")
        assert len(listed["data"]) == MEMBERS
        broadcast = await post(
            http,
            "/broadcasts",
            {
                "segment_id": segment["id"], "from": "News <news@acme.test>", "send": True,
                "subject": "Hi {{contact.email}}", "text": "Hello",
            },
        )  # fmt: skip
        path = f"/broadcasts/{broadcast['id']}"
        env = {**env_for(database_url, tmp_path), "POSTHASTE_BROADCAST_CHUNK_SIZE": CHUNK}

        async def under_way() -> bool:
            return (await get(http, path))["sent"] > 0

        try:
            async with worker_process(env, log) as doomed:
                await until(under_way, "the broadcast's first chunks")
                await killed(doomed)
            halfway = await get(http, path)
            assert halfway["status"] == "sending"
            assert 0 < halfway["sent"] < MEMBERS, "the kill did not land mid-way"

            async with worker_process(env, log):

                async def sent() -> bool:
                    return (await get(http, path))["status"] == "sent"

                await until(sent, "the second worker to finish the broadcast", seconds=120)
        except AssertionError:
            print(log.read_text() if log.exists() else "(no worker log)")
            raise
        final = await get(http, path)
        assert (final["recipients"], final["sent"], final["failed"]) == (MEMBERS, MEMBERS, 0)
        async with services.db.read() as tx:
            query = select(emails.c.to).where(emails.c.broadcast_id == broadcast["id"])
            rows = (await tx.conn.execute(query)).all()
        assert Counter(address for row in rows for address in row.to) == Counter(members)


async def test_an_import_resumes_after_its_worker_is_killed_and_imports_every_line_once(
    database_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "workers.log"
    async with api(database_url, tmp_path) as (services, http):
        services.contact_imports.part_rows = PART_ROWS  # the parts are cut as the CSV arrives
        segment = await post(http, "/segments", {"name": "Imported"})
        addresses = [f"c{n:05}@example.com" for n in range(LINES)]
        csv = "email,plan,seats:number\n" + "".join(
            f"{a},pro,{n}\n" for n, a in enumerate(addresses)
        )
        import_id = await imported(http, csv, segment_id=segment["id"])
        path = f"/contacts/imports/{import_id}"
        env = env_for(database_url, tmp_path)

        async def under_way() -> bool:
            return (await get(http, path))["created"] > 0

        try:
            async with worker_process(env, log) as doomed:
                await until(under_way, "the import's first parts")
                await killed(doomed)
            halfway = await get(http, path)
            assert halfway["status"] == "running"
            assert 0 < halfway["created"] < LINES, "the kill did not land mid-way"
            assert halfway["created"] % PART_ROWS == 0  # a part boundary

            async with worker_process(env, log):

                async def completed() -> bool:
                    return (await get(http, path))["status"] == "completed"

                await until(completed, "the second worker to finish the import", seconds=120)
        except AssertionError:
            print(await get(http, path))
            print(log.read_text() if log.exists() else "(no worker log)")
            raise
        final = await get(http, path)
        counts = {k: final[k] for k in ("total", "created", "updated", "skipped", "failed")}
        assert counts == {"total": LINES, "created": LINES, "updated": 0, "skipped": 0, "failed": 0}
        members = (await get(http, f"/segments/{segment['id']}/contacts"))["data"]
        assert sorted(m["email"] for m in members) == addresses
        assert {m["properties"]["seats"] for m in members} == set(range(LINES))
        async with services.db.read() as tx:  # the test's own database: one team
            query = select(events.c.data).where(events.c.type == "contact.created")
            announced = [row.data["email"] for row in await tx.conn.execute(query)]
        assert Counter(announced) == Counter(addresses)

"""The official ``resend`` Python SDK's contacts, segments and topics calls, pointed at a real
Posthaste server (SQLite and PostgreSQL)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import resend
import resend.exceptions

from posthaste.core.ids import format_ms, now_ms
from tests.e2e.conftest import RunningServer
from tests.helpers import until


@pytest.fixture
def sdk(server: RunningServer) -> Iterator[RunningServer]:
    previous = (resend.api_key, resend.api_url)
    resend.api_key, resend.api_url = server.test_key, server.url
    yield server
    resend.api_key, resend.api_url = previous


def address(name: str) -> str:
    """A fresh address: the module's server keeps its data between tests."""
    return f"{name}-{uuid.uuid4().hex[:8]}@example.com"


def test_contacts_create_get_update_list_and_remove(sdk: RunningServer) -> None:
    email = address("ann")
    created = resend.Contacts.create(
        {"email": email, "first_name": "Ann", "unsubscribed": False, "properties": {"plan": "pro"}}
    )
    contact_id = created["id"]
    assert created["object"] == "contact"
    got = resend.Contacts.get(id=contact_id)
    assert got["email"] == email and got["first_name"] == "Ann"
    assert got["properties"] == {"plan": "pro"}
    assert resend.Contacts.get(email=email.upper())["id"] == contact_id

    updated = resend.Contacts.update({"email": email, "last_name": "Lee", "unsubscribed": True})
    assert updated["id"] == contact_id
    updated = resend.Contacts.update({"id": contact_id, "first_name": "Annie"})
    got = resend.Contacts.get(id=contact_id)
    assert (got["first_name"], got["last_name"], got["unsubscribed"]) == ("Annie", "Lee", True)

    listed = resend.Contacts.list()
    assert contact_id in [c["id"] for c in listed["data"]] and listed["has_more"] is False
    page = resend.Contacts.list(params={"limit": 1})
    assert len(page["data"]) == 1

    with pytest.raises(resend.exceptions.ResendError):
        resend.Contacts.create({"email": email.upper()})  # 409: the address is taken

    removed = resend.Contacts.remove(email=email)
    assert removed["id"] == contact_id and removed["deleted"] is True
    with pytest.raises(resend.exceptions.ResendError):
        resend.Contacts.get(id=contact_id)


def test_segments_and_memberships(sdk: RunningServer) -> None:
    segment = resend.Segments.create({"name": "Newsletter"})
    segment_id = segment["id"]
    assert resend.Segments.get(segment_id)["name"] == "Newsletter"
    resend.Segments.update(segment_id, {"name": "Weekly"})
    assert resend.Segments.get(segment_id)["name"] == "Weekly"
    assert segment_id in [s["id"] for s in resend.Segments.list()["data"]]

    ann = resend.Contacts.create({"email": address("ann"), "segments": [{"id": segment_id}]})
    bob_email = address("bob")
    bob = resend.Contacts.create({"email": bob_email})
    added = resend.Contacts.Segments.add({"segment_id": segment_id, "email": bob_email})
    assert added["id"] == segment_id
    resend.Contacts.Segments.add({"segment_id": segment_id, "contact_id": bob["id"]})  # again

    members = resend.Contacts.list(segment_id=segment_id)
    assert [c["id"] for c in members["data"]] == [ann["id"], bob["id"]]
    of_bob = resend.Contacts.Segments.list({"contact_id": bob["id"]})
    assert [s["id"] for s in of_bob["data"]] == [segment_id]

    removed = resend.Contacts.Segments.remove({"segment_id": segment_id, "email": bob_email})
    assert removed["deleted"] is True
    members = resend.Contacts.list(segment_id=segment_id)
    assert [c["id"] for c in members["data"]] == [ann["id"]]

    gone = resend.Segments.remove(segment_id)
    assert gone["deleted"] is True
    assert resend.Contacts.get(id=ann["id"])["id"] == ann["id"]  # contacts stay


def test_topics_and_a_contacts_subscriptions(sdk: RunningServer) -> None:
    news = resend.Topics.create(
        {"name": "News", "default_subscription": "opt_in", "description": "Monthly"}
    )
    offers = resend.Topics.create({"name": "Offers", "default_subscription": "opt_out"})
    assert resend.Topics.get(news["id"])["description"] == "Monthly"
    resend.Topics.update(offers["id"], {"description": "Now and then"})
    assert resend.Topics.get(offers["id"])["description"] == "Now and then"
    assert {news["id"], offers["id"]} <= {t["id"] for t in resend.Topics.list()["data"]}

    email = address("cat")
    cat = resend.Contacts.create(
        {"email": email, "topics": [{"id": offers["id"], "subscription": "opt_in"}]}
    )
    mine = {t["id"]: t["subscription"] for t in resend.Contacts.Topics.list(email=email)["data"]}
    assert mine[news["id"]] == "opt_in" and mine[offers["id"]] == "opt_in"

    updated = resend.Contacts.Topics.update(
        {"id": cat["id"], "topics": [{"id": news["id"], "subscription": "opt_out"}]}
    )
    assert updated["id"] == cat["id"]
    listed = resend.Contacts.Topics.list(contact_id=cat["id"])
    mine = {t["id"]: t["subscription"] for t in listed["data"]}
    assert mine[news["id"]] == "opt_out" and mine[offers["id"]] == "opt_in"

    assert resend.Topics.remove(offers["id"])["deleted"] is True
    listed = resend.Contacts.Topics.list(contact_id=cat["id"])
    assert offers["id"] not in {t["id"] for t in listed["data"]}


async def test_the_async_variants(sdk: RunningServer) -> None:
    segment = await resend.Segments.create_async({"name": "Async"})
    await resend.Segments.update_async(segment["id"], {"name": "Async 2"})
    assert (await resend.Segments.get_async(segment["id"]))["name"] == "Async 2"
    topic = await resend.Topics.create_async({"name": "T", "default_subscription": "opt_out"})
    await resend.Topics.update_async(topic["id"], {"name": "T2"})
    assert (await resend.Topics.get_async(topic["id"]))["name"] == "T2"
    email = address("dan")
    created = await resend.Contacts.create_async({"email": email, "first_name": "Dan"})
    await resend.Contacts.update_async({"id": created["id"], "last_name": "Ng"})
    assert (await resend.Contacts.get_async(email=email))["last_name"] == "Ng"
    await resend.Contacts.Segments.add_async({"segment_id": segment["id"], "email": email})
    listed = await resend.Contacts.list_async(segment_id=segment["id"])
    assert [c["id"] for c in listed["data"]] == [created["id"]]
    mine = await resend.Contacts.Segments.list_async({"email": email})
    assert [s["id"] for s in mine["data"]] == [segment["id"]]
    await resend.Contacts.Segments.remove_async({"segment_id": segment["id"], "email": email})
    choice = [{"id": topic["id"], "subscription": "opt_in"}]
    await resend.Contacts.Topics.update_async({"email": email, "topics": choice})
    topics = await resend.Contacts.Topics.list_async(email=email)
    assert {t["id"]: t["subscription"] for t in topics["data"]}[topic["id"]] == "opt_in"
    assert {s["id"] for s in (await resend.Segments.list_async())["data"]} >= {segment["id"]}
    assert {t["id"] for t in (await resend.Topics.list_async())["data"]} >= {topic["id"]}
    assert (await resend.Contacts.remove_async(id=created["id"]))["deleted"] is True
    assert (await resend.Segments.remove_async(segment["id"]))["deleted"] is True
    assert (await resend.Topics.remove_async(topic["id"]))["deleted"] is True


def test_contact_imports_create_get_and_list(sdk: RunningServer) -> None:
    segment = resend.Segments.create({"name": "Imported by the SDK"})
    good, bad = address("imp"), "not-an-address"
    csv = f"email,first_name,seats:number\n{good},Imp,4\n{bad},Bad,1\n".encode()
    started = resend.Contacts.Imports.create(
        {"file": csv, "on_conflict": "upsert", "segments": [{"id": segment["id"]}]}
    )
    assert started["object"] == "contact_import"
    import_id = started["id"]
    done = until(
        lambda: (got := resend.Contacts.Imports.get(import_id))["status"] == "completed" and got,
        "the import to complete",
    )
    assert done["counts"] == {"total": 2, "created": 1, "updated": 0, "skipped": 0, "failed": 1}
    assert done["completed_at"] is not None
    assert resend.Contacts.get(email=good)["properties"] == {"seats": 4}
    listed = resend.Contacts.Imports.list({"limit": 10})
    assert import_id in [i["id"] for i in listed["data"]]
    with pytest.raises(resend.exceptions.ResendError):
        resend.Contacts.Imports.create({"file": csv, "column_map": {"email": "Email"}})


def test_broadcasts_create_update_send_get_list_and_remove(sdk: RunningServer) -> None:
    segment = resend.Segments.create({"name": "Readers"})
    for name in ("ann", "bob"):
        resend.Contacts.create({"email": address(name), "segments": [{"id": segment["id"]}]})
    created = resend.Broadcasts.create(
        {
            "from": "News <news@example.com>",
            "audience_id": segment["id"],  # Resend's older name for segment_id
            "subject": "Hello {{contact.first_name}}",
            "html": "<p>Hi</p><a href='{{unsubscribe_url}}'>Unsubscribe</a>",
            "name": "Weekly",
        }
    )
    broadcast_id = created["id"]
    resend.Broadcasts.update({"broadcast_id": broadcast_id, "subject": "Hello again"})
    got = resend.Broadcasts.get(broadcast_id)
    assert (got["status"], got["subject"], got["segment_id"]) == (
        "draft",
        "Hello again",
        segment["id"],
    )
    assert broadcast_id in [b["id"] for b in resend.Broadcasts.list()["data"]]
    assert len(resend.Broadcasts.list({"limit": 1})["data"]) == 1

    assert resend.Broadcasts.send({"broadcast_id": broadcast_id})["id"] == broadcast_id
    got = until(
        lambda: (b := resend.Broadcasts.get(broadcast_id))["status"] == "sent" and b,
        "the broadcast sent",
    )
    assert (got["recipients"], got["sent"]) == (2, 2)
    with pytest.raises(resend.exceptions.ResendError):
        resend.Broadcasts.remove(broadcast_id)  # 409: no longer a draft

    draft = resend.Broadcasts.create(
        {"from": "news@example.com", "segment_id": segment["id"], "subject": "S", "text": "T"}
    )
    assert resend.Broadcasts.remove(draft["id"])["deleted"] is True


def test_a_scheduled_broadcast_is_cancelled(sdk: RunningServer) -> None:
    segment = resend.Segments.create({"name": "Later"})
    resend.Contacts.create({"email": address("cat"), "segments": [{"id": segment["id"]}]})
    later = format_ms(now_ms() + 3_600_000)
    created = resend.Broadcasts.create(
        {
            "from": "news@example.com",
            "segment_id": segment["id"],
            "subject": "S",
            "text": "T",
            "send": True,
            "scheduled_at": later,
        }
    )
    assert resend.Broadcasts.get(created["id"])["status"] == "scheduled"
    resend.Broadcasts.cancel(created["id"])
    got = resend.Broadcasts.get(created["id"])
    assert (got["status"], got["recipients"]) == ("cancelled", 0)


# The SDK warns that these calls are deprecated; they are what this test is about.
@pytest.mark.filterwarnings("ignore:.*deprecated.*:DeprecationWarning")
def test_the_older_audience_calls_work_on_segments(sdk: RunningServer) -> None:
    audience = resend.Audiences.create({"name": "Old style"})
    assert resend.Audiences.get(audience["id"])["name"] == "Old style"
    assert resend.Segments.get(audience["id"])["id"] == audience["id"]  # the same record
    assert audience["id"] in [a["id"] for a in resend.Audiences.list()["data"]]
    email = address("old")
    contact = resend.Contacts.create(
        {"audience_id": audience["id"], "email": email, "first_name": "Olga"}
    )
    listed = resend.Contacts.list(audience_id=audience["id"])
    assert [c["id"] for c in listed["data"]] == [contact["id"]]
    resend.Contacts.update({"audience_id": audience["id"], "id": contact["id"], "last_name": "K"})
    got = resend.Contacts.get(audience_id=audience["id"], email=email)
    assert (got["id"], got["first_name"], got["last_name"]) == (contact["id"], "Olga", "K")
    removed = resend.Contacts.remove(audience_id=audience["id"], id=contact["id"])
    assert removed["deleted"] is True
    assert resend.Audiences.remove(audience["id"])["deleted"] is True
    with pytest.raises(resend.exceptions.ResendError):
        resend.Audiences.get(audience["id"])

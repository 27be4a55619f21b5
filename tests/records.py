"""Realistic domain records, as the repositories return them, for tests of pure code."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from posthaste.core.attachment_links import LinkedAttachment
from posthaste.core.automation_runs import Automation, Run, RunStatus, RunStep, StepStatus
from posthaste.core.automations import AutomationStatus, parse_graph
from posthaste.core.broadcasts import Broadcast, BroadcastContent, BroadcastCounts, BroadcastStatus
from posthaste.core.contact_imports import ContactImport, ImportStatus, LineError, OnConflict
from posthaste.core.contacts import Contact
from posthaste.core.delivery import DeliveryAttempt
from posthaste.core.domains import Domain, RecordStatus, records_for
from posthaste.core.event_definitions import EventDefinition
from posthaste.core.ids import new_id
from posthaste.core.inbound import ReceivedAttachment, ReceivedEmail
from posthaste.core.models import (
    AttachmentInfo,
    Email,
    Event,
    KeyMode,
    Stream,
    Suppression,
    Template,
    TemplateVariable,
    TemplateVersion,
)
from posthaste.core.segments import Segment
from posthaste.core.serialize import email_event_data
from posthaste.core.status import EmailStatus
from posthaste.core.topics import ContactTopic, Topic
from posthaste.core.webhooks import DeliveryStatus, Webhook, WebhookAttempt, WebhookDelivery

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
TEAM = new_id()


def email(**overrides: Any) -> Email:
    """A queued email from the REST API: html only, one recipient, no template."""
    fields: dict[str, Any] = {
        "id": new_id(),
        "team_id": TEAM,
        "mode": KeyMode.LIVE,
        "from_address": "Acme <hello@acme.test>",
        "to": ["user@example.com"],
        "cc": [],
        "bcc": [],
        "reply_to": [],
        "subject": "Your receipt",
        "html": "<p>Thanks!</p>",
        "text": None,
        "headers": {},
        "tags": {},
        "status": EmailStatus.QUEUED,
        "last_event": "email.queued",
        "created_at": T0,
        "scheduled_at": None,
        "sent_at": None,
        "template_id": None,
        "stream_id": "transactional",
        "broadcast_id": None,
        "message_id": f"<{new_id()}@acme.test>",
        "provider_message_id": None,
        "region": "default",
    }
    return Email(**{**fields, **overrides})


def emails() -> list[Email]:
    """Queued, scheduled, sent with every optional field, delivered from a template, text only."""
    queued = email()
    return [
        queued,
        replace(
            queued,
            status=EmailStatus.SCHEDULED,
            last_event="email.scheduled",
            scheduled_at=T0 + 3_600_000,
        ),
        replace(
            queued,
            to=["a@example.com", "B <b@example.com>"],
            cc=["c@example.com"],
            bcc=["d@example.com"],
            reply_to=["support@acme.test"],
            text="Thanks!",
            headers={"X-Entity-Ref-ID": "123"},
            tags={"category": "receipt"},
            status=EmailStatus.SENT,
            last_event="email.sent",
            sent_at=T0 + 1_000,
            provider_message_id="Q1",
        ),
        replace(
            queued,
            template_id=new_id(),
            status=EmailStatus.DELIVERED,
            last_event="email.delivered",
            sent_at=T0 + 1_000,
            provider_message_id=queued.message_id,
        ),
        replace(queued, html=None, text="Plain", status=EmailStatus.SUPPRESSED),
    ]


def events() -> list[Event]:
    sent = emails()[2]
    bounce = {"type": "Permanent", "subtype": "NoEmail", "diagnostic": "550 5.1.1 No such user"}
    return [
        Event(new_id(), TEAM, "email.sent", sent.id, T0, email_event_data(sent)),
        Event(
            new_id(),
            TEAM,
            "email.bounced",
            sent.id,
            T0,
            email_event_data(sent, to=["a@example.com"], bounce=bounce),
        ),
        Event(
            new_id(),
            TEAM,
            "email.failed",
            sent.id,
            T0,
            email_event_data(sent, failed={"reason": "signing failed"}),
        ),
    ]


def attachments() -> list[LinkedAttachment]:
    url = "http://127.0.0.1:8080/attachments/token.mac"
    return [
        LinkedAttachment(
            AttachmentInfo(
                new_id(), new_id(), "invoice.pdf", "application/pdf", 1234, None, new_id()
            ),
            url,
            T0,
        ),
        LinkedAttachment(
            AttachmentInfo(new_id(), new_id(), "logo.png", "image/png", 99, "logo", new_id()),
            url,
            T0,
        ),
    ]


def delivery_attempts() -> list[DeliveryAttempt]:
    reply = {"recipient": "a@example.com", "code": 250, "text": "2.0.0 OK", "outcome": "delivered"}
    transcript = [
        {"elapsed_ms": 0, "note": "connected to 127.0.0.1:25"},
        {"elapsed_ms": 1, "command": "EHLO posthaste.test"},
        {"elapsed_ms": 2, "reply": "250 OK"},
    ]
    mx = DeliveryAttempt(
        new_id(),
        TEAM,
        new_id(),
        1,
        T0,
        "mx",
        "mx.example.com",
        ["a@example.com"],
        [reply],
        transcript,
        12,
    )
    refused = {**reply, "code": 451, "text": "4.4.1 Connection refused", "outcome": "deferred"}
    return [mx, replace(mx, attempt=2, host=None, replies=[refused], transcript=[])]


def streams() -> list[Stream]:
    return [
        Stream("transactional", TEAM, "Transactional", "transactional", T0),
        Stream("news", TEAM, "News", "broadcast", T0),
    ]


def suppressions() -> list[Suppression]:
    return [
        Suppression(new_id(), TEAM, "gone@example.com", "manual", None, T0),
        Suppression(new_id(), TEAM, "bad@example.com", "bounce", new_id(), T0),
    ]


def templates() -> list[Template]:
    template_id = new_id()
    variables = [
        TemplateVariable("first_name", "there", "string"),
        TemplateVariable("order.total", 12.5, "number"),
        TemplateVariable("count", 3),
        TemplateVariable("vip", True),
        TemplateVariable("code"),
    ]
    draft = TemplateVersion(
        new_id(), template_id, "Hi {{ first_name }}", "<p>{{ code }}</p>", None, variables
    )
    fresh = Template(template_id, TEAM, "Welcome", None, draft, None, None, T0, T0)
    empty = replace(draft, subject=None, html=None, text=None, variables=[])
    return [
        fresh,
        replace(fresh, alias="welcome", published_version_id=draft.id, published_at=T0 + 5),
        replace(fresh, draft=empty, published_version_id=new_id(), published_at=T0 + 5),
    ]


def domains() -> list[Domain]:
    records = records_for(
        "acme.test",
        "phabcdefghij",
        "MIIB" + "A" * 300,
        mx_host="feedback.posthaste.test",
        spf_include="spf.posthaste.test",
        receiving=True,
    )
    fresh = Domain(
        new_id(),
        TEAM,
        "acme.test",
        "default",
        RecordStatus.NOT_STARTED,
        records,
        "phabcdefghij",
        "local",
        False,
        False,
        "opportunistic",
        True,
        T0,
    )
    verified = tuple(replace(r, status=RecordStatus.VERIFIED) for r in records)
    return [
        fresh,
        replace(
            fresh,
            status=RecordStatus.VERIFIED,
            records=verified,
            verified_at=T0,
            last_checked_at=T0,
            claimed=True,
            tls="enforced",
            open_tracking=True,
            click_tracking=True,
        ),
    ]


def webhooks() -> list[Webhook]:
    hook = Webhook(new_id(), TEAM, "https://hooks.example.com/in", ["email.sent"], True, T0, T0)
    return [hook, replace(hook, events=["email.bounced", "domain.created"], enabled=False)]


def webhook_deliveries() -> list[WebhookDelivery]:
    data = email_event_data(email())
    pending = WebhookDelivery(
        new_id(), new_id(), "email.queued", T0, data, DeliveryStatus.PENDING, 1, T0 + 5_000
    )
    return [
        pending,
        replace(pending, status=DeliveryStatus.DELIVERED, attempts=2, next_attempt_at=None),
        replace(pending, status=DeliveryStatus.FAILED, attempts=8, next_attempt_at=None),
    ]


def webhook_attempts() -> list[WebhookAttempt]:
    ok = WebhookAttempt(new_id(), new_id(), new_id(), T0, 200, True, None, 35, "ok")
    return [
        ok,
        replace(
            ok, status_code=None, success=False, error="connection refused", response_body=None
        ),
        replace(ok, status_code=500, success=False, error="HTTP 500", response_body=""),
    ]


def contacts() -> list[Contact]:
    return [
        Contact(new_id(), TEAM, "ann@example.com", "ann@example.com", "Ann", "Lee", False,
                {"plan": "pro", "seats": 3, "score": 4.5}, T0, T0 + 1000),
        Contact(new_id(), TEAM, "Bob@xn--bcher-kva.example", "bob@xn--bcher-kva.example",
                None, None, True, {}, T0, T0),
    ]  # fmt: skip


def contact_imports() -> list[ContactImport]:
    return [
        ContactImport(new_id(), TEAM, ImportStatus.QUEUED, OnConflict.UPSERT, (), ("email",),
                      1, 0, 3, T0),
        ContactImport(new_id(), TEAM, ImportStatus.COMPLETED, OnConflict.SKIP, (new_id(),),
                      ("email", "plan", "seats:number"), 2, 2, 1500, T0, created=1000,
                      updated=0, skipped=499, failed=1, errors=(LineError(7, "bad address"),),
                      completed_at=T0 + 9000),
    ]  # fmt: skip


def segments() -> list[Segment]:
    return [Segment(new_id(), TEAM, "Newsletter", T0)]


def topics() -> list[Topic]:
    return [
        Topic(new_id(), TEAM, "News", "Monthly news", "opt_in", T0, T0),
        Topic(new_id(), TEAM, "Offers", None, "opt_out", T0, T0 + 5),
    ]


def contact_topics() -> list[ContactTopic]:
    news, offers = topics()
    return [ContactTopic(news, "opt_out"), ContactTopic(offers, "opt_out")]


def received_emails() -> list[ReceivedEmail]:
    """A received message with an inline image and a file, and a bare one without either."""
    item_id = new_id()
    attachments = [
        ReceivedAttachment(
            new_id(), item_id, 0, "0.1.1", "logo.png", "image/png", 200, "logo", "inline"
        ),
        ReceivedAttachment(
            new_id(), item_id, 1, "1", "a.pdf", "application/pdf", 9000, None, "attachment"
        ),
    ]
    full = ReceivedEmail(
        id=item_id,
        team_id=TEAM,
        kind="received",
        email_id=None,
        mail_from="ann@example.org",
        from_address="Ann <ann@example.org>",
        from_lookup="ann@example.org",
        to=["support@acme.test"],
        cc=[],
        reply_to=[],
        received_for=["support@acme.test"],
        subject="Help",
        html="<p>Help</p>",
        text="Help",
        headers={"Subject": "Help"},
        message_id="<1@example.org>",
        authentication={"spf": "pass", "dkim": "pass", "dmarc": "pass"},
        raw_blob_id=new_id(),
        size=12_000,
        created_at=T0,
        attachments=attachments,
    )
    bare = replace(full, id=new_id(), html=None, text=None, headers={}, attachments=[])
    return [full, bare]


def broadcasts() -> list[Broadcast]:
    content = BroadcastContent(segment_id=new_id(), from_="News <news@acme.test>")
    full = BroadcastContent(
        segment_id=new_id(), from_="news@acme.test", name="Weekly", subject="Hi {{name}}",
        html="<p>Hi</p>", text="Hi", template="weekly", data={"week": 3}, reply_to=["a@acme.test"],
        stream_id="broadcast", topic_id=new_id(), preview_text="This week",
    )  # fmt: skip
    return [
        Broadcast(new_id(), TEAM, None, content, BroadcastStatus.DRAFT, T0, T0),
        Broadcast(
            new_id(),
            TEAM,
            new_id(),
            full,
            BroadcastStatus.SENDING,
            T0,
            T0 + 9,
            scheduled_at=T0 + 5,
            resumes_at=T0 + 86_400_000,
            error="The daily quota is used up.",
            cursor=new_id(),
            counts=BroadcastCounts(10, 6, 1, 1, 1, 1),
        ),
        Broadcast(new_id(), TEAM, None, full, BroadcastStatus.SENT, T0, T0, sent_at=T0 + 20),
    ]


def automations() -> list[Automation]:
    graph = parse_graph(
        [
            {"key": "start", "type": "trigger", "config": {"event": "contact.created"}},
            {"key": "pause", "type": "delay", "config": {"duration": "2h"}},
            {
                "key": "mail",
                "type": "send_email",
                "config": {"from": "hi@acme.test", "template": "welcome", "data": {"n": 1}},
            },
        ],
        [{"from": "start", "to": "pause"}, {"from": "pause", "to": "mail"}],
    )
    return [
        Automation(new_id(), TEAM, "Welcome", AutomationStatus.ENABLED, KeyMode.LIVE, new_id(),
                   graph, T0, T0 + 5),
    ]  # fmt: skip


def automation_runs() -> list[Run]:
    run_id = new_id()
    steps = (
        RunStep(run_id, "start", "trigger", StepStatus.COMPLETED, T0, T0),
        RunStep(run_id, "mail", "send_email", StepStatus.COMPLETED, T0, T0 + 9,
                {"email_id": new_id()}),
        RunStep(run_id, "tag", "add_to_segment", StepStatus.FAILED, T0 + 9, T0 + 9, None,
                "The segment was deleted."),
    )  # fmt: skip
    return [
        Run(run_id, TEAM, new_id(), new_id(), new_id(), RunStatus.FAILED, None, {}, None, T0,
            T0 + 9, steps),
        Run(new_id(), TEAM, new_id(), new_id(), new_id(), RunStatus.RUNNING, "pause", {"a": 1},
            None, T0),
    ]  # fmt: skip


def event_definitions() -> list[EventDefinition]:
    schema = {"plan": "string", "seats": "number", "trial": "boolean", "renews": "date"}
    return [
        EventDefinition(new_id(), TEAM, "order.paid", schema, T0, T0 + 5),
        EventDefinition(new_id(), TEAM, "signup", None, T0, T0),
    ]

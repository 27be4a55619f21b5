"""schemathesis hooks for tests/e2e/test_fuzz_api.py (loaded through ``SCHEMATHESIS_HOOKS``).

Two hooks: one forgives "schema-valid request rejected" (ST202) when, and only when, the 422 names
a rule that OpenAPI cannot state and that the parameter's description states instead (every other
finding, and every other 422, still fails the run); the other leaves out the cases no HTTP client
can send (a header value starting with whitespace).
"""

from __future__ import annotations

import re
import string
from typing import Any

import schemathesis
from hypothesis import strategies as st

# Each: the message the API gives (a regular expression matched from its start) and why the
# document cannot say it in a schema.
UNSTATABLE_RULES: tuple[tuple[str, str], ...] = (
    # A cursor names a record of the caller's: what exists is data, not a schema.
    (r"'(after|before|cursor)' must be the id of one of (your|the) ", "a cursor is a record's id"),
    (r"'(after|before)' must be an RFC 3339 timestamp or the id of one of your ", "ditto"),
    (r"The 'cursor' is invalid", "a cursor is a next_cursor the API gave"),
    # Two parameters that may each be given, but not together.
    (r"Give 'after' or 'before', not both\.", "after and before exclude each other"),
    (r"Give 'cursor' or an email id in '(after|before)', not both", "ditto, cursor and an id"),
    # A reference to another of the caller's records (a segment, topic, domain, contact) that
    # does not exist: 422 naming the field, as PRODUCT decides; existence is data.
    (r".*(is|which is) not one of your ", "a reference names one of your records"),
    (r"Domain '.*' was not found; see GET /domains\.", "a reference names one of your domains"),
    (r"Template '.*' was not found; give the id or alias of one of your ", "ditto, a template"),
    # A live key sends a template's published version: whether it was published is data
    # (the field's description says so).
    (r"The template '.*' has never been published; publish it ", "a template's state"),
    (r"Step '.*' \(send_email\): template '.*' was not found; give ", "ditto, in a graph"),
    (r"'contact_id' must be the id of one of your contacts\.", "ditto, a contact"),
    (r"The stream '.*' does not exist; see GET /streams\.", "ditto, a stream"),
    # What DNS says at the moment of the request (a webhook host, a domain's claim record).
    (r"'endpoint' host .* does not resolve", "the endpoint's host must resolve"),
    # Whether a host's addresses are public (a generated "HTTP://0" is 0.0.0.0, and a name's
    # answer depends on the resolver: CI's gave 0.0.0.0 for one); the description says it.
    (r"'endpoint' is not reachable from the service: ", "the endpoint must be public"),
    (r"The claim record was not found", "the claim TXT record must be published first"),
    # A PATCH that would leave the stored template without a body (html: null on a template
    # that has no text): the rule is about the record, not the request.
    (r"A template needs 'html' or 'text'", "a template keeps a body"),
    # A contact import's CSV: the document says it is text (or a form's file); its header and
    # lines are described in words (an 'email' column, one line per contact, UTF-8).
    (r"(The CSV|The header|Header column|Line \d+)", "a CSV's grammar is not a schema"),
    # A form's 'segments' field holds JSON text ([{"id": ...}]), described in words.
    (r"'segments' must be JSON", "a form field's JSON is text to a schema"),
    # A stream created without an 'id' takes a slug of its name: the name must give one.
    (r"'id' must be a slug", "the id derived from the name must be a slug"),
    # An automation's graph: its steps are data to the connections that name them, and a
    # schema cannot say "unique by key", "one trigger", "reachable" or "no cycle".
    (r"'steps\[\d+\]\.key' .* is used by another step\.", "keys are unique in the graph"),
    (r"An automation has exactly one 'trigger' step", "one trigger among the steps"),
    (r"'connections\[\d+\]\.(from|to)' must be the key of one of the steps", "a step's key"),
    (r"'connections\[\d+\]': step .* already has a ", "one connection per branch of a step"),
    (r"'connections\[\d+\]': a \w+ step \(.*\) leads on with ", "the branches of its type"),
    (r"'connections\[\d+\]': nothing may lead into the trigger", "the trigger's key"),
    (r"The connections form a cycle through step ", "no cycle"),
    (r"Step .* is not reachable from the trigger", "every step reachable"),
    # A duration's bounds (more than 0, at most 365 days) across its units and decimals: the
    # pattern states its form, the description its bounds.
    (
        r"Step .* \((delay|wait_for_event)\): '(duration|timeout)'"
        r"( must be more than 0 and at most 365 days|: expected a finite duration)",
        "a duration's bounds",
    ),
    # A header line is its name, ": " and its value: a value's bound depends on its name's
    # length, which a schema cannot relate (the field's description says "fits 998 characters").
    (r"[\"']\S*headers\.\S*[\"'] is too long: 'Name: value' must fit in 998 ", "a line's length"),
    # Two fields that must hold the same value when both are given: a schema cannot compare.
    (r"'attachments\[\d+\]\.content_id' and '.*inline_content_id' name the same thing", "equal"),
    # Unique by one member: JSON Schema's uniqueItems compares whole items.
    (r"'variables' declares '.*' more than once\.", "a template's variables by key"),
    # A bound across three fields (to, cc and bcc together): each list's own is in the schema,
    # their sum in the description of 'to'.
    (r"Too many recipients: at most \d+ across 'to', 'cc' and 'bcc'\.", "a bound across fields"),
    # Relative to the clock: a schema states a format, not "within 30 days from now".
    (r"'scheduled_at' must be at most 30 days in the future", "a bound relative to now"),
    # A stream's type is data: mail on a broadcast stream has one recipient.
    (r"Mail on the broadcast stream .* goes to one recipient", "the stream's type is data"),
    # JSON Schema's "integer" admits 140.0; the API takes a byte only as an integer literal.
    # (A schema-valid request can meet this message only that way: 0-255 is in the schema.)
    (r"'attachments\[\d+\]\.content\[\d+\]' must be an integer from 0 to 255", "140.0"),
    # The regions are the deployment's configuration; GET /domains/regions lists them.
    (r"'region' must be one of: ", "regions are configured per deployment"),
    # So are the IP pools; GET /pools lists them.
    (r"'pool' must be one of: ", "pools are configured per deployment"),
)
_RULES = re.compile("|".join(f"(?:{pattern})" for pattern, _ in UNSTATABLE_RULES))


@schemathesis.hook
def filter_case(context: Any, case: Any) -> bool:
    """Leave out a case with a header value that starts with whitespace: HTTP strips it (it is
    not part of the value), so no client sends it as it is; the HTTP client refuses to, which
    schemathesis would report as a network error (seen on ``Idempotency-Key``)."""
    headers = case.headers or {}
    return not any(isinstance(v, str) and v != v.lstrip(" \t") for v in headers.values())


def _message(response: Any) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    return str(body.get("message", "")) if isinstance(body, dict) else ""


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """Keep every failure but an ST202 whose 422 names one of ``UNSTATABLE_RULES``."""
    if getattr(failure, "code", None) != "ST202" or response.status_code != 422:
        return True
    return _RULES.match(_message(response)) is None


# The document's "mailbox" format (an address, bare or with a display name) and "email": values
# the API accepts, so that positive cases are positive. Reserved names such as .local are out.
# Built from plain text draws, not ``st.from_regex``: a regex draw cost about 1 ms an address, and
# the coverage phase fills lists of up to 1,000 (a suppression batch) at each boundary; the
# phase on the operations that write took 108 s of schemathesis' CPU that way, 38 s this way.
_ALNUM = string.ascii_lowercase + string.digits
_LOCAL = st.builds(
    lambda first, rest: first + rest,
    st.sampled_from(_ALNUM),
    st.text(_ALNUM + "._+-", max_size=20)
    .map(lambda rest: rest.rstrip("._+-"))
    .filter(lambda rest: ".." not in rest),
)
# Labels of letters and digits only: IDNA reserves "--" in a label's third and fourth places
# (but for xn--), and the API refuses such a name (a generated 6u--8j0fw.org was refused, rightly).
_DOMAIN = st.builds(
    lambda labels, tld: ".".join([*labels, tld]),
    st.lists(st.text(_ALNUM, min_size=1, max_size=12), min_size=1, max_size=2),
    st.sampled_from(["com", "org", "net", "test"]),
)
_ADDRESS = st.builds(lambda local, domain: f"{local}@{domain}", _LOCAL, _DOMAIN)
_NAME = st.builds(
    lambda first, rest: first + rest,
    st.sampled_from(string.ascii_letters),
    st.text(string.ascii_letters + " .'-", max_size=30),
)
schemathesis.openapi.format("email", _ADDRESS)
schemathesis.openapi.format(
    "mailbox", st.one_of(_ADDRESS, st.builds(lambda name, a: f"{name} <{a}>", _NAME, _ADDRESS))
)

"""Parsing ``attachments`` of a send: a content type from the filename, content as bytes."""

from __future__ import annotations

import base64

import pytest

from posthaste.core import send_request
from posthaste.core.send_request import MAX_ATTACHMENT_BYTES, parse_send_request
from posthaste.errors import ValidationError


def parse(*attachments: object) -> list[tuple[str, str, bytes]]:
    body = {
        "from": "a@acme.test",
        "to": "b@example.com",
        "subject": "s",
        "text": "t",
        "attachments": list(attachments),
    }
    request = parse_send_request(body, now_ms=0)
    return [(a.filename, a.content_type, a.content) for a in request.attachments]


def refusal(*attachments: object) -> str:
    with pytest.raises(ValidationError) as caught:
        parse(*attachments)
    return str(caught.value)


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("report.pdf", "application/pdf"),
        ("LOGO.PNG", "image/png"),
        ("table.csv", "text/csv"),
        ("notes.txt", "text/plain"),
        ("backup.tar.gz", "application/gzip"),
        ("backup.tgz", "application/gzip"),
        ("Makefile", "application/octet-stream"),
        ("archive.unknown-ext", "application/octet-stream"),
        ("data:report.pdf", "application/pdf"),  # not read as a data: URL
        (r"C:\docs\scan.jpg", "image/jpeg"),
    ],
)
def test_missing_content_type_comes_from_the_filename(filename: str, expected: str) -> None:
    assert parse({"filename": filename, "content": "aGk="}) == [(filename, expected, b"hi")]
    assert parse({"filename": filename, "content_type": None, "content": "aGk="})[0][1] == expected


def test_only_pythons_own_table_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # A machine's mime.types (loaded into the module-level table) does not change the answer.
    monkeypatch.setitem(send_request.mimetypes.types_map, ".pdf", "x-local/pdf")
    assert parse({"filename": "a.pdf", "content": "aGk="})[0][1] == "application/pdf"


def test_a_given_content_type_is_kept_and_still_validated() -> None:
    assert parse({"filename": "a.pdf", "content_type": "Text/Plain", "content": "aGk="}) == [
        ("a.pdf", "text/plain", b"hi")
    ]
    for bad in ("", "no slash", "text/plain\n", 7):
        assert "attachments[0].content_type" in refusal(
            {"filename": "a.pdf", "content_type": bad, "content": "aGk="}
        )


def test_content_as_an_array_of_byte_values() -> None:
    blob = bytes(range(256))
    assert parse({"filename": "a.bin", "content": list(blob)}) == [
        ("a.bin", "application/octet-stream", blob)
    ]
    assert parse({"filename": "empty.txt", "content": []}) == [("empty.txt", "text/plain", b"")]
    assert parse(
        {"filename": "a.txt", "content": "aGk="}, {"filename": "b.txt", "content": [104, 105]}
    ) == [("a.txt", "text/plain", b"hi"), ("b.txt", "text/plain", b"hi")]


@pytest.mark.parametrize(
    ("content", "index"),
    [
        ([1, 256], 1),
        ([-1], 0),
        ([1, 2, 3.0], 2),
        ([0.5], 0),
        ([True], 0),
        ([False], 0),
        (["1"], 0),
        ([None], 0),
        ([[1]], 0),
    ],
)
def test_a_bad_byte_value_is_named(content: list[object], index: int) -> None:
    message = refusal(
        {"filename": "a.txt", "content": "aGk="}, {"filename": "b", "content": content}
    )
    assert f"'attachments[1].content[{index}]'" in message and "0 to 255" in message


def test_other_content_shapes_are_refused() -> None:
    for content in (None, 12, {"data": [1]}, True):
        assert "'attachments[0].content' is required" in refusal(
            {"filename": "a.txt", "content": content}
        )


def test_the_budget_counts_arrays_and_refuses_a_long_one_before_decoding() -> None:
    half = MAX_ATTACHMENT_BYTES // 2 + 1
    # Each half fits alone; together they are over: arrays and base64 share one budget.
    assert "18 MiB" in refusal(
        {"filename": "a", "content": [0] * half},
        {"filename": "b", "content": base64.b64encode(bytes(half)).decode()},
    )
    # One element over the budget: refused by its length (the bad values are never read).
    too_long: list[object] = [None] * (MAX_ATTACHMENT_BYTES + 1)
    message = refusal({"filename": "a", "content": too_long})
    assert "'attachments[0].content' is larger than the 18 MiB" in message

"""Contact imports' CSV: the whole-file check, the header's columns and types, each line parsed
into changes or a line error, parts that read back as the file, and a part's plan."""

from __future__ import annotations

import csv
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.contact_imports import (
    CsvRecord,
    ImportedLine,
    LineError,
    OnConflict,
    check_csv,
    parse_header,
    parse_line,
    plan_part,
    read_csv,
)
from posthaste.core.contacts import Contact
from posthaste.core.template_fields import UNCHANGED
from posthaste.errors import ValidationError

T0 = 1_767_225_600_000


def line(header: str, text: str, number: int = 2) -> ImportedLine | LineError:
    columns = parse_header(next(csv.reader([header])))
    return parse_line(columns, CsvRecord(number, next(csv.reader([text])), 0, number + 1))


def test_the_header_names_fields_in_any_case_and_types_properties() -> None:
    columns = parse_header(["\ufeff Email ", "FIRST_NAME", "plan", "seats:number", "zip:String"])
    assert [(c.name, c.is_property, c.number) for c in columns] == [
        ("email", False, False),
        ("first_name", False, False),
        ("plan", True, False),
        ("seats", True, True),
        ("zip", True, False),
    ]


@pytest.mark.parametrize(
    ("cells", "says"),
    [
        (["first_name"], "no 'email' column"),
        (["email", "since:date"], "unknown column type 'date'"),
        (["email", "email"], "named twice"),
        (["email", "Plan", "Plan"], "named twice"),
        (["email", ""], "Header column 2 has no name"),
        (["email", "my plan"], "Header column 2"),
        (["email:number"], "takes no type"),
        (["email", *[f"p{n}" for n in range(51)]], "more than 50"),
    ],
)
def test_a_wrong_header_is_refused_naming_the_column(cells: list[str], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        parse_header(cells)


def test_a_line_gives_only_its_non_empty_cells() -> None:
    parsed = line(
        "email,first_name,last_name,unsubscribed,plan,seats:number", "A@B.example,Ann,,YES,,7"
    )
    assert isinstance(parsed, ImportedLine)
    assert parsed.address.lookup_key == "a@b.example"
    assert parsed.changes.first_name == "Ann"
    assert parsed.changes.last_name is UNCHANGED
    assert parsed.changes.unsubscribed is True
    assert parsed.changes.properties == {"seats": 7}


@pytest.mark.parametrize(
    ("cell", "value"),
    [("3", 3), ("-3", -3), ("+4", 4), ("2.5", 2.5), (".5", 0.5), ("1e3", 1000.0), (" 8 ", 8)],
)
def test_number_columns_take_integers_and_decimals(cell: str, value: float) -> None:
    parsed = line("email,seats:number", f"a@b.example,{cell}")
    assert isinstance(parsed, ImportedLine)
    assert parsed.changes.properties == {"seats": value}
    assert type(parsed.changes.properties["seats"]) is type(value)


def test_string_columns_keep_what_looks_like_a_number() -> None:
    parsed = line("email,zip,phone", "a@b.example,02134,+1 555 0100")
    assert isinstance(parsed, ImportedLine)
    assert parsed.changes.properties == {"zip": "02134", "phone": "+1 555 0100"}


@pytest.mark.parametrize(
    ("header", "text", "says"),
    [
        ("email,seats:number", "a@b.example,many", "'seats' is a number column"),
        ("email,seats:number", "a@b.example,nan", "not a number"),
        ("email,seats:number", "a@b.example,1e999", "not a number"),
        ("email,seats:number", "a@b.example,1_000", "not a number"),
        ("email,unsubscribed", "a@b.example,maybe", "'unsubscribed' must be"),
        ("email,first_name", "not-an-address,Ann", "'email'"),
        ("email,first_name", ",Ann", "'email' is required"),
        ("email,first_name", "Ann <a@b.example>,Ann", "bare address"),
        ("email,first_name", 'a@b.example,"A\x01"', "control characters"),
        ("email,plan", "a@b.example," + "x" * 2001, "at most 2000"),
        ("email,plan", "a@b.example", "1 fields; the header has 2"),
        ("email,plan", "a@b.example,a,b", "3 fields; the header has 2"),
    ],
)
def test_a_wrong_line_is_a_line_error(header: str, text: str, says: str) -> None:
    parsed = line(header, text, 9)
    assert isinstance(parsed, LineError)
    assert parsed.line == 9 and says in parsed.message


def test_check_counts_contact_lines_and_numbers_lines_as_the_file_does() -> None:
    data = b'email,plan\r\n\r\na@b.example,"two\r\nlines"\r\n\r\nc@d.example,x\r\n'
    checked = check_csv(data)
    assert checked.header == ("email", "plan") and checked.total == 2
    records = list(read_csv(data))
    assert [(r.line, r.fields) for r in records] == [
        (1, ["email", "plan"]),
        (3, ["a@b.example", "two\r\nlines"]),
        (6, ["c@d.example", "x"]),
    ]


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"", "empty"),
        (b"\n\n", "empty"),
        (b"email\n", "no contact lines"),
        (b'email\n"a@b.example\n', "Line 2: the CSV is malformed"),
        (b"email\na@b.example\n\xff\n", "Line 3 is not UTF-8"),
    ],
)
def test_check_refuses_a_file_that_cannot_be_imported(data: bytes, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        check_csv(data)


cells = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)


@given(
    rows=st.lists(st.lists(cells, min_size=2, max_size=2), max_size=30),
    blank=st.lists(st.booleans(), min_size=30, max_size=30),
    part_rows=st.integers(1, 4),
)
def test_parts_read_back_as_the_whole_file(
    rows: list[list[str]], blank: list[bool], part_rows: int
) -> None:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(["email", "plan"])
    for row, extra in zip(rows, blank, strict=False):
        writer.writerow(row)
        if extra:
            out.write("\r\n")
    data = out.getvalue().encode()
    whole = [(r.line, r.fields) for r in read_csv(data)][1:]
    if not whole:
        return
    checked = check_csv(data, part_rows)
    parts = [
        [(r.line, r.fields) for r in read_csv(data[p.start : p.end], p.first_line)]
        for p in checked.parts
    ]
    assert [record for part in parts for record in part] == whole
    assert all(len(part) == part_rows for part in parts[:-1])
    assert checked.total == len(whole)


def contact(email: str, **values: object) -> Contact:
    fields: dict[str, object] = {
        "first_name": None, "last_name": None, "unsubscribed": False, "properties": {},
    }  # fmt: skip
    fields.update(values)
    return Contact(
        "id-" + email, "team", email, email.lower(), created_at=T0, updated_at=T0, **fields
    )  # type: ignore[arg-type]


def imported(header: str, *texts: str) -> list[ImportedLine]:
    parsed = [line(header, text, number) for number, text in enumerate(texts, start=2)]
    assert all(isinstance(p, ImportedLine) for p in parsed)
    return parsed  # type: ignore[return-value]


def test_a_plan_creates_new_addresses_and_writes_or_skips_existing_ones() -> None:
    lines = imported(
        "email,plan",
        "new@example.com,a",
        "NEW@example.com,b",
        "old@example.com,gold",
        "same@example.com,x",
    )
    existing = [contact("old@example.com"), contact("same@example.com", properties={"plan": "x"})]
    upsert = plan_part("team", lines, existing, OnConflict.UPSERT, T0 + 5)
    assert [c.properties for c in upsert.created.values()] == [{"plan": "b"}]
    assert [(c.id, c.properties) for c in upsert.updated.values()] == [
        ("id-old@example.com", {"plan": "gold"})
    ]
    assert (upsert.changed_lines, upsert.skipped_lines) == (2, 1)
    assert len(upsert.contact_ids) == 3
    skip = plan_part("team", lines, existing, OnConflict.SKIP, T0 + 5)
    assert [c.properties for c in skip.created.values()] == [{"plan": "a"}]
    assert (skip.updated, skip.changed_lines, skip.skipped_lines) == ({}, 0, 3)

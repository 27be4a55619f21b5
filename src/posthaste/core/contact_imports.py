"""Contact imports: a CSV of contacts, checked whole when it arrives and read back in parts of
``PART_ROWS`` lines by a job (pure, no I/O).

Decisions (docs/audiences.md, "Importing contacts"):

- UTF-8 (a leading byte-order mark is dropped), RFC 4180 quoting, a header row. Blank lines are
  not contacts and are not counted.
- Header cells, trimmed: ``email`` (required), ``first_name``, ``last_name``, ``unsubscribed``
  (any case); every other column is a property named by its header, a string unless the header
  says ``name:number`` (``name:string`` says the default). Any other ``:type`` is an unknown
  column type, refused with the header, as are a repeated or invalid name and more than 50
  property columns: a file whose header is wrong stores nothing.
- A line's empty cell gives no value: a new contact goes without it, an existing one keeps
  what it has. ``unsubscribed`` is ``true|false|yes|no|1|0`` (any case).
- A line that is wrong (its field count, its address, a name, a number, a value too long) is a
  line error ``{line, message}`` (the physical line where the record starts, the header being
  line 1) and changes nothing; the other lines go in.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

from posthaste.core.addresses import Address
from posthaste.core.contacts import (
    MAX_PROPERTIES,
    Contact,
    ContactChanges,
    PropertyValue,
    parse_contact_email,
    parse_contact_name,
    parse_segment_refs,
    property_key,
    property_value,
)
from posthaste.core.form_data import FormPart
from posthaste.core.ids import new_id
from posthaste.core.template_fields import UNCHANGED, Unchanged
from posthaste.errors import ValidationError

PART_ROWS = 1000  # lines per stored part: one transaction, one statement per table
MAX_ERRORS = 100  # line errors kept (every refused line is counted in ``failed``)
MAX_ATTEMPTS = 5  # runs of the job (a crash or an error each) before the import is failed
RESERVED = ("email", "first_name", "last_name", "unsubscribed")
_TYPES = ("string", "number")
_FLAGS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INTEGER = re.compile(r"[+-]?\d{1,18}")
_BOM = "\ufeff"
T = TypeVar("T")


class OnConflict(StrEnum):
    """What a line does to a contact that exists: write its values, or leave it be."""

    UPSERT = "upsert"
    SKIP = "skip"


class ImportStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


@dataclass(frozen=True)
class LineError:
    line: int
    message: str


@dataclass(frozen=True)
class Column:
    """A header cell: a contact field (``RESERVED``) or a property (``number`` or string)."""

    name: str
    is_property: bool = False
    number: bool = False


@dataclass(frozen=True)
class ContactImport:
    """An import and its progress: ``next_part`` is the first stored part not yet in."""

    id: str
    team_id: str
    status: ImportStatus
    on_conflict: OnConflict
    segment_ids: tuple[str, ...]
    header: tuple[str, ...]
    parts: int
    next_part: int
    total: int
    created_at: int
    created: int = 0
    updated: int = 0
    skipped: int = 0
    failed: int = 0
    errors: tuple[LineError, ...] = ()
    completed_at: int | None = None


@dataclass(frozen=True)
class ImportedLine:
    """A good line: the address and the values it gives (``UNCHANGED`` for empty cells)."""

    line: int
    address: Address
    changes: ContactChanges


@dataclass(frozen=True)
class PartSpan:
    """Where a part lies in the uploaded body: bytes ``[start, end)``, from line ``first_line``."""

    start: int
    end: int
    first_line: int


@dataclass(frozen=True)
class CheckedCsv:
    """An upload that may be stored: its header, its contact lines and the parts they fill."""

    header: tuple[str, ...]
    total: int
    parts: list[PartSpan] = field(default_factory=list)


@dataclass
class _Tally:
    """How far ``_lines`` has read: the next line's number and the bytes behind it."""

    next_line: int
    offset: int


@dataclass(frozen=True)
class CsvRecord:
    line: int
    fields: list[str]
    end: int  # the byte offset just past the record
    next_line: int  # the number of the line at ``end``


def read_csv(data: bytes | bytearray, first_line: int = 1) -> Iterator[CsvRecord]:
    """The non-blank records of ``data``, each with its first line's number and its end;
    non-UTF-8 text or broken quoting is a ``ValidationError`` naming the line."""
    tally = _Tally(first_line, 0)
    reader = csv.reader(_lines(data, tally), strict=True)
    while True:
        line = tally.next_line
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ValidationError(f"Line {line}: the CSV is malformed ({exc}).") from None
        if fields:
            yield CsvRecord(line, fields, tally.offset, tally.next_line)


def _lines(data: bytes | bytearray, tally: _Tally) -> Iterator[str]:
    start = 0
    size = len(data)
    while start < size:
        stop = data.find(b"\n", start)
        stop = size if stop < 0 else stop + 1
        try:
            text = data[start:stop].decode("utf-8")
        except UnicodeDecodeError:
            raise ValidationError(
                f"Line {tally.next_line} is not UTF-8 text: save the CSV as UTF-8."
            ) from None
        tally.next_line += 1
        tally.offset = stop
        start = stop
        yield text


def check_csv(data: bytes | bytearray, part_rows: int = PART_ROWS) -> CheckedCsv:
    """The whole upload read once: a good header, at least one contact line, well-formed
    UTF-8 CSV throughout, cut into parts of ``part_rows`` lines (``ValidationError`` else)."""
    records = read_csv(data)
    first = next(records, None)
    if first is None:
        raise ValidationError("The CSV is empty: send a header row and one line per contact.")
    header = tuple(first.fields)
    parse_header(header)
    parts: list[PartSpan] = []
    total = 0
    start, first_line = first.end, first.next_line
    for record in records:
        total += 1
        if total % part_rows == 0:
            parts.append(PartSpan(start, record.end, first_line))
            start, first_line = record.end, record.next_line
    if total % part_rows:
        parts.append(PartSpan(start, len(data), first_line))
    if total == 0:
        raise ValidationError("The CSV has a header but no contact lines.")
    return CheckedCsv(header, total, parts)


def parse_header(cells: Sequence[str]) -> tuple[Column, ...]:
    """The columns the header names; a wrong header is a ``ValidationError`` naming the cell."""
    columns: list[Column] = []
    for number, cell in enumerate(cells, start=1):
        column = _column(cell.lstrip(_BOM).strip() if number == 1 else cell.strip(), number)
        if column.name in (c.name for c in columns):
            raise ValidationError(f"Header column {number}: {column.name!r} is named twice.")
        columns.append(column)
    if not any(c.name == "email" for c in columns):
        raise ValidationError("The header has no 'email' column: name one column 'email'.")
    if sum(c.is_property for c in columns) > MAX_PROPERTIES:
        raise ValidationError(f"The header names more than {MAX_PROPERTIES} property columns.")
    return tuple(columns)


def _column(cell: str, number: int) -> Column:
    name, colon, kind = cell.rpartition(":")
    if not colon:
        name, kind = cell, "string"
    kind = kind.strip().lower()
    name = name.strip()
    if kind not in _TYPES:
        raise ValidationError(
            f"Header column {number} ({cell!r}): unknown column type {kind!r}; "
            "write 'name:number' or 'name:string'."
        )
    if name.lower() in RESERVED:
        if colon:
            raise ValidationError(f"Header column {number}: {name.lower()!r} takes no type.")
        return Column(name.lower())
    if not name:
        raise ValidationError(f"Header column {number} has no name.")
    try:
        key = property_key(name)
    except ValidationError as exc:
        raise ValidationError(f"Header column {number}: {exc.message}") from None
    return Column(key, is_property=True, number=kind == "number")


def parse_line(columns: Sequence[Column], record: CsvRecord) -> ImportedLine | LineError:
    """One contact line read against the header's columns."""
    if len(record.fields) != len(columns):
        return LineError(
            record.line, f"The line has {len(record.fields)} fields; the header has {len(columns)}."
        )
    try:
        return _imported(columns, record)
    except ValidationError as exc:
        return LineError(record.line, exc.message)


def _imported(columns: Sequence[Column], record: CsvRecord) -> ImportedLine:
    cells = {c.name: raw.strip() for c, raw in zip(columns, record.fields, strict=True)}
    address = parse_contact_email(cells["email"] or None)
    properties: dict[str, PropertyValue | None] = {
        c.name: _property(c, cells[c.name]) for c in columns if c.is_property and cells[c.name]
    }
    unsubscribed = cells.get("unsubscribed")
    changes = ContactChanges(
        first_name=_name(cells, "first_name"),
        last_name=_name(cells, "last_name"),
        unsubscribed=_flag(unsubscribed) if unsubscribed else UNCHANGED,
        properties=properties,
    )
    return ImportedLine(record.line, address, changes)


def _name(cells: dict[str, str], name: str) -> str | Unchanged | None:
    cell = cells.get(name)
    return parse_contact_name(cell, name) if cell else UNCHANGED


def _property(column: Column, cell: str) -> PropertyValue | None:
    if not column.number:
        return property_value(column.name, cell)
    if _INTEGER.fullmatch(cell):
        return int(cell)
    if _NUMBER.fullmatch(cell) and math.isfinite(value := float(cell)):
        return value
    raise ValidationError(f"{column.name!r} is a number column; {cell[:40]!r} is not a number.")


def _flag(cell: str) -> bool:
    flag = _FLAGS.get(cell.lower())
    if flag is None:
        raise ValidationError(
            f"'unsubscribed' must be true, false, yes, no, 1 or 0; got {cell[:40]!r}."
        )
    return flag


@dataclass
class PartOutcome:
    """What a part's good lines do: contacts to create and to update (each once, as the part
    leaves it), every line's contact id (for segments), and the lines counted each way."""

    created: dict[str, Contact] = field(default_factory=dict)  # by lookup address
    updated: dict[str, Contact] = field(default_factory=dict)
    contact_ids: dict[str, None] = field(default_factory=dict)  # in order, once each
    changed_lines: int = 0  # lines that changed a contact the part did not create
    skipped_lines: int = 0


def plan_part(
    team_id: str,
    lines: Sequence[ImportedLine],
    existing: Sequence[Contact],
    on_conflict: OnConflict,
    now: int,
) -> PartOutcome:
    """Apply the lines in order: a new address creates its contact (a later line of the same
    address then counts as a line on an existing contact); with ``skip`` a line on an existing
    contact changes nothing, with ``upsert`` it writes its values, and one that changes
    nothing is skipped too."""
    outcome = PartOutcome()
    current = {c.email_key: c for c in existing}
    for line in lines:
        key = line.address.lookup_key
        found = current.get(key)
        if found is None:
            found = _new_contact(team_id, line, now)
            outcome.created[key] = current[key] = found
        elif on_conflict is OnConflict.SKIP or (changed := _applied(line, found, now)) == found:
            outcome.skipped_lines += 1
        else:
            outcome.changed_lines += 1
            current[key] = changed
            (outcome.created if key in outcome.created else outcome.updated)[key] = changed
        outcome.contact_ids[found.id] = None
    return outcome


def _applied(line: ImportedLine, contact: Contact, now: int) -> Contact:
    return line.changes.applied_to(contact, now)


def _new_contact(team_id: str, line: ImportedLine, now: int) -> Contact:
    changes = line.changes
    return Contact(
        new_id(), team_id, line.address.address, line.address.lookup_key,
        _given(changes.first_name), _given(changes.last_name),
        _given(changes.unsubscribed) or False,
        {k: v for k, v in changes.properties.items() if v is not None}, now, now,
    )  # fmt: skip


def _given(value: T | Unchanged) -> T | None:
    return None if isinstance(value, Unchanged) else value


@dataclass(frozen=True)
class FormUpload:
    """Resend's form upload: the CSV, and the options its other fields give."""

    file: FormPart
    on_conflict: OnConflict | None
    segment_ids: tuple[str, ...]


def parse_form_upload(parts: Mapping[str, FormPart]) -> FormUpload:
    """The ``file`` part and the ``on_conflict`` and ``segments`` (JSON) fields; Resend's
    ``column_map`` and ``topics`` are refused (the header names the columns here)."""
    for name in ("column_map", "topics"):
        if name in parts:
            raise ValidationError(
                f"{name!r} is not supported in imports: name the CSV's header columns "
                "'email', 'first_name', 'last_name', 'unsubscribed' and property keys instead."
            )
    file = parts.get("file")
    if file is None:
        raise ValidationError("The form has no 'file' part: send the CSV in it.")
    conflict = parts.get("on_conflict")
    return FormUpload(
        file,
        parse_on_conflict(conflict.text("on_conflict")) if conflict else None,
        _form_segments(parts.get("segments")),
    )


def _form_segments(part: FormPart | None) -> tuple[str, ...]:
    if part is None:
        return ()
    try:
        value = json.loads(part.text("segments"))
    except json.JSONDecodeError:
        raise ValidationError("'segments' must be JSON: [{\"id\": ...}].") from None
    return parse_segment_refs(value)


def parse_on_conflict(value: str | None) -> OnConflict:
    """``on_conflict``: ``upsert`` (the default) or ``skip``."""
    if value is None or value == "":
        return OnConflict.UPSERT
    try:
        return OnConflict(value)
    except ValueError:
        raise ValidationError("'on_conflict' must be 'upsert' or 'skip'.") from None


def kept_errors(current: tuple[LineError, ...], new: Sequence[LineError]) -> tuple[LineError, ...]:
    """The first ``MAX_ERRORS`` line errors of the import so far."""
    return (*current, *new[: max(0, MAX_ERRORS - len(current))])

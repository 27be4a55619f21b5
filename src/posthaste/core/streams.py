"""Message streams as callers describe them, parsed once at the edge (pure, no I/O), and the two
streams every team starts with."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from posthaste.core.pools import PoolChange, parse_pool_field
from posthaste.errors import ValidationError

MAX_NAME_LENGTH = 200
STREAM_TYPES = ("transactional", "broadcast")
_SLUG = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


@dataclass(frozen=True)
class NewStream:
    """A stream to create: its slug ``id``, display name and type, every field checked."""

    id: str
    name: str
    type: str
    pool: str | None = None  # an IP pool's name (whether it is configured: the service's)


@dataclass(frozen=True)
class StreamChanges:
    """``PATCH /streams/{id}``: None leaves a field as it is; ``pool`` may set or clear."""

    name: str | None = None
    pool: PoolChange | None = None


DEFAULT_STREAMS = (
    NewStream("transactional", "Transactional", "transactional"),
    NewStream("broadcast", "Broadcast", "broadcast"),
)
DEFAULT_STREAM_IDS = frozenset(stream.id for stream in DEFAULT_STREAMS)


def parse_new_stream(fields: Mapping[str, object]) -> NewStream:
    """``POST /streams``'s body; without an ``id``, the slug is derived from the name."""
    name = fields.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_LENGTH:
        raise ValidationError("'name' is required: 1-200 characters.")
    kind = fields.get("type")
    if not isinstance(kind, str) or kind not in STREAM_TYPES:
        raise ValidationError("'type' must be 'transactional' or 'broadcast'.")
    stream_id = fields.get("id")
    slug = stream_id if stream_id is not None else _slugify(name)
    if not isinstance(slug, str) or not _SLUG.fullmatch(slug):
        raise ValidationError(
            "'id' must be a slug: lowercase letters, digits, '-' and '_', at most 64 characters."
        )
    pool = parse_pool_field(fields)
    return NewStream(slug, name.strip(), kind, None if pool is None else pool.name)


def parse_stream_changes(fields: Mapping[str, object]) -> StreamChanges:
    """``PATCH /streams/{id}``'s body: ``name``, ``pool`` or both."""
    if "name" not in fields and "pool" not in fields:
        raise ValidationError("Give 'name', 'pool' or both to change.")
    name = parse_stream_name(fields["name"]) if "name" in fields else None
    return StreamChanges(name, parse_pool_field(fields))


def parse_stream_name(value: object) -> str:
    """A new name for a stream (``PATCH /streams/{id}``), trimmed."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_LENGTH:
        raise ValidationError("'name' must be 1-200 characters.")
    return value.strip()


def _slugify(name: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", name.strip().lower()).strip("-")[:64]

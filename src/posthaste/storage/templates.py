"""Templates and their immutable content versions, always scoped by team.

A template row names its draft version (the latest content) and its published version (what
live sends use). A reference is the template's id when it is shaped like a UUID, else its alias.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, delete, select, update
from sqlalchemy.exc import IntegrityError

from posthaste.core.ids import is_uuid
from posthaste.core.models import Template, TemplateVariable, TemplateVersion
from posthaste.core.template_fields import UNCHANGED, TemplateChanges
from posthaste.storage.database import Tx
from posthaste.storage.dialects import insert_for
from posthaste.storage.keyset import read_page
from posthaste.storage.tables import template_versions, templates

_draft = template_versions.alias("draft")
_published = template_versions.alias("published")
_VERSION_FIELDS = ("id", "template_id", "subject", "html", "text", "variables")


@dataclass(frozen=True)
class SendableTemplate:
    """What a send needs: the id, the latest draft and the published version (if any)."""

    id: str
    draft: TemplateVersion
    published: TemplateVersion | None


def version_row(version: TemplateVersion, team_id: str, now: int) -> dict[str, Any]:
    return {
        "id": version.id,
        "template_id": version.template_id,
        "team_id": team_id,
        "subject": version.subject,
        "html": version.html,
        "text": version.text,
        "variables": [_variable_json(v) for v in version.variables],
        "created_at": now,
    }


def _variable_json(variable: TemplateVariable) -> dict[str, Any]:
    stored: dict[str, Any] = {"key": variable.key, "fallback_value": variable.fallback_value}
    if variable.type is not None:
        stored["type"] = variable.type
    return stored


def _version(row: Any, prefix: str) -> TemplateVersion:
    values = {name: getattr(row, f"{prefix}_{name}") for name in _VERSION_FIELDS}
    variables = [
        TemplateVariable(v["key"], v.get("fallback_value"), v.get("type"))
        for v in values.pop("variables") or []
    ]
    return TemplateVersion(**values, variables=variables)


def _template(row: Any) -> Template:
    return Template(
        id=row.id,
        team_id=row.team_id,
        name=row.name,
        alias=row.alias,
        draft=_version(row, "draft"),
        published_version_id=row.published_version_id,
        published_at=row.published_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _labelled(table: Any, prefix: str) -> list[Any]:
    return [table.c[name].label(f"{prefix}_{name}") for name in _VERSION_FIELDS]


def _with_draft() -> Select[Any]:
    return select(templates, *_labelled(_draft, "draft")).join(
        _draft, _draft.c.id == templates.c.draft_version_id
    )


def _by_ref(query: Select[Any], team_id: str, ref: str) -> Select[Any]:
    column = templates.c.id if is_uuid(ref) else templates.c.alias
    return query.where(templates.c.team_id == team_id, column == ref.lower())


async def get_template(
    tx: Tx, team_id: str, ref: str, *, for_update: bool = False
) -> Template | None:
    """The template with this id or alias in this team, with its draft content.

    ``for_update`` locks the template row (PostgreSQL) so concurrent edits apply one by one.
    The lock is taken alone, before the join: a joined ``FOR UPDATE`` would re-check the join
    against the version row read before the wait, and miss a template whose draft just changed.
    """
    if for_update:
        lock = _by_ref(select(templates.c.id), team_id, ref).with_for_update()
        await tx.conn.execute(lock)
    row = (await tx.conn.execute(_by_ref(_with_draft(), team_id, ref))).first()
    return _template(row) if row else None


async def get_sendable(tx: Tx, team_id: str, ref: str) -> SendableTemplate | None:
    """The template's draft and published versions in one query."""
    query = _by_ref(
        _with_draft()
        .add_columns(*_labelled(_published, "published"))
        .outerjoin(_published, _published.c.id == templates.c.published_version_id),
        team_id,
        ref,
    )
    row = (await tx.conn.execute(query)).first()
    if row is None:
        return None
    published = _version(row, "published") if row.published_id is not None else None
    return SendableTemplate(row.id, _version(row, "draft"), published)


async def stream_templates(tx: Tx, team_id: str) -> AsyncIterator[Template]:
    """Every template of the team, oldest first, streamed (flat memory)."""
    query = (
        _with_draft()
        .where(templates.c.team_id == team_id)
        .order_by(templates.c.created_at, templates.c.id)
    )
    result = await tx.conn.stream(query.execution_options(yield_per=500))
    async for row in result:
        yield _template(row)


async def page_templates(
    tx: Tx, team_id: str, limit: int, anchor: str | None, *, backwards: bool
) -> tuple[list[Template], bool] | None:
    """A page of the team's templates (oldest first) after the template ``anchor`` (before it
    when ``backwards``), and whether more lie beyond; None when the team has no such template."""
    return await read_page(
        tx,
        templates,
        _with_draft(),
        _template,
        team_id=team_id,
        limit=limit,
        anchor=anchor,
        newest_first=False,
        backwards=backwards,
    )


async def insert_template(tx: Tx, template: Template, now: int) -> bool:
    """Insert a template with its draft version; False when the alias is taken in the team."""
    query = (
        insert_for(tx, templates)
        .values(
            id=template.id,
            team_id=template.team_id,
            name=template.name,
            alias=template.alias,
            draft_version_id=template.draft.id,
            published_version_id=template.published_version_id,
            published_at=template.published_at,
            created_at=template.created_at,
            updated_at=template.updated_at,
        )
        .on_conflict_do_nothing()
    )
    if not (await tx.conn.execute(query)).rowcount:
        return False
    await insert_version(tx, template.draft, template.team_id, now)
    return True


async def insert_version(tx: Tx, version: TemplateVersion, team_id: str, now: int) -> None:
    await tx.conn.execute(template_versions.insert().values(version_row(version, team_id, now)))


async def delete_version(tx: Tx, version_id: str) -> None:
    await tx.conn.execute(delete(template_versions).where(template_versions.c.id == version_id))


async def aliases_starting(tx: Tx, team_id: str, prefix: str) -> set[str]:
    """The team's aliases that begin with ``prefix`` (for picking a free ``-copy`` alias)."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    query = select(templates.c.alias).where(
        templates.c.team_id == team_id, templates.c.alias.like(f"{escaped}%", escape="\\")
    )
    return {row.alias for row in await tx.conn.execute(query)}


async def update_template(
    tx: Tx, current: Template, changes: TemplateChanges, draft: TemplateVersion, now: int
) -> bool:
    """Write the name and alias ``changes`` gives and point at ``draft`` if it is a new version;
    False when a new alias is already taken in the team."""
    values: dict[str, Any] = {"updated_at": now}
    if changes.name is not UNCHANGED:
        values["name"] = changes.name
    if changes.alias is not UNCHANGED:
        values["alias"] = changes.alias
    if draft.id != current.draft.id:
        values["draft_version_id"] = draft.id
    return await _update(tx, current, values)


async def publish_draft(tx: Tx, current: Template, now: int) -> None:
    """Make the template's draft its published version, as of ``now``."""
    values = {"published_version_id": current.draft.id, "published_at": now, "updated_at": now}
    await _update(tx, current, values)


async def _update(tx: Tx, template: Template, values: dict[str, Any]) -> bool:
    query = (
        update(templates)
        .where(templates.c.team_id == template.team_id, templates.c.id == template.id)
        .values(**values)
    )
    try:
        async with tx.conn.begin_nested():
            await tx.conn.execute(query)
    except IntegrityError:
        return False
    return True


async def delete_template(tx: Tx, team_id: str, template_id: str) -> bool:
    """Remove the template and (by cascade) its versions."""
    await tx.conn.execute(
        delete(template_versions).where(
            template_versions.c.team_id == team_id, template_versions.c.template_id == template_id
        )
    )
    query = delete(templates).where(templates.c.team_id == team_id, templates.c.id == template_id)
    return bool((await tx.conn.execute(query)).rowcount)

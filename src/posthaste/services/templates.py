"""Templates: create, edit, publish, preview, duplicate, delete, list (issue 5).

Versions are immutable. A template's draft is its latest version; publishing points the
published version at the draft. An edit after a publish writes a new draft version (the
published one stays what live sends use); an edit of an unpublished draft replaces it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from posthaste.core.cursors import PageRequest
from posthaste.core.ids import new_id, now_ms
from posthaste.core.models import Principal, Template, TemplateVersion
from posthaste.core.template_fields import (
    MAX_ALIAS_LENGTH,
    MAX_NAME_LENGTH,
    UNCHANGED,
    NewTemplate,
    TemplateChanges,
)
from posthaste.core.templates import ParseCache, Values, render_content
from posthaste.errors import Conflict, NotFound, ValidationError
from posthaste.storage import templates as templates_repo
from posthaste.storage.database import Database, Tx


@dataclass(frozen=True)
class Preview:
    """The latest content rendered with fallbacks; ``missing`` placeholders stay as written."""

    template: Template
    subject: str | None
    html: str | None
    text: str | None
    missing: list[str]


class TemplateService:
    def __init__(self, db: Database, parsed: ParseCache) -> None:
        self.db = db
        self.parsed = parsed

    async def create(self, principal: Principal, new: NewTemplate) -> Template:
        now = now_ms()
        template_id = new_id()
        draft = TemplateVersion(
            new_id(), template_id, new.subject, new.html, new.text, list(new.variables)
        )
        template = Template(
            template_id, principal.team_id, new.name, new.alias, draft, None, None, now, now
        )
        async with self.db.transaction() as tx:
            if not await templates_repo.insert_template(tx, template, now):
                raise _alias_taken(template.alias)
        return template

    async def get(self, principal: Principal, ref: str) -> Template:
        async with self.db.read() as tx:
            return await _existing(tx, principal, ref)

    async def stream(self, principal: Principal) -> AsyncIterator[Template]:
        """Every template of the team, oldest first, without holding them all in memory."""
        async with self.db.read() as tx:
            async for template in templates_repo.stream_templates(tx, principal.team_id):
                yield template

    async def page(self, principal: Principal, request: PageRequest) -> tuple[list[Template], bool]:
        """Resend's paging (oldest first): the page and whether more lie beyond it."""
        async with self.db.read() as tx:
            page = await templates_repo.page_templates(
                tx, principal.team_id, request.limit, request.anchor, backwards=request.backwards
            )
        if page is None:
            raise ValidationError(f"'{request.name}' must be the id of one of your templates.")
        return page

    async def update(self, principal: Principal, ref: str, changes: TemplateChanges) -> Template:
        async with self.db.transaction() as tx:
            current = await _existing(tx, principal, ref, for_update=True)
            now = now_ms()
            draft = _edited(current.draft, changes)
            if draft != current.draft:
                await self._replace_draft(tx, current, draft, now)
            if not await templates_repo.update_template(tx, current, changes, draft, now):
                raise _alias_taken(None if changes.alias is UNCHANGED else changes.alias)
            return await _existing(tx, principal, current.id)

    async def _replace_draft(
        self, tx: Tx, current: Template, draft: TemplateVersion, now: int
    ) -> None:
        await templates_repo.insert_version(tx, draft, current.team_id, now)
        if current.draft.id != current.published_version_id:
            await templates_repo.delete_version(tx, current.draft.id)

    async def publish(self, principal: Principal, ref: str) -> Template:
        """Freeze the draft as what sends use; publishing an unchanged template changes nothing."""
        async with self.db.transaction() as tx:
            current = await _existing(tx, principal, ref, for_update=True)
            if current.published_version_id == current.draft.id:
                return current
            await templates_repo.publish_draft(tx, current, now_ms())
            if current.published_version_id is not None:
                await templates_repo.delete_version(tx, current.published_version_id)
            return await _existing(tx, principal, current.id)

    async def preview(self, principal: Principal, ref: str) -> Preview:
        template = await self.get(principal, ref)
        draft = template.draft
        parsed = self.parsed.get(draft.id, draft.subject, draft.html, draft.text)
        fallbacks = draft.fallbacks()
        rendered = render_content(parsed, {}, fallbacks, keep_missing=True)
        missing = Values({}, fallbacks).missing([parsed.subject, parsed.html, parsed.text])
        return Preview(template, rendered.subject, rendered.html, rendered.text, missing)

    async def duplicate(self, principal: Principal, ref: str) -> Template:
        """A draft copy of the latest content, with a free ``-copy`` alias."""
        async with self.db.transaction() as tx:
            source = await _existing(tx, principal, ref, for_update=True)
            alias = await _copy_alias(tx, principal.team_id, source.alias)
            now = now_ms()
            copy_id = new_id()
            copy = Template(
                copy_id, principal.team_id, _copy_name(source.name), alias,
                replace(source.draft, id=new_id(), template_id=copy_id), None, None, now, now,
            )  # fmt: skip
            if not await templates_repo.insert_template(tx, copy, now):
                raise _alias_taken(alias)
        return copy

    async def delete(self, principal: Principal, ref: str) -> Template:
        async with self.db.transaction() as tx:
            found = await _existing(tx, principal, ref, for_update=True)
            await templates_repo.delete_template(tx, principal.team_id, found.id)
        return found


async def _existing(
    tx: Tx, principal: Principal, ref: str, *, for_update: bool = False
) -> Template:
    found = await templates_repo.get_template(tx, principal.team_id, ref, for_update=for_update)
    if found is None:
        raise NotFound(f"Template {ref!r} was not found.")
    return found


def _edited(draft: TemplateVersion, changes: TemplateChanges) -> TemplateVersion:
    """The draft with the content changes applied; a new version id only if something changed."""
    edited = changes.content_of(draft)
    return draft if edited == draft else replace(edited, id=new_id())


def _alias_taken(alias: str | None) -> Conflict:
    return Conflict(f"The alias {alias!r} is already used by another template of this team.")


def _copy_name(name: str) -> str:
    suffix = " (copy)"
    return name[: MAX_NAME_LENGTH - len(suffix)] + suffix


async def _copy_alias(tx: Tx, team_id: str, alias: str | None) -> str | None:
    """``<alias>-copy``, else ``-copy-2``, ``-copy-3``...; the base is cut to stay within 64."""
    if alias is None:
        return None
    # Every candidate (suffix at most "-copy-999999") starts with this: one query finds them all.
    taken = await templates_repo.aliases_starting(tx, team_id, alias[: MAX_ALIAS_LENGTH - 12])
    number = 1
    while True:
        suffix = "-copy" if number == 1 else f"-copy-{number}"
        candidate = alias[: MAX_ALIAS_LENGTH - len(suffix)] + suffix
        if candidate not in taken:
            return candidate
        number += 1

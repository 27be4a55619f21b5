"""The send path's ``ContentResolver``: a request's template and data become final content.

- ``template`` (alias or id), ``template_id`` or Resend's ``template: {id, variables}`` names a
  template of the caller's team; an unknown one is a 422 naming it.
- Live keys send the published version (a never-published template is 422
  ``template_not_published``); test keys send the latest draft.
- Explicit ``subject`` / ``html`` / ``text`` replace the template's, field by field, and are
  rendered with the same data and fallbacks.
- Without a template: content with ``data`` is rendered (no fallbacks); content without ``data``
  is sent exactly as given.
- Within one transaction (a batch) each template is looked up once.
"""

from __future__ import annotations

from dataclasses import dataclass
from weakref import WeakKeyDictionary

from posthaste.core.models import Sender, TemplateVersion
from posthaste.core.send_request import SendRequest
from posthaste.core.templates import (
    ParseCache,
    ParsedContent,
    parse_content,
    parse_template,
    render_content,
)
from posthaste.errors import TemplateNotPublished, ValidationError
from posthaste.services.sending import Content
from posthaste.storage import templates as templates_repo
from posthaste.storage.database import Tx
from posthaste.storage.templates import SendableTemplate

_Lookups = dict[tuple[str, str], SendableTemplate | None]


@dataclass(frozen=True)
class ContentSource:
    """Content ready to render for many recipients: parsed once, with its template's
    fallbacks (a broadcast renders it per contact)."""

    parsed: ParsedContent
    fallbacks: dict[str, object]
    template_id: str | None


class TemplateContent:
    def __init__(self, parsed: ParseCache) -> None:
        self.parsed = parsed
        self._lookups: WeakKeyDictionary[Tx, _Lookups] = WeakKeyDictionary()

    async def resolve(self, tx: Tx, sender: Sender, request: SendRequest) -> Content:
        if request.template is None:
            return _inline(request)
        source = await self.source(
            tx, sender, request.template, request.subject, request.html, request.text
        )
        rendered = render_content(source.parsed, request.data, source.fallbacks)
        return Content(
            subject_of(rendered.subject, request.template),
            rendered.html,
            rendered.text,
            source.template_id,
        )

    async def source(
        self,
        tx: Tx,
        sender: Sender,
        template: str | None,
        subject: str | None,
        html: str | None,
        text: str | None,
    ) -> ContentSource:
        """The template (if any) with explicit fields replacing its own, parsed."""
        if template is None:
            return ContentSource(parse_content(subject, html, text), {}, None)
        found = await self._find(tx, sender.team_id, template)
        version = _version_to_send(found, template, sender.is_test)
        parsed = self.parsed.get(version.id, version.subject, version.html, version.text)
        overridden = ParsedContent(
            parsed.subject if subject is None else parse_template(subject),
            parsed.html if html is None else parse_template(html),
            parsed.text if text is None else parse_template(text),
        )
        return ContentSource(overridden, version.fallbacks(), found.id)

    async def _find(self, tx: Tx, team_id: str, ref: str) -> SendableTemplate:
        lookups = self._lookups.setdefault(tx, {})
        key = (team_id, ref.lower())
        if key not in lookups:
            lookups[key] = await templates_repo.get_sendable(tx, team_id, ref)
        found = lookups[key]
        if found is None:
            raise ValidationError(
                f"Template {ref!r} was not found; give the id or alias of one of your templates "
                "(GET /templates)."
            )
        return found


def subject_of(rendered: str | None, template: str | None) -> str:
    """A rendered subject, or why there is none (a template without one, and none given)."""
    if rendered is None:
        raise ValidationError(
            f"The template {template!r} has no subject; give 'subject' in the request."
        )
    return rendered


def _version_to_send(template: SendableTemplate, ref: str, is_test: bool) -> TemplateVersion:
    if is_test:
        return template.draft
    if template.published is None:
        raise TemplateNotPublished(
            f"The template {ref!r} has never been published; publish it "
            "(POST /templates/{id}/publish) or send with a test key, which uses the draft."
        )
    return template.published


def _inline(request: SendRequest) -> Content:
    assert request.subject is not None
    if not request.data:
        return Content(request.subject, request.html, request.text, request.template_id)
    rendered = render_content(
        parse_content(request.subject, request.html, request.text), request.data, {}
    )
    assert rendered.subject is not None
    return Content(rendered.subject, rendered.html, rendered.text)

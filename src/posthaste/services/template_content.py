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


class TemplateContent:
    def __init__(self, parsed: ParseCache) -> None:
        self.parsed = parsed
        self._lookups: WeakKeyDictionary[Tx, _Lookups] = WeakKeyDictionary()

    async def resolve(self, tx: Tx, sender: Sender, request: SendRequest) -> Content:
        if request.template is None:
            return _inline(request)
        template = await self._find(tx, sender.team_id, request.template)
        version = _version_to_send(template, request.template, sender.is_test)
        parsed = self._with_overrides(version, request)
        rendered = render_content(parsed, request.data, version.fallbacks())
        if rendered.subject is None:
            raise ValidationError(
                f"The template {request.template!r} has no subject; give 'subject' in the request."
            )
        return Content(rendered.subject, rendered.html, rendered.text, template.id)

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

    def _with_overrides(self, version: TemplateVersion, request: SendRequest) -> ParsedContent:
        parsed = self.parsed.get(version.id, version.subject, version.html, version.text)
        return ParsedContent(
            parsed.subject if request.subject is None else parse_template(request.subject),
            parsed.html if request.html is None else parse_template(request.html),
            parsed.text if request.text is None else parse_template(request.text),
        )


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
        return Content(request.subject, request.html, request.text)
    rendered = render_content(
        parse_content(request.subject, request.html, request.text), request.data, {}
    )
    assert rendered.subject is not None
    return Content(rendered.subject, rendered.html, rendered.text)

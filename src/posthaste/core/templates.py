"""The template renderer: placeholder substitution and nothing else.

Syntax (docs/templates.md):

- ``{{ name }}`` and ``{{ a.b }}`` (a path into nested ``data``; a digit segment indexes a list)
  are replaced by the value; in html the value is HTML-escaped, in subject and text it is not.
- ``{{{ name }}}`` is replaced raw, everywhere.
- Whitespace inside the braces is allowed. Anything else between braces (``{{ a b }}``,
  ``{{ }}``, ``{{#if}}``) is not a placeholder and stays as written: no code ever runs.
- Strings render as they are; numbers and booleans as JSON writes them (``3.5``, ``true``);
  objects and arrays as compact JSON. ``null`` and an absent key are "no value": the declared
  fallback is used, else the placeholder is missing.

Rendering is one pass over a parse made once: a substituted value is never read again, so a
value that looks like a placeholder stays literal text.
"""

from __future__ import annotations

import html
import json
import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from posthaste.core.headers import validate_subject
from posthaste.errors import ValidationError

PATH_PATTERN = r"[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*"
_PLACEHOLDER = re.compile(
    rf"\{{\{{\{{\s*(?P<raw>{PATH_PATTERN})\s*\}}\}}\}}|\{{\{{\s*(?P<escaped>{PATH_PATTERN})\s*\}}\}}"
)
_PATH = re.compile(PATH_PATTERN)
MAX_RENDERED_LENGTH = 20 * 1024 * 1024
_NO_VALUE = object()


@dataclass(frozen=True)
class Placeholder:
    """One ``{{ path }}`` or ``{{{ path }}}`` occurrence, with the text it was written as."""

    path: str
    raw: bool
    source: str


Part = str | Placeholder


@dataclass(frozen=True)
class ParsedTemplate:
    """A template split once into literal text and placeholders, in order."""

    parts: tuple[Part, ...]

    @cached_property
    def placeholders(self) -> tuple[str, ...]:
        """The distinct placeholder paths, in order of first appearance."""
        seen: dict[str, None] = {}
        for part in self.parts:
            if isinstance(part, Placeholder):
                seen.setdefault(part.path, None)
        return tuple(seen)


def is_variable_path(key: str) -> bool:
    """True when ``key`` could name a placeholder (``name``, ``order.total``)."""
    return _PATH.fullmatch(key) is not None


def parse_template(source: str) -> ParsedTemplate:
    """Split ``source`` into literal text and placeholders; never fails."""
    parts: list[Part] = []
    position = 0
    for match in _PLACEHOLDER.finditer(source):
        if match.start() > position:
            parts.append(source[position : match.start()])
        raw = match.group("raw")
        path = raw if raw is not None else match.group("escaped")
        parts.append(Placeholder(path, raw is not None, match.group(0)))
        position = match.end()
    if position < len(source):
        parts.append(source[position:])
    return ParsedTemplate(tuple(parts))


def lookup(data: Mapping[str, Any], path: str) -> object:
    """The value at a dotted path in ``data``, or ``_NO_VALUE`` (an absent key or ``null``).

    A flat key spelled with dots (``{"a.b": 1}``, as Resend's flat ``variables`` may be) is
    found too when the nested path is absent.
    """
    value = _walk(data, path)
    if value is _NO_VALUE and "." in path:
        value = data.get(path, _NO_VALUE)
    return _NO_VALUE if value is None else value


def _walk(data: Mapping[str, Any], path: str) -> object:
    value: object = data
    for segment in path.split("."):
        if type(value) is dict or isinstance(value, Mapping):  # a dict: no ABC check needed
            value = value.get(segment, _NO_VALUE)
        elif isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            return _NO_VALUE
    return value


def format_value(value: object) -> str:
    """A value as text: strings as they are, everything else as JSON writes it."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (ValueError, TypeError, RecursionError):
        return "(unprintable value)"  # e.g. an integer past Python's 4,300-digit limit


class Values:
    """The variables of one rendering: ``data`` first, then the declared fallbacks."""

    def __init__(self, data: Mapping[str, Any], fallbacks: Mapping[str, object]) -> None:
        self.data = data
        self.fallbacks = fallbacks
        self._texts: dict[str, str | None] = {}
        self._escaped: dict[str, str] = {}

    def text_of(self, path: str) -> str | None:
        """The text for a placeholder path, or None when it has no value and no fallback."""
        if path in self._texts:
            return self._texts[path]
        value = lookup(self.data, path)
        if value is _NO_VALUE:
            value = self.fallbacks.get(path)
        text = None if value is None else format_value(value)
        self._texts[path] = text
        return text

    def escaped_text_of(self, path: str, text: str) -> str:
        """``text`` (the value of ``path``) HTML-escaped, escaped once per rendering."""
        escaped = self._escaped.get(path)
        if escaped is None:
            escaped = self._escaped[path] = html.escape(text, quote=True)
        return escaped

    def missing(self, templates: Sequence[ParsedTemplate | None]) -> list[str]:
        """Every placeholder path in ``templates`` without a value or a fallback."""
        missing: dict[str, None] = {}
        for template in templates:
            if template is None:
                continue
            for path in template.placeholders:
                if path not in missing and self.text_of(path) is None:
                    missing[path] = None
        return list(missing)


def render(
    template: ParsedTemplate, values: Values, *, escape_html: bool, keep_missing: bool = False
) -> str:
    """Substitute every placeholder in one pass.

    A placeholder without a value raises ``ValidationError`` naming it, or, with
    ``keep_missing`` (previews), stays as written. Output past ``MAX_RENDERED_LENGTH`` is refused.
    """
    out: list[str] = []
    length = 0
    for part in template.parts:
        if isinstance(part, str):
            piece = part
        else:
            piece = _substitute(part, values, escape_html, keep_missing)
        length += len(piece)
        if length > MAX_RENDERED_LENGTH:
            raise ValidationError(
                f"The rendered content is longer than {MAX_RENDERED_LENGTH} characters; "
                "send smaller values in 'data'."
            )
        out.append(piece)
    return "".join(out)


def _substitute(part: Placeholder, values: Values, escape_html: bool, keep_missing: bool) -> str:
    text = values.text_of(part.path)
    if text is None:
        if keep_missing:
            return part.source
        raise missing_variables_error([part.path])
    return values.escaped_text_of(part.path, text) if escape_html and not part.raw else text


def missing_variables_error(paths: Sequence[str]) -> ValidationError:
    names = ", ".join(paths)
    noun = "variable" if len(paths) == 1 else "variables"
    return ValidationError(
        f"Missing template {noun}: {names}. Give a value in 'data' or declare a fallback_value "
        "in the template's 'variables'."
    )


@dataclass(frozen=True)
class ParsedContent:
    """The parsed subject, html and text of one template version (None when absent)."""

    subject: ParsedTemplate | None
    html: ParsedTemplate | None
    text: ParsedTemplate | None


@dataclass(frozen=True)
class RenderedContent:
    subject: str | None
    html: str | None
    text: str | None


def parse_content(subject: str | None, html_: str | None, text: str | None) -> ParsedContent:
    return ParsedContent(
        *(None if s is None else parse_template(s) for s in (subject, html_, text))
    )


def render_content(
    content: ParsedContent,
    data: Mapping[str, Any],
    fallbacks: Mapping[str, object],
    *,
    keep_missing: bool = False,
) -> RenderedContent:
    """Render subject, html and text with the same values.

    Every missing placeholder of the three is named in one ``ValidationError`` (unless
    ``keep_missing``). A rendered subject must still be one header line.
    """
    values = Values(data, fallbacks)
    if not keep_missing:
        missing = values.missing([content.subject, content.html, content.text])
        if missing:
            raise missing_variables_error(missing)

    def run(template: ParsedTemplate | None, escape_html: bool) -> str | None:
        if template is None:
            return None
        return render(template, values, escape_html=escape_html, keep_missing=keep_missing)

    subject = run(content.subject, False)
    if subject is not None and not keep_missing:
        _check_rendered_subject(subject, content.subject)
    html_ = run(content.html, True)
    text = run(content.text, False)
    for name, body in (("html", html_), ("text", text)):
        if body is not None and "\x00" in body and not keep_missing:
            raise ValidationError(f"The rendered {name!r} contains a NUL character; check 'data'.")
    return RenderedContent(subject, html_, text)


def _check_rendered_subject(subject: str, template: ParsedTemplate | None) -> None:
    """A subject is a header: a value carrying CR, LF or another control character is refused."""
    try:
        validate_subject(subject)
    except ValidationError as exc:
        used = ", ".join(template.placeholders) if template else ""
        raise ValidationError(
            f"The rendered subject is not a valid header: {exc.message} "
            f"Check the values of {used or 'the subject placeholders'} in 'data'."
        ) from None


class ParseCache:
    """Parsed content per template version id (a version's content never changes), LRU."""

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self._items: OrderedDict[str, ParsedContent] = OrderedDict()

    def get(
        self, version_id: str, subject: str | None, html_: str | None, text: str | None
    ) -> ParsedContent:
        found = self._items.get(version_id)
        if found is not None:
            self._items.move_to_end(version_id)
            return found
        parsed = parse_content(subject, html_, text)
        self._items[version_id] = parsed
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return parsed

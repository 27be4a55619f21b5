"""The links of an HTML document rewritten in place, every other character left as it was.

A serializer (lxml's, html5lib's) writes the document it parsed, not the one it was given:
quotes, entities, attribute order, whitespace and the implied ``<html><head><body>`` all change,
and libxml2 reports no source offsets to splice by. So the document is read with the stdlib's
tokenizer (``html.parser``, which follows the HTML tokenizer's states for tags, attributes,
comments, ``<!...>`` declarations and the raw text of ``<script>``/``<style>``): it hands over
each start tag's exact source and position, and only the ``href`` value's characters inside
that source are replaced. Everything else, comments and conditional comments included, stays
byte for byte.

What counts as a link: the first ``href`` of an ``<a>`` or ``<area>`` start tag (the one a
browser follows), outside ``<head>`` (from ``<head>`` to ``</head>``, ``<body>`` or the first
tag of the page's content), outside comments and raw text. Its URL is what a browser reads:
character references decoded with the HTML rules for attribute values (``&region=`` stays as
written: a legacy reference followed by a letter, digit or ``=`` is not one), leading and
trailing spaces and controls removed, tabs and line breaks dropped (the URL standard's first
steps). The replacement is written double-quoted.

The text may be a Latin-1 view of a message part's bytes (every byte one character: the
markup is ASCII in every charset mail uses): ``charset`` then says how the bytes of a URL are
to be read, and the document's own bytes never go through a decoder.
"""

from __future__ import annotations

import html
import html.parser
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from html.entities import html5
from typing import cast

__all__ = ["LinkRewrite", "links_of", "rewrite_links", "url_of_attribute"]

LinkRewrite = Callable[[str], str | None]  # the URL a link points to → its new URL, or None
_LINK_TAGS = frozenset({"a", "area"})
# The start tags whose attributes are read (the others are only stepped over).
_READ_TAGS = _LINK_TAGS | {"head", "body"}
_RAW_TEXT = frozenset(
    {"script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes"}
    | {"noscript", "plaintext"}
)
# What a document's ``<head>`` holds; any other start tag is the page's content, so an unclosed
# head ends there.
_HEAD_TAGS = frozenset(
    {"base", "basefont", "bgsound", "link", "meta", "noframes", "noscript", "script", "style"}
    | {"template", "title", "head", "html"}
)
# The tokenizer's own patterns, so that an attribute is found where it found it (a mismatch is
# still caught: the value read back must be the one the tokenizer reported).
_TAG_NAME = cast(re.Pattern[str], getattr(html.parser, "tagfind_tolerant"))  # noqa: B009
_ATTRIBUTE = cast(re.Pattern[str], getattr(html.parser, "attrfind_tolerant"))  # noqa: B009
# ``html.unescape``'s pattern of a character reference.
_CHARREF = re.compile(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")
_URL_TRIM = "".join(chr(c) for c in range(0x21))  # C0 controls and space
_TAB_OR_NEWLINE = re.compile(r"[\t\n\r]")


@dataclass(frozen=True)
class _Link:
    start: int  # the value's source, quotes included
    end: int
    url: str


@dataclass
class _Found:
    links: list[_Link] = field(default_factory=list)
    body_end: int | None = None  # where the last ``</body>`` starts
    html_end: int | None = None


def rewrite_links(
    text: str,
    rewrite: LinkRewrite | None,
    *,
    pixel: str | None = None,
    charset: str | None = None,
) -> str:
    """``text`` with each link's ``href`` replaced by ``rewrite(url)`` (None leaves it), and
    ``pixel`` (markup) inserted before ``</body>`` (else ``</html>``, else at the end, before
    a final line break)."""
    found = _find(text, charset)
    edits: list[tuple[int, int, str]] = []
    if rewrite is not None:
        for link in found.links:
            new = rewrite(link.url)
            if new is not None:
                edits.append((link.start, link.end, '"' + html.escape(new, quote=True) + '"'))
    if pixel is not None:
        end = len(text.rstrip("\r\n"))  # before the final line break
        at = next(p for p in (found.body_end, found.html_end, end) if p is not None)
        edits.append((at, at, pixel))
    if not edits:
        return text
    edits.sort(key=lambda edit: edit[0])
    pieces, position = [], 0
    for start, end, replacement in edits:
        pieces += [text[position:start], replacement]
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


def links_of(text: str, charset: str | None = None) -> list[str]:
    """The URLs of the document's links, in order (what ``rewrite`` would be called with)."""
    return [link.url for link in _find(text, charset).links]


def url_of_attribute(source: str, charset: str | None = None) -> str:
    """The URL a browser reads from an ``href`` value's source (quoted or not)."""
    source = _unquoted(source)
    if charset is not None:
        source = source.encode("latin-1").decode(charset, "replace")
    value = _unescape_attribute(source)
    return _TAB_OR_NEWLINE.sub("", value.strip(_URL_TRIM))


def _unquoted(source: str) -> str:
    if len(source) >= 2 and source[0] == source[-1] and source[0] in "'\"":
        return source[1:-1]
    return source


def _find(text: str, charset: str | None) -> _Found:
    finder = _LinkFinder(text, charset)
    finder.feed(text)
    finder.close()
    return finder.found


class _LinkFinder(html.parser.HTMLParser):
    def __init__(self, text: str, charset: str | None) -> None:
        super().__init__(convert_charrefs=False)
        self._line_starts = [0, *(m.end() for m in re.finditer("\n", text))]
        self._charset = charset
        self._in_head = False
        # Tags whose content the stdlib may read as raw text (script and style; later Pythons
        # add others): always read by the stdlib's own code, which switches that mode on.
        self._raw_text = _RAW_TEXT | frozenset(
            (*self.CDATA_CONTENT_ELEMENTS, *getattr(self, "RCDATA_CONTENT_ELEMENTS", ()))
        )
        self.found = _Found()

    def _offset(self) -> int:
        line, column = self.getpos()
        return self._line_starts[line - 1] + column

    def parse_starttag(self, i: int) -> int:
        """The stdlib's, minus reading the attributes of tags this reader does not act on
        (most of a document's tags; their attributes were half the reading time): the tag's
        extent is found by the stdlib's own ``check_for_whole_start_tag`` either way."""
        name = _TAG_NAME.match(self.rawdata, i + 1)
        tag = name.group(1).lower() if name is not None else ""
        if not tag or tag in _READ_TAGS or tag in self._raw_text:
            return int(super().parse_starttag(i))
        end = int(self.check_for_whole_start_tag(i))
        if end >= 0:
            self.lasttag = tag
            if tag not in _HEAD_TAGS:
                self._in_head = False
        return end

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "head":
            self._in_head = True
        elif tag in _LINK_TAGS:
            if not self._in_head:
                self._link(attrs)
        elif tag not in _HEAD_TAGS:
            self._in_head = False  # <body>, or content in a head never closed

    def handle_endtag(self, tag: str) -> None:
        if tag == "head":
            self._in_head = False
        elif tag == "body":
            self.found.body_end = self._offset()
        elif tag == "html":
            self.found.html_end = self._offset()

    def _link(self, attrs: list[tuple[str, str | None]]) -> None:
        source = self.get_starttag_text()
        if source is None:
            return
        span = _href_span(source)
        reported = next((value for name, value in attrs if name == "href"), None)
        if span is None or reported is None:
            return
        raw = source[span[0] : span[1]]
        if html.unescape(_unquoted(raw)) != reported:
            return  # not where the tokenizer read it: leave the tag alone
        start = self._offset()
        url = url_of_attribute(raw, self._charset)
        self.found.links.append(_Link(start + span[0], start + span[1], url))


def _href_span(source: str) -> tuple[int, int] | None:
    """Where the first ``href``'s value sits in a start tag's source (as ``parse_starttag``
    reads attributes), or None when the first ``href`` has no value or there is none."""
    match = _TAG_NAME.match(source, 1)
    if match is None:
        return None
    position = match.end()
    while position < len(source):
        attribute = _ATTRIBUTE.match(source, position)
        if attribute is None:
            return None
        if attribute.group(1).lower() == "href":
            return attribute.span(3) if attribute.group(2) else None
        position = attribute.end()
    return None


def _unescape_attribute(value: str) -> str:
    """``html.unescape``, except that a reference without ``;`` followed by a letter, digit or
    ``=`` is left as written, as the HTML standard reads attribute values (``?a=1&region=eu``)."""
    return _CHARREF.sub(_attribute_charref, value) if "&" in value else value


def _attribute_charref(match: re.Match[str]) -> str:
    text, name = match.group(0), match.group(1)
    if name[0] == "#" or name in html5:
        return html.unescape(text)
    for length in range(len(name) - 1, 1, -1):  # the longest reference it starts with
        if name[:length] in html5:
            after = name[length]
            if (after.isascii() and after.isalnum()) or after == "=":
                return text
            return html5[name[:length]] + name[length:]
    return text

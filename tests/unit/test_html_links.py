"""Links rewritten in place: which links, what URL a browser reads, and nothing else touched.

The property tests generate documents from fragments whose rendering is known (text,
comments, tags, raw-text elements, a ``<head>``, links quoted three ways with URLs escaped or
not), so the expected output is computed independently of the rewriter: the same fragments
with only the trackable links' values replaced.
"""

from __future__ import annotations

import html
import html.parser
from dataclasses import dataclass

from hypothesis import example, given
from hypothesis import strategies as st

from posthaste.core.html_links import _find, links_of, rewrite_links, url_of_attribute

MARK = "https://t.test/c/"


def marker(calls: list[str]) -> object:
    def rewrite(url: str) -> str | None:
        if not url.lower().startswith(("http://", "https://")):
            return None
        calls.append(url)
        return f"{MARK}{len(calls) - 1}"

    return rewrite


def rewritten(document: str, pixel: str | None = None) -> tuple[str, list[str]]:
    calls: list[str] = []
    return rewrite_links(document, marker(calls), pixel=pixel), calls  # type: ignore[arg-type]


def test_only_the_href_value_changes_and_quotes_are_made_double() -> None:
    document = (
        "<p>Hi <a class=x href='https://example.com/a?b=1&amp;c=2' id=\"y\">there</a>, "
        '<A HREF=https://example.com/b>b</A> <a href="mailto:ann@example.com">mail</a></p>'
    )
    out, calls = rewritten(document)
    assert calls == ["https://example.com/a?b=1&c=2", "https://example.com/b"]
    assert out == (
        f'<p>Hi <a class=x href="{MARK}0" id="y">there</a>, '
        f'<A HREF="{MARK}1">b</A> <a href="mailto:ann@example.com">mail</a></p>'
    )


def test_links_in_head_comments_scripts_and_styles_are_left_alone() -> None:
    document = (
        '<html><head><title>t</title><link href="https://fonts.example/css" rel="stylesheet">'
        '<a href="https://head.example/">in head</a></head>'
        '<body><!-- <a href="https://comment.example/"> --><!--[if mso]><a href="https://mso.example/">'
        "</a><![endif]-->"
        "<script>var s = '<a href=\"https://script.example/\">';</script>"
        '<style>a[href="https://style.example/"] {}</style>'
        '<img src="https://img.example/logo.png">'
        '<a href="https://body.example/">body</a></body></html>'
    )
    out, calls = rewritten(document)
    assert calls == ["https://body.example/"]
    assert out == document.replace('"https://body.example/"', f'"{MARK}0"')


def test_a_head_never_closed_ends_at_the_first_content_tag() -> None:
    _, calls = rewritten('<head><title>x</title><table><tr><td><a href="https://a.example/">')
    assert calls == ["https://a.example/"]


def test_the_first_href_is_the_one_rewritten() -> None:
    out, calls = rewritten('<a href="https://first.example/" href="https://second.example/">')
    assert calls == ["https://first.example/"]
    assert out == f'<a href="{MARK}0" href="https://second.example/">'


def test_area_links_and_self_closing_links_count() -> None:
    out, calls = rewritten('<map><area shape=rect href="https://area.example/"/></map>')
    assert calls == ["https://area.example/"]
    assert out == f'<map><area shape=rect href="{MARK}0"/></map>'


def test_urls_are_read_as_a_browser_reads_attributes() -> None:
    # A legacy reference without ';' before a letter, digit or '=' is text in an attribute.
    assert url_of_attribute('"https://x.test/?a=1&region=eu&copy=2"') == (
        "https://x.test/?a=1&region=eu&copy=2"
    )
    assert url_of_attribute('"https://x.test/?a=1&amp;b=2&#38;c=3&reg;"') == (
        "https://x.test/?a=1&b=2&c=3®"
    )
    assert url_of_attribute("' \t https://x.test/a\nb/c \r\n'") == "https://x.test/ab/c"
    assert url_of_attribute("https://x.test/&copy") == "https://x.test/©"
    # A Latin-1 view of UTF-8 bytes, read with the part's charset.
    raw = '"https://x.test/caf\u00e9"'.encode().decode("latin-1")
    assert url_of_attribute(raw, "utf-8") == "https://x.test/caf\u00e9"


def test_the_pixel_goes_before_the_last_body_end_else_html_end_else_the_end() -> None:
    pixel = '<img src="https://t.test/o/x">'
    assert rewrite_links("<body>a</body></html>", None, pixel=pixel) == (
        f"<body>a{pixel}</body></html>"
    )
    assert rewrite_links("<p>a</p></html>\n", None, pixel=pixel) == f"<p>a</p>{pixel}</html>\n"
    assert rewrite_links("<p>a</p>\r\n", None, pixel=pixel) == f"<p>a</p>{pixel}\r\n"
    commented = "<body>a<!-- </body> --></body>"
    assert rewrite_links(commented, None, pixel=pixel) == f"<body>a<!-- </body> -->{pixel}</body>"


def test_nothing_to_do_returns_the_same_text() -> None:
    document = '<p><a href="/relative">r</a><a href="#top">t</a></p>'
    out, calls = rewritten(document)
    assert out is document and calls == []
    assert links_of(document) == ["/relative", "#top"]


# Property: generated documents


@dataclass(frozen=True)
class Piece:
    source: str  # as written in the document
    tracked: str | None = None  # a link's source with its value replaced by {}, when tracked
    url: str | None = None  # the URL a browser reads from a tracked link


SAFE_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="<&"), max_size=20)
URL_TAIL = st.text(
    st.characters(
        min_codepoint=0x21,
        max_codepoint=0x2FF,
        exclude_characters="\"'<>&\\`",
        exclude_categories=["Cc", "Cs", "Zs", "Zl", "Zp"],
    ),
    max_size=25,
)


@st.composite
def urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["https://", "http://", "HTTPS://", "mailto:", "/", "#", ""]))
    host = draw(st.from_regex(r"[a-z0-9]{1,8}\.test", fullmatch=True))
    tail = draw(URL_TAIL)
    query = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["a", "region", "copy", "amp", "not"]),
                st.from_regex(r"[a-z0-9]{0,4}", fullmatch=True),
            ),
            max_size=3,
        )
    )
    joined = "&".join(f"{k}={v}" for k, v in query)
    return f"{scheme}{host}/{tail}" + (f"?{joined}" if joined else "")


@st.composite
def links(draw: st.DrawFn) -> Piece:
    url = draw(urls())
    tag = draw(st.sampled_from(["a", "A", "area"]))
    before = draw(st.sampled_from(["", ' class="c"', " id=x", " title='&quot;q&quot;'"]))
    after = draw(st.sampled_from(["", ' target="_blank"', " data-x=1", " style='color:red'"]))
    quoting = draw(st.sampled_from(["double", "single", "bare"]))
    escape = draw(st.booleans())
    pad = draw(st.sampled_from(["", " ", "\t\n "]))
    if quoting == "bare":
        if any(c in url for c in " \t\n\r\f>\"'=`") or not url:
            quoting = "double"
        else:
            pad = ""
    value = html.escape(url, quote=True) if escape else url.replace('"', "&quot;")
    if quoting == "single":
        value = value.replace("'", "&#39;")
    quoted = {"double": f'"{pad}{value}{pad}"', "single": f"'{pad}{value}{pad}'", "bare": value}
    head, tail = f"<{tag}{before} href=", f"{after}>"
    close = "" if tag == "area" else "x</" + tag + ">"
    source = head + quoted[quoting] + tail + close
    if not url.lower().startswith(("http://", "https://")):
        return Piece(source)
    return Piece(source, head + "{}" + tail + close, url)


def quiet(piece: Piece) -> Piece:
    """A link where none is read (comment, raw text, head): never rewritten."""
    return Piece(piece.source)


@st.composite
def pieces(draw: st.DrawFn) -> Piece:
    kind = draw(st.sampled_from(["text", "tag", "link", "comment", "script", "entity"]))
    if kind == "text":
        return Piece(draw(SAFE_TEXT))
    if kind == "entity":
        return Piece(draw(st.sampled_from(["&amp;", "&lt;a href=x&gt;", "&#169;", "& "])))
    if kind == "tag":
        return Piece(
            draw(
                st.sampled_from(
                    [
                        "<p>",
                        "</p>",
                        "<br/>",
                        '<img src="https://i.test/">',
                        '<div class="a b">',
                        "</div>",
                        "<td width=3>",
                    ]
                )
            )
        )
    if kind == "link":
        return draw(links())
    link = draw(links()).source.replace("--", "")
    if kind == "comment":
        return Piece(f"<!-- {link} -->")
    escaped = link.replace("</", "<\\/")
    return Piece(f"<script>var s = '{escaped}';</script>")


@st.composite
def documents(draw: st.DrawFn) -> list[Piece]:
    body = draw(st.lists(pieces(), max_size=12))
    if not draw(st.booleans()):
        return body
    head = [
        Piece("<html><head><title>"),
        Piece(draw(SAFE_TEXT).replace(">", "")),
        Piece("</title>"),
        quiet(draw(links())),
        Piece("</head><body>"),
    ]
    return [*head, *body, Piece("</body></html>")]


def expected(document: list[Piece]) -> tuple[str, list[str]]:
    out, urls_read = [], []
    for piece in document:
        if piece.tracked is None or piece.url is None:
            out.append(piece.source)
        else:
            out.append(piece.tracked.format(f'"{MARK}{len(urls_read)}"'))
            urls_read.append(piece.url)
    return "".join(out), urls_read


@given(documents())
@example(
    [
        Piece(
            '<a href="https://x.test/?a=1&region=eu">',
            "<a href={}>",
            "https://x.test/?a=1&region=eu",
        )
    ]
)
def test_only_trackable_link_values_change_and_each_reads_back_its_url(
    document: list[Piece],
) -> None:
    source = "".join(piece.source for piece in document)
    out, calls = rewritten(source)
    want, urls_read = expected(document)
    assert out == want
    assert calls == urls_read


@given(documents())
def test_the_pixel_is_the_only_other_change(document: list[Piece]) -> None:
    source = "".join(piece.source for piece in document)
    pixel = '<img src="https://t.test/o/p" />'
    out, _ = rewritten(source, pixel)
    want, _ = expected(document)
    at = want.rfind("</body>") if "</body>" in want else len(want.rstrip("\r\n"))
    assert out == want[:at] + pixel + want[at:]


# The reader steps over the attributes of tags it does not act on (``parse_starttag``): the
# links it finds must be those a reader on the stdlib's unmodified ``parse_starttag`` finds.


class StockReader(html.parser.HTMLParser):
    """Links (tag offset, reported href) by the stdlib's own parsing of every tag, with the
    same ``<head>`` rule."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=False)
        self.lines = [0, *(i + 1 for i, c in enumerate(text) if c == "\n")]
        self.in_head = False
        self.found: list[tuple[int, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        line, column = self.getpos()
        if tag == "head":
            self.in_head = True
        elif tag in ("a", "area"):
            href = next((value for name, value in attrs if name == "href"), None)
            if not self.in_head and href is not None:
                self.found.append((self.lines[line - 1] + column, href))
        elif tag not in HEAD_TAGS:
            self.in_head = False

    def handle_endtag(self, tag: str) -> None:
        if tag == "head":
            self.in_head = False


HEAD_TAGS = {"base", "basefont", "bgsound", "link", "meta", "noframes", "noscript", "script"}
HEAD_TAGS |= {"style", "template", "title", "head", "html"}
FRAGMENTS = [
    "<a href=",
    '<a href="https://x.test/">',
    "<area href=https://y.test/ >",
    "<a href",
    "</a>",
    "<head>",
    "</head>",
    "<body>",
    "<title>",
    "</title>",
    "<script>",
    "</script>",
    "<style>",
    "</style>",
    "<textarea>",
    "</textarea>",
    "<!--",
    "-->",
    "<!doctype html>",
    "<?x?>",
    "<p ",
    "<div class='a>b'>",
    '"',
    "'",
    "=",
    ">",
    "<",
    "/",
    " ",
    "\n",
    "&amp;",
    "&",
    "x",
    "<br/>",
    "<A HREF='https://z.test/'>",
    "<img src=x>",
    "<![CDATA[",
    "]]>",
    "</",
    "<table",
]


@given(
    st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)
    | documents().map(lambda pieces: "".join(p.source for p in pieces))
)
def test_the_links_found_are_those_of_the_stdlib_reading_every_tag(document: str) -> None:
    stock = StockReader(document)
    stock.feed(document)
    stock.close()
    found = _find(document, None).links
    assert len(found) == len(stock.found)
    for link, (tag_start, href) in zip(found, stock.found, strict=True):
        assert tag_start < link.start and document[tag_start] == "<"
        raw = document[link.start : link.end]
        assert html.unescape(raw[1:-1] if raw[:1] in "'\"" and len(raw) > 1 else raw) == href

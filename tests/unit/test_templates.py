"""The template renderer: syntax, escaping, fallbacks, and its safety properties (hypothesis)."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posthaste.core import templates as templates_module
from posthaste.core.templates import (
    ParseCache,
    Placeholder,
    Values,
    parse_content,
    parse_template,
    render,
    render_content,
)
from posthaste.errors import ValidationError


def render_html(
    source: str, data: dict[str, Any], fallbacks: dict[str, object] | None = None
) -> str:
    return render(parse_template(source), Values(data, fallbacks or {}), escape_html=True)


def render_text(
    source: str, data: dict[str, Any], fallbacks: dict[str, object] | None = None
) -> str:
    return render(parse_template(source), Values(data, fallbacks or {}), escape_html=False)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{{name}}", "Ann"),
        ("{{ name }}", "Ann"),
        ("{{\tname\n}}", "Ann"),
        ("{{{ name }}}", "Ann"),
        ("Hi {{ user.first }}!", "Hi Bo!"),
        ("{{ items.0 }}-{{ items.1 }}", "x-y"),
        ("{{ count }} {{ ratio }} {{ on }} {{ off }}", "3 0.5 true false"),
        ("{{ user }}", '{"first":"Bo"}'),
        ("{{ items }}", '["x","y"]'),
        (
            "{{ a b }} {{ }} {{#if x}} {{ 1st }} {name}",
            "{{ a b }} {{ }} {{#if x}} {{ 1st }} {name}",
        ),
        ("{{ name }}}", "Ann}"),
        ("{{{{ name }}}}", "{Ann}"),
        ("{{ dotted.key }}", "flat"),
        ("{{ ünïcode }}", "{{ ünïcode }}"),
    ],
)
def test_syntax(source: str, expected: str) -> None:
    data = {
        "name": "Ann",
        "user": {"first": "Bo"},
        "items": ["x", "y"],
        "count": 3,
        "ratio": 0.5,
        "on": True,
        "off": False,
        "dotted.key": "flat",
    }
    assert render_text(source, data) == expected


def test_html_values_are_escaped_and_triple_braces_are_raw() -> None:
    data = {"v": "<script>alert('x') & \"y\"</script>"}
    assert render_html("{{ v }}", data) == html.escape(data["v"], quote=True)
    assert render_html("{{{ v }}}", data) == data["v"]
    assert render_text("{{ v }}", data) == data["v"]


def test_fallbacks_fill_absent_and_null_values_only() -> None:
    fallbacks: dict[str, object] = {"name": "friend", "plan.name": "Free"}
    assert render_text("{{ name }}/{{ plan.name }}", {}, fallbacks) == "friend/Free"
    assert render_text("{{ name }}", {"name": None}, fallbacks) == "friend"
    assert render_text("{{ name }}", {"name": ""}, fallbacks) == ""
    assert render_text("{{ plan.name }}", {"plan": {"name": "Pro"}}, fallbacks) == "Pro"


def test_a_missing_value_names_every_missing_placeholder() -> None:
    content = parse_content("{{ a }}", "{{ b.c }} {{ a }}", "{{ d }} {{ ok }}")
    with pytest.raises(ValidationError) as caught:
        render_content(content, {"ok": 1, "b": {}}, {})
    assert "variables: a, b.c, d." in caught.value.message


def test_preview_keeps_missing_placeholders_as_written() -> None:
    content = parse_content("{{a}} {{ b }}", "{{{  c }}}", None)
    rendered = render_content(content, {}, {"b": "B"}, keep_missing=True)
    assert (rendered.subject, rendered.html, rendered.text) == ("{{a}} B", "{{{  c }}}", None)


@pytest.mark.parametrize("value", ["a\r\nBcc: x@example.com", "a\nb", "a\x00", "a\u2028b"])
def test_a_rendered_subject_must_stay_one_line(value: str) -> None:
    with pytest.raises(ValidationError) as caught:
        render_content(parse_content("Hi {{ name }}", None, "x"), {"name": value}, {})
    assert "subject" in caught.value.message and "name" in caught.value.message


def test_nul_in_a_rendered_body_is_refused() -> None:
    with pytest.raises(ValidationError):
        render_content(parse_content("s", "{{ v }}", None), {"v": "a\x00"}, {})


def test_output_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(templates_module, "MAX_RENDERED_LENGTH", 100)
    with pytest.raises(ValidationError) as caught:
        render_text("{{ v }}{{ v }}", {"v": "x" * 60})
    assert "longer than 100" in caught.value.message


def test_parse_cache_is_keyed_by_version_and_bounded() -> None:
    cache = ParseCache(size=2)
    first = cache.get("v1", "{{ a }}", None, None)
    assert cache.get("v1", "ignored: versions are immutable", None, None) is first
    cache.get("v2", "b", None, None)
    cache.get("v1", "", None, None)  # v1 becomes the most recent
    cache.get("v3", "c", None, None)  # evicts v2
    assert cache.get("v1", "", None, None) is first
    assert cache.get("v2", "other", None, None).subject == parse_template("other")


# Properties ---------------------------------------------------------------------------------

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
json_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats() | st.text()
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
data_objects = st.dictionaries(names | st.text(max_size=8), json_values, max_size=6)
# Text rich in template syntax, so that placeholders, near-misses and stray braces all appear.
fragments = st.sampled_from(["{{", "}}", "{{{", "}}}", " ", ".", "{", "}", "\n", "<", "&", '"'])
template_text = st.lists(fragments | names | st.text(max_size=6), max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(template_text, data_objects, st.booleans())
def test_rendering_never_fails_except_for_missing_values(
    source: str, data: dict[str, Any], escape: bool
) -> None:
    parsed = parse_template(source)
    values = Values(data, {})
    kept = render(parsed, values, escape_html=escape, keep_missing=True)
    assert isinstance(kept, str)
    missing = values.missing([parsed])
    if missing:
        with pytest.raises(ValidationError, match=r"^Missing template variable"):
            render(parsed, values, escape_html=escape)
    else:
        assert render(parsed, values, escape_html=escape) == kept


@settings(deadline=None)
@given(template_text)
def test_parsing_keeps_every_character(source: str) -> None:
    parts = parse_template(source).parts
    assert "".join(p if isinstance(p, str) else p.source for p in parts) == source


@settings(max_examples=300, deadline=None)
@given(st.text(), st.text())
def test_html_escaping_is_complete(value: str, raw: str) -> None:
    rendered = render_html("<p>{{ v }}</p>", {"v": value})
    inner = rendered[3:-4]
    assert not re.search(r"[<>\"']", inner)
    assert re.fullmatch(r"([^&]|&(amp|lt|gt|quot|#x27);)*", inner, flags=re.DOTALL)
    assert html.unescape(inner) == value
    assert render_html("{{{ v }}}", {"v": raw}) == raw


@settings(max_examples=300, deadline=None)
@given(
    st.lists(fragments | names | st.text(max_size=4), max_size=20).map("".join),
    names.filter(lambda name: name not in ("v", "v2")),
)
def test_a_rendered_value_is_never_read_again(value: str, other: str) -> None:
    data = {"v": value, other: "INJECTED", "v2": value}
    assert render_text("{{ v }}", data) == value
    assert render_text("{{{ v }}}|{{ v2 }}", data) == f"{value}|{value}"


@settings(deadline=None)
@given(data_objects, names)
def test_a_value_renders_as_its_text(data: dict[str, Any], name: str) -> None:
    parsed = parse_template(f"{{{{ {name} }}}}")
    assert parsed.parts == (Placeholder(name, False, f"{{{{ {name} }}}}"),)
    text = Values(data, {}).text_of(name)
    if text is not None:
        assert render(parsed, Values(data, {}), escape_html=False) == text

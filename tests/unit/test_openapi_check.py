"""The checker of answers against /openapi.json (tests/openapi_check.py), on a small document."""

from __future__ import annotations

from typing import Any

from tests.openapi_check import problems, route_path

DOCUMENT: dict[str, Any] = {
    "paths": {
        "/domains/{domain_id}": {"get": {}},
        "/domains/regions": {"get": {}},
        "/domains": {"post": {}},
    },
    "components": {
        "schemas": {
            "Thing": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "n": {"type": "integer"},
                    "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                    "tags": {"type": "object", "additionalProperties": {"type": "string"}},
                },
                "required": ["id", "n"],
            }
        }
    },
}
THING = {"$ref": "#/components/schemas/Thing"}


def test_a_drifted_record_is_caught() -> None:
    """The checker itself: a missing, an extra and a mistyped member are each reported."""
    document, schema = DOCUMENT, THING
    assert problems(document, schema, {"id": "a", "n": 1}) == []
    assert problems(document, schema, {"id": "a"}) == ["$: 'n' is a required property"]
    [extra] = problems(document, schema, {"id": "a", "n": 1, "x": 2})
    assert "'x' was unexpected" in extra
    assert len(problems(document, schema, {"id": "a", "n": True})) == 1
    assert len(problems(document, schema, {"id": None, "n": 1})) == 1
    assert problems(document, schema, {"id": "a", "n": 1, "note": None, "tags": {"k": "v"}}) == []
    assert len(problems(document, schema, {"id": "a", "n": 1, "tags": {"k": 1}})) == 1


def test_a_path_finds_its_template_literal_segments_first() -> None:
    assert route_path(DOCUMENT, "GET", "/domains/regions") == "/domains/regions"
    assert route_path(DOCUMENT, "GET", "/domains/abc") == "/domains/{domain_id}"
    assert route_path(DOCUMENT, "GET", "/domains/abc/verify") is None
    assert route_path(DOCUMENT, "GET", "/domains") is None

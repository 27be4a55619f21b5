"""The document's links from each create to the operations on what it made (api/openapi.py)."""

from __future__ import annotations

from typing import Any

from posthaste.api.openapi import add_links


def _operation(name: str, record: str | None = None) -> dict[str, Any]:
    schema = {"$ref": f"#/components/schemas/{record}"} if record else {}
    answer = {"content": {"application/json": {"schema": schema}}} if record else {}
    return {"operationId": name, "responses": {"201" if record else "204": answer}}


def test_a_create_links_to_its_record_but_not_to_what_a_sub_resource_post_makes() -> None:
    paths: dict[str, Any] = {
        "/domains": {"post": _operation("create", "Domain")},
        "/domains/{domain_id}": {"get": _operation("get"), "delete": _operation("delete")},
        "/domains/{domain_id}/verify": {"post": _operation("verify", "Domain")},
        "/domains/{domain_id}/claim": {
            "post": _operation("claim", "Claim"),
            "get": _operation("get_claim"),
        },
        "/domains/{domain_id}/claim/confirm": {"post": _operation("confirm", "Domain")},
        "/domains/{domain_id}/records/{record_id}": {"get": _operation("record")},
    }
    add_links(paths)
    links = paths["/domains"]["post"]["responses"]["201"]["links"]
    assert sorted(links) == [
        "DELETE /domains/{domain_id}",
        "GET /domains/{domain_id}",
        "POST /domains/{domain_id}/claim",
        "POST /domains/{domain_id}/verify",
    ]
    assert links["POST /domains/{domain_id}/claim"] == {
        "operationId": "claim",
        "parameters": {"domain_id": "$response.body#/id"},
    }
    # The claim is no collection of records: its POST links nowhere.
    assert "links" not in paths["/domains/{domain_id}/claim"]["post"]["responses"]["201"]

"""An attachment's JSON record with a signed, expiring download link (Resend's shape), the
public link itself, and Resend's paging of the attachment list; SQLite and PostgreSQL."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import urlsplit

import httpx

from posthaste.bootstrap import Services
from posthaste.core.ids import now_ms, parse_rfc3339
from tests.conftest import Tenant, make_tenant
from tests.helpers import email_body as body

JSON = {"Accept": "application/json"}


async def _send(client: httpx.AsyncClient, tenant: Tenant, files: list[dict[str, Any]]) -> str:
    response = await client.post("/emails", json=body(attachments=files), headers=tenant.headers())
    assert response.status_code == 200, response.text
    email_id: str = response.json()["id"]
    return email_id


def _files(count: int) -> list[dict[str, Any]]:
    return [
        {"filename": f"f{n}.txt", "content": base64.b64encode(f"file {n}".encode()).decode()}
        for n in range(count)
    ]


async def test_json_record_with_a_link_that_downloads_without_a_key(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    pdf = b"%PDF-1.7 " + bytes(range(256))
    email_id = await _send(
        client,
        tenant,
        [
            {"filename": "invoice.pdf", "content": list(pdf)},
            {"filename": "logo.png", "content": "iVBORw==", "inline_content_id": "logo"},
        ],
    )
    listed = (await client.get(f"/emails/{email_id}/attachments", headers=tenant.headers())).json()
    assert listed["has_more"] is False
    invoice, logo = listed["data"]
    path = f"/emails/{email_id}/attachments/{invoice['id']}"
    before = now_ms()
    record = (await client.get(path, headers={**tenant.headers(), **JSON})).json()
    assert {k: record[k] for k in ("object", "id", "filename", "content_type", "size")} == {
        "object": "attachment",
        "id": invoice["id"],
        "filename": "invoice.pdf",
        "content_type": "application/pdf",
        "size": len(pdf),
    }
    assert record["content_id"] is None and record["content_disposition"] == "attachment"
    assert (logo["content_id"], logo["content_disposition"]) == ("logo", "inline")
    expires = parse_rfc3339(record["expires_at"])
    assert expires is not None and before + 3_500_000 < expires <= now_ms() + 3_600_000
    link = urlsplit(record["download_url"])
    assert (link.scheme, link.netloc) == ("http", "127.0.0.1:8080")  # the public URL
    download = await client.get(link.path)  # no Authorization header
    assert download.status_code == 200 and download.content == pdf
    assert download.headers["content-type"] == "application/pdf"
    assert download.headers["content-disposition"].startswith('attachment; filename="invoice.pdf"')
    # Without Accept: application/json, the bytes (SPEC's download), as before.
    for accept in ({}, {"Accept": "*/*"}, {"Accept": "application/json;q=0, */*"}):
        plain = await client.get(path, headers={**tenant.headers(), **accept})
        assert plain.content == pdf, accept


async def test_forged_expired_and_foreign_links_are_refused(
    client: httpx.AsyncClient, tenant: Tenant, services: Services
) -> None:
    email_id = await _send(client, tenant, _files(1))
    listed = await client.get(f"/emails/{email_id}/attachments", headers=tenant.headers())
    attachment_id = listed.json()["data"][0]["id"]
    links = services.emails.links
    url, _ = links.link(tenant.team.id, attachment_id, now_ms() - links.ttl_ms - 1)
    expired = await client.get(urlsplit(url).path)
    assert expired.status_code == 404 and "expired" in expired.json()["message"]
    good = urlsplit(links.link(tenant.team.id, attachment_id, now_ms())[0]).path
    token = good.rsplit("/", 1)[1]
    body_part, mac = token.split(".")
    for forged in (
        f"{body_part}.{mac[:-2]}AA" if not mac.endswith("AA") else f"{body_part}.{mac[:-2]}BB",
        f"{body_part[:-2]}AA.{mac}",
        "junk",
        "a.b",
        "..",
    ):
        answer = await client.get(f"/attachments/{forged}")
        assert answer.status_code == 404 and answer.json()["name"] == "not_found", forged
    # A link names its team: another team's id in it does not verify, and the attachment is
    # not found under another team.
    other = await make_tenant(services)
    stolen = urlsplit(links.link(other.team.id, attachment_id, now_ms())[0]).path
    assert (await client.get(stolen)).status_code == 404
    # Another team's key cannot ask for the record either.
    answer = await client.get(
        f"/emails/{email_id}/attachments/{attachment_id}", headers={**other.headers(), **JSON}
    )
    assert answer.status_code == 404


async def test_an_attachment_of_another_email_is_not_found(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    first = await _send(client, tenant, _files(1))
    second = await _send(client, tenant, _files(1))
    (item,) = (await client.get(f"/emails/{first}/attachments", headers=tenant.headers())).json()[
        "data"
    ]
    for accept in ({}, JSON):
        answer = await client.get(
            f"/emails/{second}/attachments/{item['id']}", headers={**tenant.headers(), **accept}
        )
        assert answer.status_code == 404 and answer.json()["name"] == "not_found"
    for bad in ("not-a-uuid", "00000000-0000-0000-0000-000000000000"):
        answer = await client.get(f"/emails/{first}/attachments/{bad}", headers=tenant.headers())
        assert answer.status_code == 404


async def test_attachment_list_pages_with_limit_after_and_before(
    client: httpx.AsyncClient, tenant: Tenant
) -> None:
    email_id = await _send(client, tenant, _files(5))
    path = f"/emails/{email_id}/attachments"

    async def page(**params: str) -> tuple[list[str], bool]:
        answer = (await client.get(path, params=params, headers=tenant.headers())).json()
        return [a["filename"] for a in answer["data"]], answer["has_more"]

    every, more = await page()
    assert every == [f"f{n}.txt" for n in range(5)] and more is False
    ids = [a["id"] for a in (await client.get(path, headers=tenant.headers())).json()["data"]]
    assert await page(limit="2") == (["f0.txt", "f1.txt"], True)
    assert await page(limit="2", after=ids[1]) == (["f2.txt", "f3.txt"], True)
    assert await page(limit="2", after=ids[3]) == (["f4.txt"], False)
    assert await page(limit="2", before=ids[4]) == (["f2.txt", "f3.txt"], True)
    assert await page(limit="2", before=ids[1]) == (["f0.txt"], False)
    for params in ({"after": "nope"}, {"after": ids[0], "before": ids[1]}):
        answer = await client.get(path, params=params, headers=tenant.headers())
        assert answer.status_code == 422 and answer.json()["name"] == "validation_error"

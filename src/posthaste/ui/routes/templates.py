"""The templates pages: the list, and one template with its preview (fallbacks filled in)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from posthaste.core.serialize import template_record
from posthaste.ui.auth import UiPrincipal
from posthaste.ui.listing import id_page, next_link, services_of
from posthaste.ui.rendering import message_html, render
from posthaste.ui.routing import UiRoute

router = APIRouter(prefix="/ui", route_class=UiRoute)


@router.get("/templates")
async def template_list(request: Request, principal: UiPrincipal) -> Response:
    items, more = await services_of(request).templates.page(principal, id_page(request))
    return render(
        request,
        "templates.html",
        templates=[template_record(t) for t in items],
        older=next_link("/ui/templates", items, more),
    )


@router.get("/templates/{template_id}")
async def template_page(request: Request, template_id: str, principal: UiPrincipal) -> Response:
    preview = await services_of(request).templates.preview(principal, template_id)
    return render(
        request,
        "template.html",
        template=template_record(preview.template),
        preview=preview,
    )


@router.get("/templates/{template_id}/preview.html")
async def template_preview_html(
    request: Request, template_id: str, principal: UiPrincipal
) -> Response:
    """The preview's html, framed by the template's page under the message policy."""
    preview = await services_of(request).templates.preview(principal, template_id)
    return message_html(preview.html or "")

"""The domains pages: the list, one domain's DNS records with their status, and verify."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from posthaste.core.serialize import domain_record
from posthaste.ui.auth import CheckedForm, UiPrincipal
from posthaste.ui.listing import id_page, next_link, services_of
from posthaste.ui.rendering import render
from posthaste.ui.routing import UiRoute

router = APIRouter(prefix="/ui", route_class=UiRoute)


@router.get("/domains")
async def domain_list(request: Request, principal: UiPrincipal) -> Response:
    items, more = await services_of(request).domains.page(principal, id_page(request))
    return render(
        request,
        "domains.html",
        domains=[domain_record(d) for d in items],
        older=next_link("/ui/domains", items, more),
    )


@router.get("/domains/{domain_id}")
async def domain_page(request: Request, domain_id: str, principal: UiPrincipal) -> Response:
    domain = await services_of(request).domains.get(principal, domain_id)
    return render(request, "domain.html", domain=domain_record(domain))


@router.post("/domains/{domain_id}/verify")
async def verify_domain(
    request: Request, domain_id: str, principal: UiPrincipal, _form: CheckedForm
) -> Response:
    domain = await services_of(request).domains.verify(principal, domain_id)
    return RedirectResponse(f"/ui/domains/{domain.id}?notice=verified", 303)

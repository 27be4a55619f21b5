"""/domains: create, list, get, update, delete, verify, regions, and claims (also Resend's)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, JsonBody, ResendPage, ServicesDep, json_object
from posthaste.api.openapi import ERRORS, body_schema
from posthaste.api.responses import deleted, json_response, listing, page
from posthaste.api.schemas.common import Deleted
from posthaste.api.schemas.domains import (
    CreateDomainRequest,
    DomainClaim,
    DomainList,
    DomainRecord,
    RegionList,
    UpdateDomainRequest,
)
from posthaste.api.streamed import streamed_listing
from posthaste.core.domain_requests import parse_domain_changes, parse_new_domain
from posthaste.core.models import Principal
from posthaste.core.serialize import domain_record
from posthaste.services.domains import DomainService

router = APIRouter(tags=["domains"])


@router.post(
    "/domains",
    status_code=201,
    summary="Add a sending domain; answers the DNS records to publish",
    responses={201: {"model": DomainRecord}, **ERRORS},
    openapi_extra=body_schema(CreateDomainRequest),
)
async def create_domain(
    principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    new = parse_new_domain(json_object(body), services.settings.regions)
    domain = await services.domains.create(principal, new)
    return json_response(domain_record(domain), 201)


@router.post(
    "/domains/claim",
    summary="Resend's claim by name: the claim of the team's domain of that name (added if new)",
    responses={200: {"model": DomainClaim}, **ERRORS},
    openapi_extra=body_schema(CreateDomainRequest),
)
async def claim_domain_by_name(
    principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    new = parse_new_domain(json_object(body), services.settings.regions)
    return json_response((await services.domains.claim_name(principal, new)).as_dict())


@router.get(
    "/domains",
    summary="List the team's domains, newest first: the full set, or a page (limit, after, before)",
    responses={200: {"model": DomainList}, **ERRORS},
)
async def list_domains(
    principal: FullPrincipal,
    services: ServicesDep,
    request: ResendPage,
) -> Response:
    if request is None:
        return await streamed_listing(_records(services.domains, principal), has_more=False)
    items, more = await services.domains.page(principal, request)
    return page([domain_record(d) for d in items], more)


async def _records(domains: DomainService, principal: Principal) -> AsyncIterator[dict[str, Any]]:
    async for domain in domains.stream(principal):
        yield domain_record(domain)


@router.get(
    "/domains/regions",
    summary="The regions a domain may send from",
    responses={200: {"model": RegionList}, **ERRORS},
)
async def list_regions(principal: FullPrincipal, services: ServicesDep) -> Response:
    return listing(services.domains.regions())


@router.get(
    "/domains/{domain_id}",
    summary="Get a domain with the status of each record",
    responses={200: {"model": DomainRecord}, **ERRORS},
)
async def get_domain(domain_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    return json_response(domain_record(await services.domains.get(principal, domain_id)))


@router.patch(
    "/domains/{domain_id}",
    summary="Change tracking, TLS or receiving",
    responses={200: {"model": DomainRecord}, **ERRORS},
    openapi_extra=body_schema(UpdateDomainRequest),
)
async def update_domain(
    domain_id: str, principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    changes = parse_domain_changes(json_object(body))
    domain = await services.domains.update(principal, domain_id, changes)
    return json_response(domain_record(domain))


@router.delete(
    "/domains/{domain_id}",
    summary="Remove a domain (and its claim)",
    responses={200: {"model": Deleted}, **ERRORS},
)
async def delete_domain(
    domain_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    await services.domains.delete(principal, domain_id)
    return deleted("domain", domain_id)


@router.post(
    "/domains/{domain_id}/verify",
    summary="Check the DNS records now; DNS trouble is a status, never an error",
    responses={200: {"model": DomainRecord}, **ERRORS},
)
async def verify_domain(
    domain_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    return json_response(domain_record(await services.domains.verify(principal, domain_id)))


@router.post(
    "/domains/{domain_id}/claim",
    summary="The TXT record that proves control of the name",
    responses={200: {"model": DomainClaim}, **ERRORS},
)
async def claim_domain(domain_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    return json_response((await services.domains.claim(principal, domain_id)).as_dict())


@router.get(
    "/domains/{domain_id}/claim",
    summary="The domain's claim as it stands (404 until one is started)",
    responses={200: {"model": DomainClaim}, **ERRORS},
)
async def get_claim(domain_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    return json_response((await services.domains.claim_state(principal, domain_id)).as_dict())


@router.post(
    "/domains/{domain_id}/claim/verify",
    summary="Resend's path for confirming a claim: answers the claim (422 if the record is absent)",
    responses={200: {"model": DomainClaim}, **ERRORS},
)
async def verify_claim(domain_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    await services.domains.confirm_claim(principal, domain_id)
    return json_response((await services.domains.claim_state(principal, domain_id)).as_dict())


@router.post(
    "/domains/{domain_id}/claim/confirm",
    summary="Check the claim record; the name becomes this team's alone (422 if absent)",
    responses={200: {"model": DomainRecord}, **ERRORS},
)
async def confirm_claim(
    domain_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    domain = await services.domains.confirm_claim(principal, domain_id)
    return json_response(domain_record(domain))


@router.post(
    "/domains/{domain_id}/claim/release",
    summary="Give the claim up",
    responses={200: {"model": DomainRecord}, **ERRORS},
)
async def release_claim(
    domain_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    domain = await services.domains.release_claim(principal, domain_id)
    return json_response(domain_record(domain))

"""/templates: create, list, get, update, publish, preview, duplicate, delete.

``{template_id}`` in a path is the template's id or its alias.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, JsonBody, ResendPage, ServicesDep, json_object
from posthaste.api.openapi import ERRORS, body_schema
from posthaste.api.responses import deleted, json_response, page
from posthaste.api.schemas.common import Deleted
from posthaste.api.schemas.templates import (
    CreateTemplateRequest,
    TemplateList,
    TemplatePreview,
    TemplateRecord,
    UpdateTemplateRequest,
)
from posthaste.api.streamed import streamed_listing
from posthaste.core.models import Principal
from posthaste.core.serialize import template_record
from posthaste.core.template_fields import parse_new_template, parse_template_changes
from posthaste.services.templates import TemplateService

router = APIRouter(tags=["templates"])
ONE = {200: {"model": TemplateRecord}, **ERRORS}


@router.post(
    "/templates",
    status_code=201,
    summary="Create a template (a draft)",
    responses={201: {"model": TemplateRecord}, **ERRORS},
    openapi_extra=body_schema(CreateTemplateRequest),
)
async def create_template(
    principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    new = parse_new_template(json_object(body))
    template = await services.templates.create(principal, new)
    return json_response(template_record(template), 201)


@router.get(
    "/templates",
    summary="List templates, oldest first: the full set, or a page with limit, after or before",
    responses={200: {"model": TemplateList}, **ERRORS},
)
async def list_templates(
    principal: FullPrincipal,
    services: ServicesDep,
    request: ResendPage,
) -> Response:
    if request is None:
        return await streamed_listing(_records(services.templates, principal), has_more=False)
    items, more = await services.templates.page(principal, request)
    return page([template_record(t) for t in items], more)


async def _records(
    templates: TemplateService, principal: Principal
) -> AsyncIterator[dict[str, Any]]:
    async for template in templates.stream(principal):
        yield template_record(template)


@router.get("/templates/{template_id}", summary="Get a template by id or alias", responses=ONE)
async def get_template(
    template_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    return json_response(template_record(await services.templates.get(principal, template_id)))


@router.patch(
    "/templates/{template_id}",
    summary="Edit a template (a published one gets a new draft)",
    responses=ONE,
    openapi_extra=body_schema(UpdateTemplateRequest),
)
async def update_template(
    template_id: str, principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    changes = parse_template_changes(json_object(body))
    template = await services.templates.update(principal, template_id, changes)
    return json_response(template_record(template))


@router.post(
    "/templates/{template_id}/publish",
    summary="Publish the draft: live sends use it from now on",
    responses=ONE,
)
async def publish_template(
    template_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    return json_response(template_record(await services.templates.publish(principal, template_id)))


@router.get(
    "/templates/{template_id}/preview",
    summary="Render the latest content with fallbacks; unfilled placeholders stay visible",
    responses={200: {"model": TemplatePreview}, **ERRORS},
)
async def preview_template(
    template_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    preview = await services.templates.preview(principal, template_id)
    return json_response(
        {
            "object": "template_preview",
            "id": preview.template.id,
            "subject": preview.subject,
            "html": preview.html,
            "text": preview.text,
            "missing_variables": preview.missing,
        }
    )


@router.post(
    "/templates/{template_id}/duplicate",
    status_code=201,
    summary="Copy a template as a new draft (alias gets -copy, -copy-2, ...)",
    responses={201: {"model": TemplateRecord}, **ERRORS},
)
async def duplicate_template(
    template_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    copy = await services.templates.duplicate(principal, template_id)
    return json_response(template_record(copy), 201)


@router.delete(
    "/templates/{template_id}",
    summary="Delete a template (accepted emails keep their content)",
    responses={200: {"model": Deleted}, **ERRORS},
)
async def delete_template(
    template_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    removed = await services.templates.delete(principal, template_id)
    return deleted("template", removed.id)

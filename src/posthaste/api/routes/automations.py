"""/automations: step graphs run per contact, created, listed, read, edited (a new version for
runs started afterwards), duplicated, stopped and deleted; their runs listed, read and
cancelled."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, JsonBody, ResendPage, ServicesDep, json_object
from posthaste.api.openapi import ERRORS, body_schema, comma_separated, one_of
from posthaste.api.responses import deleted, json_response, page
from posthaste.api.schemas.automations import (
    AutomationList,
    AutomationRecord,
    CreateAutomationRequest,
    RunList,
    RunRecord,
    UpdateAutomationRequest,
)
from posthaste.api.schemas.common import Deleted
from posthaste.api.streamed import streamed_listing
from posthaste.core.automation_runs import RunStatus
from posthaste.core.automations import (
    parse_automation_changes,
    parse_new_automation,
    parse_status,
)
from posthaste.core.serialize import automation_record, run_record
from posthaste.errors import ValidationError

STATUS = "Only automations with this status: enabled or disabled"
RUN_STATUS = "Only runs with these statuses, comma-separated: running, completed, failed, cancelled"

RUN_STATUSES = comma_separated(*(status.value for status in RunStatus), blanks=True)
router = APIRouter(tags=["automations"])
ONE = {200: {"model": AutomationRecord}, **ERRORS}
RUN = {200: {"model": RunRecord}, **ERRORS}


@router.post(
    "/automations",
    status_code=201,
    summary="Create an automation (disabled unless status says enabled)",
    responses={201: {"model": AutomationRecord}, **ERRORS},
    openapi_extra=body_schema(CreateAutomationRequest),
)
async def create_automation(
    principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    new = parse_new_automation(json_object(body))
    return json_response(automation_record(await services.automations.create(principal, new)), 201)


@router.get(
    "/automations",
    summary="List automations, oldest first: the full set, or a page with limit, after or before",
    responses={200: {"model": AutomationList}, **ERRORS},
)
async def list_automations(
    principal: FullPrincipal,
    services: ServicesDep,
    request: ResendPage,
    status: Annotated[
        str | None, Query(description=STATUS, json_schema_extra=one_of("enabled", "disabled"))
    ] = None,
) -> Response:
    wanted = parse_status(status) if status else None
    if request is None:
        records = _records(services.automations.stream(principal, wanted))
        return await streamed_listing(records, has_more=False)
    items, more = await services.automations.page(principal, wanted, request)
    return page([automation_record(a) for a in items], more)


async def _records(automations: AsyncIterator[Any]) -> AsyncIterator[dict[str, Any]]:
    async for automation in automations:
        yield automation_record(automation)


@router.get("/automations/{automation_id}", summary="Get an automation", responses=ONE)
async def get_automation(
    automation_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    automation = await services.automations.get(principal, automation_id)
    return json_response(automation_record(automation))


@router.patch(
    "/automations/{automation_id}",
    summary="Edit an automation; new steps and connections apply to runs started afterwards",
    responses=ONE,
    openapi_extra=body_schema(UpdateAutomationRequest),
)
async def update_automation(
    automation_id: str, principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    changes = parse_automation_changes(json_object(body))
    automation = await services.automations.update(principal, automation_id, changes)
    return json_response(automation_record(automation))


@router.delete(
    "/automations/{automation_id}",
    summary="Delete an automation with its runs",
    responses={200: {"model": Deleted}, **ERRORS},
)
async def delete_automation(
    automation_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    removed = await services.automations.delete(principal, automation_id)
    return deleted("automation", removed.id)


@router.post(
    "/automations/{automation_id}/duplicate",
    status_code=201,
    summary="Copy an automation (disabled, named '<name> (copy)')",
    responses={201: {"model": AutomationRecord}, **ERRORS},
)
async def duplicate_automation(
    automation_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    copy = await services.automations.duplicate(principal, automation_id)
    return json_response(automation_record(copy), 201)


@router.post(
    "/automations/{automation_id}/stop",
    summary="Disable an automation and cancel its running runs",
    responses=ONE,
)
async def stop_automation(
    automation_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    stopped = await services.automations.stop(principal, automation_id)
    return json_response(automation_record(stopped))


@router.get(
    "/automations/{automation_id}/runs",
    summary="List an automation's runs, newest first: the full set, or a page",
    responses={200: {"model": RunList}, **ERRORS},
)
async def list_runs(
    automation_id: str,
    principal: FullPrincipal,
    services: ServicesDep,
    request: ResendPage,
    status: Annotated[
        str | None, Query(description=RUN_STATUS, json_schema_extra=RUN_STATUSES)
    ] = None,
) -> Response:
    statuses = _run_statuses(status)
    automations = services.automations
    if request is None:
        runs = automations.stream_runs(principal, automation_id, statuses)
        return await streamed_listing(_run_records(runs), has_more=False)
    items, more = await automations.page_runs(principal, automation_id, statuses, request)
    return page([run_record(r, with_steps=False) for r in items], more)


def _run_statuses(value: str | None) -> list[RunStatus]:
    wanted = [part.strip() for part in (value or "").split(",") if part.strip()]
    try:
        return [RunStatus(part) for part in wanted]
    except ValueError:
        raise ValidationError(
            "'status' must be running, completed, failed or cancelled (comma-separated)."
        ) from None


async def _run_records(runs: AsyncIterator[Any]) -> AsyncIterator[dict[str, Any]]:
    async for run in runs:
        yield run_record(run, with_steps=False)


@router.get(
    "/automations/{automation_id}/runs/{run_id}",
    summary="Get a run with the steps it reached",
    responses=RUN,
)
async def get_run(
    automation_id: str, run_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    run = await services.automations.get_run(principal, automation_id, run_id)
    return json_response(run_record(run))


@router.post(
    "/automations/{automation_id}/runs/{run_id}/cancel",
    summary="Cancel a running run (409 once it has ended)",
    responses=RUN,
)
async def cancel_run(
    automation_id: str, run_id: str, principal: FullPrincipal, services: ServicesDep
) -> Response:
    run = await services.automations.cancel_run(principal, automation_id, run_id)
    return json_response(run_record(run))

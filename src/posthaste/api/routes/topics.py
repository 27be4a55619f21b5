"""/topics and a contact's topics: subscription preferences created, listed, read, edited and
deleted; a contact's effective subscriptions read and chosen."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from posthaste.api.deps import FullPrincipal, JsonBody, ResendPage, ServicesDep, json_object
from posthaste.api.openapi import ERRORS, body_schema
from posthaste.api.responses import deleted, json_response, page
from posthaste.api.schemas.common import Deleted
from posthaste.api.schemas.topics import (
    ContactTopicList,
    ContactTopicsRequest,
    CreateTopicRequest,
    TopicList,
    TopicRecord,
    UpdateTopicRequest,
)
from posthaste.api.streamed import streamed_listing
from posthaste.core.models import Principal
from posthaste.core.serialize import contact_topic_record, topic_record
from posthaste.core.topics import (
    ContactTopic,
    parse_new_topic,
    parse_topic_changes,
    parse_topic_choices,
)
from posthaste.services.topics import TopicService

router = APIRouter(tags=["topics"])
ONE = {200: {"model": TopicRecord}, **ERRORS}


@router.post(
    "/topics",
    status_code=201,
    summary="Create a topic",
    responses={201: {"model": TopicRecord}, **ERRORS},
    openapi_extra=body_schema(CreateTopicRequest),
)
async def create_topic(principal: FullPrincipal, services: ServicesDep, body: JsonBody) -> Response:
    topic = await services.topics.create(principal, parse_new_topic(json_object(body)))
    return json_response(topic_record(topic), 201)


@router.get(
    "/topics",
    summary="List topics, oldest first: the full set, or a page with limit, after or before",
    responses={200: {"model": TopicList}, **ERRORS},
)
async def list_topics(
    principal: FullPrincipal,
    services: ServicesDep,
    request: ResendPage,
) -> Response:
    if request is None:
        return await streamed_listing(_records(services.topics, principal), has_more=False)
    items, more = await services.topics.page(principal, request)
    return page([topic_record(t) for t in items], more)


async def _records(topics: TopicService, principal: Principal) -> AsyncIterator[dict[str, Any]]:
    async for topic in topics.stream(principal):
        yield topic_record(topic)


@router.get("/topics/{topic_id}", summary="Get a topic", responses=ONE)
async def get_topic(topic_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    return json_response(topic_record(await services.topics.get(principal, topic_id)))


@router.patch(
    "/topics/{topic_id}",
    summary="Edit a topic's name or description",
    responses=ONE,
    openapi_extra=body_schema(UpdateTopicRequest),
)
async def update_topic(
    topic_id: str, principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    changes = parse_topic_changes(json_object(body))
    return json_response(topic_record(await services.topics.update(principal, topic_id, changes)))


@router.delete(
    "/topics/{topic_id}",
    summary="Delete a topic (and every contact's choice for it)",
    responses={200: {"model": Deleted}, **ERRORS},
)
async def delete_topic(topic_id: str, principal: FullPrincipal, services: ServicesDep) -> Response:
    removed = await services.topics.delete(principal, topic_id)
    return deleted("topic", removed.id)


def _contact_topics(contact_id: str, items: list[ContactTopic], more: bool) -> Response:
    return json_response(
        {
            "object": "list",
            "id": contact_id,
            "data": [contact_topic_record(t) for t in items],
            "has_more": more,
        }
    )


@router.get(
    "/contacts/{contact_id}/topics",
    summary="Every topic with the contact's effective subscription (its choice, else the default)",
    responses={200: {"model": ContactTopicList}, **ERRORS},
)
async def list_contact_topics(
    contact_id: str,
    principal: FullPrincipal,
    services: ServicesDep,
    request: ResendPage,
) -> Response:
    owner, items, more = await services.topics.of_contact(principal, contact_id, request)
    return _contact_topics(owner, items, more)


@router.patch(
    "/contacts/{contact_id}/topics",
    summary="Choose topics for a contact: {topics: [{id, subscription}]} or the bare array",
    responses={200: {"model": ContactTopicList}, **ERRORS},
    openapi_extra=body_schema(ContactTopicsRequest),
)
async def choose_contact_topics(
    contact_id: str, principal: FullPrincipal, services: ServicesDep, body: JsonBody
) -> Response:
    given = body if isinstance(body, list) else json_object(body).get("topics")
    choices = parse_topic_choices(given, "topics")
    owner, items = await services.topics.choose(principal, contact_id, choices)
    return _contact_topics(owner, items, False)

"""Message stream shapes, for the OpenAPI document."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from posthaste.api.schemas.common import Name, absent
from posthaste.api.schemas.pools import PoolName


class CreateStreamRequest(BaseModel):
    id: str | None = Field(
        None,
        pattern="^[a-z0-9][a-z0-9_-]{0,63}$",
        description="Slug; derived from the name when omitted or null (then the name must give "
        "one: a letter or digit first)",
    )
    name: Name
    type: Literal["transactional", "broadcast"]
    pool: PoolName | None = Field(
        default=None,
        description="The IP pool its mail leaves from with mx delivery (see GET /pools); "
        "over the sending domain's pool",
    )


class UpdateStreamRequest(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"anyOf": [{"required": ["name"]}, {"required": ["pool"]}]}
    )

    name: Name = Field(default_factory=absent)
    pool: PoolName | None = Field(
        default=None,
        description="The IP pool its mail leaves from with mx delivery; null for none",
    )


class StreamRecord(BaseModel):
    object: str = "stream"
    id: str
    name: str
    type: str
    created_at: str
    pool: str | None


class StreamList(BaseModel):
    object: str = "list"
    data: list[StreamRecord]

"""OpenAPI shapes of the receiving destinations and their throttle."""

from __future__ import annotations

from pydantic import BaseModel, Field


class DestinationPolicy(BaseModel):
    max_connections: int = Field(description="connections open at once, per worker process")
    messages_per_connection: int
    rate: float = Field(description="the most messages per second the fleet sends it")


class DestinationReply(BaseModel):
    at: str
    reply: str = Field(examples=["421 4.7.28 Our system has detected an unusual rate ..."])
    decision: str = Field(examples=["rate 20/s -> 10/s, suspended 1.8 s until 12:00:03.120Z"])


class DestinationRecord(BaseModel):
    object: str = "destination"
    name: str = Field(
        description="the registered domain of the primary MX host", examples=["google.com"]
    )
    mx_hosts: list[str]
    state: str = Field(examples=["active", "throttled", "suspended"])
    rate: float = Field(description="messages per second allowed now (adapted)")
    policy: DestinationPolicy
    suspended_until: str | None
    recent: list[DestinationReply] = Field(
        description="the newest replies behind throttling decisions, newest first"
    )


class DestinationList(BaseModel):
    object: str = "list"
    data: list[DestinationRecord]

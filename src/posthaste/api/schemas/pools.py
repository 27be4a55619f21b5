"""OpenAPI shapes of the IP pools and their source addresses."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

# A pool's name in a stream's or domain's body; which pools exist is configuration (GET /pools).
PoolName = Annotated[str, StringConstraints(pattern="^[a-z0-9][a-z0-9_-]{0,63}$")]


class PoolWarmup(BaseModel):
    per_day: list[int] = Field(
        description="each address's daily cap on day 1, 2, ... of its warm-up; none after",
        examples=[[50, 100, 200, 400]],
    )


class PoolAddress(BaseModel):
    address: str = Field(examples=["192.0.2.10"])
    warmup_day: int | None = Field(
        description="the day of its warm-up today (1: its first day of sending); null: unused"
    )
    cap: int | None = Field(description="messages it may take today (UTC); null: no cap")
    sent_today: int = Field(description="messages it took today (UTC), every team's")


class PoolRecord(BaseModel):
    object: str = "pool"
    name: str = Field(examples=["default", "marketing"])
    helo: str | None = Field(description="the name it greets with; null: POSTHASTE_MX_HOST")
    warmup: PoolWarmup
    addresses: list[PoolAddress] = Field(
        description="source addresses to bind; none: the machine's own address"
    )


class PoolList(BaseModel):
    object: str = "list"
    data: list[PoolRecord]

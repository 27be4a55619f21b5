"""Domain shapes, for the OpenAPI document (responses are rendered by core.serialize)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from posthaste.api.schemas.common import absent
from posthaste.api.schemas.pools import PoolName


class Capabilities(BaseModel):
    sending: Literal["enabled"] = Field("enabled", description="Always enabled: every domain sends")
    receiving: Literal["enabled", "disabled"] = Field("disabled", description="The receiving flag")


# receiving and Resend's capabilities.receiving, given together, must say the same thing.
RECEIVING_DISAGREES: dict[str, Any] = {
    "anyOf": [
        {
            "required": ["receiving", "capabilities"],
            "properties": {
                "receiving": {"const": receiving},
                "capabilities": {
                    "required": ["receiving"],
                    "properties": {"receiving": {"const": capability}},
                },
            },
        }
        for receiving, capability in ((True, "disabled"), (False, "enabled"))
    ]
}


class CreateDomainRequest(BaseModel):
    model_config = ConfigDict(json_schema_extra={"not": RECEIVING_DISAGREES})

    name: str = Field(
        pattern=r"^\s*([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}\.?\s*$",
        description="The domain to send from, e.g. example.com (IDN accepted; not localhost, "
        ".local, .invalid, .onion, .arpa or an IP address)",
    )
    region: str | None = Field(None, description="One of GET /domains/regions; default: the first")
    open_tracking: bool = False
    click_tracking: bool = False
    tls: Literal["opportunistic", "enforced"] = "opportunistic"
    receiving: bool = Field(False, description="Also publish an MX to receive mail")
    tracking_subdomain: str | None = Field(
        default_factory=absent,
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$",
        description="Serve this domain's tracking links from <tracking_subdomain>.<name> (one "
        "DNS label, e.g. links) once its CNAME record is verified; null removes it",
    )
    capabilities: Capabilities = Field(
        default_factory=absent,
        description="Resend's spelling of receiving (receiving: enabled|disabled)",
    )
    pool: PoolName | None = Field(
        default=None,
        description="The IP pool its mail leaves from with mx delivery when its stream names "
        "none (see GET /pools); null or absent for none",
    )


class UpdateDomainRequest(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": [name]}
                for name in (
                    "open_tracking",
                    "click_tracking",
                    "tls",
                    "receiving",
                    "capabilities",
                    "tracking_subdomain",
                    "pool",
                )
            ],
            "not": RECEIVING_DISAGREES,
        }
    )

    open_tracking: bool = Field(default_factory=absent)
    click_tracking: bool = Field(default_factory=absent)
    tls: Literal["opportunistic", "enforced"] = Field(default_factory=absent)
    receiving: bool = Field(default_factory=absent)
    tracking_subdomain: str | None = Field(
        default_factory=absent,
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$",
        description="Serve this domain's tracking links from <tracking_subdomain>.<name> (one "
        "DNS label, e.g. links) once its CNAME record is verified; null removes it",
    )
    capabilities: Capabilities = Field(
        default_factory=absent,
        description="Resend's spelling of receiving (receiving: enabled|disabled)",
    )
    pool: PoolName | None = Field(
        default=None,
        description="The IP pool its mail leaves from with mx delivery when its stream names "
        "none (see GET /pools); null for none",
    )


class DomainDnsRecord(BaseModel):
    record: str = Field(description="DKIM, SPF, DMARC, Receiving or Tracking")
    type: str = Field(description="TXT, MX or CNAME")
    name: str = Field(description="The full DNS name")
    value: str = Field(description="The whole value, as a DNS console wants it")
    zone_value: str = Field(
        description="The value as a zone file writes it: TXT in quoted strings of <= 255 bytes"
    )
    ttl: int
    priority: int | None = Field(None, description="MX records only")
    status: str = Field(description="not_started, pending, verified, failed, temporary_failure")


class DomainRecord(BaseModel):
    object: str = "domain"
    id: str
    name: str
    status: str = Field(description="not_started, pending, verified, failed, temporary_failure")
    region: str
    created_at: str
    records: list[DomainDnsRecord]
    open_tracking: bool
    click_tracking: bool
    tls: str
    receiving: bool
    tracking_subdomain: str | None = Field(
        description="The subdomain tracking links use once its CNAME (record Tracking) is "
        "verified; null: the service's public URL"
    )
    capabilities: Capabilities = Field(description="Resend's view of receiving")
    claimed: bool = Field(description="This team holds the confirmed claim on the name")
    last_checked_at: str | None
    pool: str | None = Field(description="The IP pool its mail leaves from (mx delivery)")


class DomainList(BaseModel):
    object: str = "list"
    data: list[DomainRecord]
    has_more: bool = Field(description="More items lie past this page (false for the full set)")


class Region(BaseModel):
    name: str
    default: bool


class RegionList(BaseModel):
    object: str = "list"
    data: list[Region]


class ClaimRecord(BaseModel):
    type: str = "TXT"
    name: str = Field(description="_posthaste-claim.<domain>")
    value: str = Field(description="posthaste-claim=<token>")


class DomainClaim(BaseModel):
    object: str = "domain_claim"
    domain_id: str
    name: str = Field(description="The domain's name")
    region: str
    status: str = Field(description="pending, or claimed once confirmed")
    record: ClaimRecord

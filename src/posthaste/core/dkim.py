"""DKIM: the key a message is signed with, and where delivery gets it from.

The domains feature keeps one key per team and domain (made by a key provider, encrypted at
rest); delivery asks ``SigningKeys`` for the key of the ``From`` domain just before signing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class DkimKey:
    """A signing identity: ``d=`` (A-label domain), ``s=`` selector and the private key (PEM)."""

    domain: str
    selector: str
    private_key_pem: bytes = field(repr=False)


class SigningKeys(Protocol):
    """The key to sign a team's mail from ``domain`` with, or None (unverified: sent unsigned)."""

    async def signing_key(self, team_id: str, domain: str) -> DkimKey | None: ...


class NoSigningKeys:
    """No domain has a key: every message goes out unsigned (capture and test setups)."""

    async def signing_key(self, team_id: str, domain: str) -> DkimKey | None:
        return None

"""Where a domain's DKIM key comes from: a key provider per region.

``local`` makes our own 2048-bit RSA key (the private key is encrypted at rest by the domain
service). A cloud provider's identity API (e.g. SES ``CreateEmailIdentity``) can implement
``KeyProvider`` for a region: it returns the public key to publish and keeps the private key
itself (``private_key_pem`` None), signing on its side.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

DKIM_KEY_BITS = 2048


@dataclass(frozen=True)
class ProvisionedKey:
    """A DKIM identity: the ``p=`` value to publish, and the private key when we hold it."""

    public_key_b64: str
    private_key_pem: bytes | None = field(repr=False)


class KeyProvider(Protocol):
    """Makes (and forgets) the DKIM identity of one domain and selector."""

    name: str

    async def create_key(self, domain: str, selector: str) -> ProvisionedKey: ...

    async def delete_key(self, domain: str, selector: str) -> None: ...


class LocalKeyProvider:
    """Our own key: RSA 2048, generated off the event loop (it takes tens of milliseconds)."""

    name = "local"

    async def create_key(self, domain: str, selector: str) -> ProvisionedKey:
        return await asyncio.to_thread(generate_rsa_key)

    async def delete_key(self, domain: str, selector: str) -> None:
        return None  # nothing is kept outside our database


def generate_rsa_key(bits: int = DKIM_KEY_BITS) -> ProvisionedKey:
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    public_der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return ProvisionedKey(base64.b64encode(public_der).decode("ascii"), private_pem)


class KeyProviders:
    """The provider of each region; regions without their own use the default (``local``)."""

    def __init__(
        self, default: KeyProvider | None = None, by_region: Mapping[str, KeyProvider] | None = None
    ) -> None:
        self.default = default or LocalKeyProvider()
        self.by_region = dict(by_region or {})

    def for_region(self, region: str) -> KeyProvider:
        return self.by_region.get(region, self.default)

    def named(self, name: str) -> KeyProvider:
        """The provider that made a stored key (to delete it with the same one)."""
        for provider in (self.default, *self.by_region.values()):
            if provider.name == name:
                return provider
        return self.default

"""Test DKIM identities: a fresh 2048-bit RSA key, its DNS record, and a ``SigningKeys``."""

from __future__ import annotations

import base64
import functools

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from posthaste.core.dkim import DkimKey


@functools.cache
def _rsa_key() -> rsa.RSAPrivateKey:
    # One key per test process: generating a 2048-bit key costs ~50 ms.
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def make_key(domain: str = "acme.test", selector: str = "ph1") -> DkimKey:
    pem = _rsa_key().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return DkimKey(domain, selector, pem)


def dns_record(key: DkimKey) -> str:
    """The TXT value published at ``<selector>._domainkey.<domain>``."""
    private = serialization.load_pem_private_key(key.private_key_pem, password=None)
    assert isinstance(private, rsa.RSAPrivateKey)
    public = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return f"v=DKIM1; k=rsa; p={base64.b64encode(public).decode()}"


def record_name(key: DkimKey) -> str:
    return f"{key.selector}._domainkey.{key.domain}"


class StaticSigningKeys:
    """Every team signs mail from the domains it was given, with their keys."""

    def __init__(self, *keys: DkimKey) -> None:
        self.keys = {key.domain: key for key in keys}

    async def signing_key(self, team_id: str, domain: str) -> DkimKey | None:
        return self.keys.get(domain.lower())

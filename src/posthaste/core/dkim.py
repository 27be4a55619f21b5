"""DKIM: the key a message is signed with, and where delivery gets it from.

The domains feature keeps one key per team and domain (made by a key provider, encrypted at
rest); delivery asks ``SigningKeys`` for the key of the ``From`` domain just before signing.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from dataclasses import dataclass, field
from typing import Protocol

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa


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


class DkimError(Exception):
    """A key that cannot sign (not an RSA private key in PEM): the email cannot go out signed."""


# RFC 6376 §5.4.1: the fields whose change would alter what the reader sees or how it is sorted.
SIGNED_HEADERS: tuple[str, ...] = (
    "from",
    "to",
    "cc",
    "subject",
    "date",
    "message-id",
    "reply-to",
    "mime-version",
    "content-type",
    "content-transfer-encoding",
    "list-unsubscribe",
    "list-unsubscribe-post",
    "in-reply-to",
    "references",
)
# Signed once more than present: a From added in transit then breaks the signature (§8.15).
OVERSIGNED_HEADERS: tuple[str, ...] = ("from",)

# Only the runs that change: a lone space is already canonical, and most text is full of them.
_WSP_RUN = re.compile(rb"\t[ \t]*| [ \t]+")
_TRAILING_WSP = re.compile(rb"[ \t]+\r\n")
_FOLD = re.compile(rb"\r\n(?=[ \t])")
_BARE_LF = re.compile(rb"(?<!\r)\n")
_FOLD_WIDTH = 76


def sign_message(raw: bytes, key: DkimKey, timestamp: int) -> bytes:
    """``raw`` (CRLF line endings, ending in CRLF) with a DKIM-Signature field in front.

    relaxed/relaxed canonicalisation (RFC 6376 §3.4.2, §3.4.4) by hand and the RSA step in
    OpenSSL through ``cryptography``; ``timestamp`` is the ``t=`` tag (epoch seconds).
    """
    message = raw if raw.count(b"\n") == raw.count(b"\r\n") else _BARE_LF.sub(b"\r\n", raw)
    if not message.endswith(b"\r\n"):
        message += b"\r\n"  # SMTP DATA adds it anyway; signing it keeps every verifier agreeing
    header_block, body = _split_message(message)
    fields = _header_fields(header_block)
    signed_names = _names_to_sign(fields)
    body_hash = base64.b64encode(hashlib.sha256(relaxed_body(body)).digest())
    unsigned = _signature_field(key, timestamp, signed_names, body_hash)
    data = b"".join(relaxed_header(f) for f in _select_fields(fields, signed_names))
    data += relaxed_header(unsigned).removesuffix(b"\r\n")
    signature = _private_key(key.private_key_pem).sign(data, padding.PKCS1v15(), hashes.SHA256())
    return unsigned.removesuffix(b"\r\n") + _fold_base64(signature) + b"\r\n" + message


def relaxed_header(field: bytes) -> bytes:
    """One header field in relaxed form: lower-case name, unfolded, whitespace runs squeezed."""
    name, _, value = field.partition(b":")
    value = _WSP_RUN.sub(b" ", _FOLD.sub(b"", value.removesuffix(b"\r\n")))
    return name.strip().lower() + b":" + value.strip(b" ") + b"\r\n"


def relaxed_body(body: bytes) -> bytes:
    """The body in relaxed form: whitespace runs squeezed, trailing blanks and empty lines gone."""
    if b" \r\n" in body or b"\t" in body:
        body = _TRAILING_WSP.sub(b"\r\n", body)
    if b"  " in body or b"\t" in body:
        body = _WSP_RUN.sub(b" ", body)
    body = body.rstrip(b"\r\n")
    return body + b"\r\n" if body else b""


def _split_message(message: bytes) -> tuple[bytes, bytes]:
    if message.startswith(b"\r\n"):
        return b"", message[2:]
    header_block, sep, body = message.partition(b"\r\n\r\n")
    return header_block + b"\r\n", body if sep else b""


def _header_fields(header_block: bytes) -> list[bytes]:
    """The header block as whole fields (continuation lines kept), each ending in CRLF."""
    fields: list[bytes] = []
    for line in header_block.split(b"\r\n")[:-1]:
        if line[:1] in (b" ", b"\t") and fields:
            fields[-1] += line + b"\r\n"
        else:
            fields.append(line + b"\r\n")
    return fields


def _field_name(field: bytes) -> str:
    return field.split(b":", 1)[0].strip().lower().decode("ascii", "replace")


def _names_to_sign(fields: list[bytes]) -> list[str]:
    """``h=``: each signed field as often as it occurs, the over-signed ones once more."""
    counts: dict[str, int] = {}
    for item in fields:
        name = _field_name(item)
        counts[name] = counts.get(name, 0) + 1
    names: list[str] = []
    for name in SIGNED_HEADERS:
        names.extend([name] * (counts.get(name, 0) + (name in OVERSIGNED_HEADERS)))
    return names


def _select_fields(fields: list[bytes], names: list[str]) -> list[bytes]:
    """The fields ``h=`` names, each occurrence taken from the bottom up (RFC 6376 §5.4.2)."""
    remaining: dict[str, list[bytes]] = {}
    for item in fields:
        remaining.setdefault(_field_name(item), []).append(item)
    chosen: list[bytes] = []
    for name in names:
        stack = remaining.get(name)
        if stack:
            chosen.append(stack.pop())
    return chosen


def _signature_field(key: DkimKey, timestamp: int, names: list[str], body_hash: bytes) -> bytes:
    tags = [
        "v=1",
        "a=rsa-sha256",
        "c=relaxed/relaxed",
        f"d={key.domain}",
        f"s={key.selector}",
        f"t={timestamp}",
        f"h={':'.join(names)}",
        f"bh={body_hash.decode('ascii')}",
        "b=",
    ]
    lines = ["DKIM-Signature: " + tags[0]]
    for tag in tags[1:]:
        if len(lines[-1]) + len(tag) + 2 > _FOLD_WIDTH:
            lines[-1] += ";"
            lines.append("\t" + tag)
        else:
            lines[-1] += "; " + tag
    return "\r\n".join(lines).encode("ascii") + b"\r\n"


def _fold_base64(signature: bytes) -> bytes:
    encoded = base64.b64encode(signature)
    chunks = [encoded[i : i + _FOLD_WIDTH - 4] for i in range(0, len(encoded), _FOLD_WIDTH - 4)]
    return b"\r\n\t".join(chunks)


@functools.lru_cache(maxsize=1024)
def _private_key(pem: bytes) -> rsa.RSAPrivateKey:
    """The loaded key, once per key: parsing a PEM costs far more than a signature."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise DkimError(f"the DKIM key is not a readable PEM private key: {exc}") from exc
    if not isinstance(key, rsa.RSAPrivateKey):
        raise DkimError("the DKIM key is not an RSA key (rsa-sha256 needs one)")
    return key

"""Authentication results of a received message (RFC 8601) without I/O.

``Authentication`` holds the SPF, DKIM and DMARC results (RFC 8601's names: ``pass``, ``fail``,
``none``, ``neutral``, ``temperror``, ``permerror`` …) with the identity each one checked;
``results_field`` writes them as the ``Authentication-Results`` field that goes at the top of
the message we keep, and ``without_ours`` drops any field that claims to come from us (RFC 8601
§5: a sender must not be able to forge our verdict).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NONE = "none"
TEMPERROR = "temperror"


@dataclass(frozen=True)
class Authentication:
    spf: str = NONE
    dkim: str = NONE
    dmarc: str = NONE
    mail_from: str = ""  # smtp.mailfrom checked by SPF
    dkim_domain: str = ""  # header.d of the signature checked
    dkim_selector: str = ""
    from_domain: str = ""  # header.from checked by DMARC

    def as_dict(self) -> dict[str, str]:
        return {"spf": self.spf, "dkim": self.dkim, "dmarc": self.dmarc}

    def header_value(self, authserv_id: str) -> str:
        """``authserv-id; spf=...; dkim=...; dmarc=...`` with the properties checked."""
        spf = f"spf={self.spf}" + (
            f" smtp.mailfrom={_value(self.mail_from)}" if self.mail_from else ""
        )
        dkim = f"dkim={self.dkim}"
        if self.dkim_domain:
            dkim += f" header.d={self.dkim_domain}"
            if self.dkim_selector:
                dkim += f" header.s={self.dkim_selector}"
        dmarc = f"dmarc={self.dmarc}"
        if self.from_domain:
            dmarc += f" header.from={self.from_domain}"
        return f"{authserv_id}; {spf}; {dkim}; {dmarc}"


def results_field(authserv_id: str, results: Authentication) -> bytes:
    """Our ``Authentication-Results`` field, its CRLF included, to go on top of the message."""
    field = f"Authentication-Results: {results.header_value(authserv_id)}\r\n"
    return field.encode("ascii", "replace")


def without_ours(raw: bytes, authserv_id: str) -> bytes:
    """``raw`` without any ``Authentication-Results`` field that claims to be ours (forged):
    ``raw`` itself, not a copy, when it has none."""
    end = raw.find(b"\r\n\r\n")
    head = raw if end < 0 else raw[: end + 2]
    pattern = re.compile(
        rb"^authentication-results:[ \t]*" + re.escape(authserv_id.encode()) + rb"[ \t]*;"
        rb".*?\r\n(?![ \t])",
        re.IGNORECASE | re.MULTILINE | re.DOTALL,
    )
    if not pattern.search(head):
        return raw
    return pattern.sub(b"", head) + (b"" if end < 0 else raw[end + 2 :])


def _value(text: str) -> str:
    """An RFC 8601 property value: a token as is, anything else quoted."""
    if text and re.fullmatch(r"[A-Za-z0-9!#$%&'*+\-./=?^_`{|}~@]+", text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

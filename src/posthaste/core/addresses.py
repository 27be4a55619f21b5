"""Email addresses as callers give them: parsing, validating and formatting.

Every address that enters Posthaste (``from``, ``to``, ``cc``, ``bcc``, ``reply_to``, SMTP relay
envelopes) goes through ``parse_address``, so the rules live here once:

- Accepted forms: ``addr``, ``Name <addr>``, ``"Quoted, Name" <addr>``, ``<addr>``, with
  surrounding whitespace. Because each JSON string holds exactly one address, an unquoted display
  name may contain specials such as ``,`` (``Doe, Jane <j@x.com>``); ``formatted()`` quotes it.
- Any control character (CR, LF, NUL, TAB, DEL, C1), Unicode line or paragraph separator or lone
  surrogate anywhere is refused: these are how header injection is smuggled in.
- The addr-spec is checked by ``email_validator`` (no DNS). Domains reserved for testing by
  RFC 2606/6761 (``*.test``, ``example.com``) are accepted so sandboxes and the simulator work;
  ``localhost``, ``.local``, ``.invalid``, ``.onion``, ``.arpa``, dotless names and IP literals are
  refused because mail to them could only reach the server itself or nowhere.
- Quoted local parts (``"a b"@x.com``) are refused: legal but rare, and mishandled by many MTAs.
- Local parts are at most 64 characters (RFC 5321), whole values at most 320 characters.
- The domain is stored as its lowercase IDNA A-label (``bücher.de`` → ``xn--bcher-kva.de``); the
  local part is kept as given (NFC-normalized if it is not ASCII) and never lowercased, since only
  the receiving server may decide that local parts are case-insensitive. ``lookup_key`` is the
  lowercased form used to compare addresses (suppressions, ``to`` filters).
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from dataclasses import dataclass

import idna
from email_validator import EmailNotValidError, ValidatedEmail, validate_email
from email_validator.rfc_constants import (
    CASE_INSENSITIVE_MAILBOX_NAMES,
    DOT_ATOM_TEXT,
    EMAIL_MAX_LENGTH,
    LOCAL_PART_MAX_LENGTH,
)

from posthaste.core.text import describe_character, json_type, shorten
from posthaste.errors import ValidationError

MAX_ADDRESS_INPUT_LENGTH = 320
"""Longest accepted input, display name included (a 64-char local part, '@', a 255-char domain)."""

_RFC5322_SPECIALS = frozenset('()<>[]:;@\\,."')


@dataclass(frozen=True, slots=True)
class Address:
    """One mailbox: an optional display name, a local part and an ASCII (A-label) domain."""

    name: str | None
    local: str
    domain: str

    @property
    def address(self) -> str:
        """The addr-spec ``local@domain`` with the ASCII domain, as used in SMTP envelopes."""
        return f"{self.local}@{self.domain}"

    @property
    def unicode_domain(self) -> str:
        """The domain in Unicode (U-label) form, for showing to people."""
        try:
            return idna.decode(self.domain)
        except idna.IDNAError:
            return self.domain

    @property
    def lookup_key(self) -> str:
        """The lowercased address: the key for suppression checks and ``to``/``from`` filters."""
        return self.address.lower()

    def formatted(self) -> str:
        """``Name <addr>``, quoting the name when RFC 5322 requires it, or ``addr`` alone.

        Non-ASCII names are left as text: RFC 2047 encoding is the MIME builder's job.
        """
        if not self.name or not self.name.strip():
            return self.address
        return f"{_format_display_name(self.name)} <{self.address}>"


def parse_address(value: str, field: str) -> Address:
    """Parse one address as a caller wrote it; raise ``ValidationError`` naming ``field`` if bad."""
    if not isinstance(value, str):
        raise ValidationError(f"{field!r} must be an address string, got {json_type(value)}.")
    valid = _valid_address(value)
    # Not valid: parsed again for the error, which names the field.
    return valid if valid is not None else _parse_address_text(value, field)


# Senders and recipients repeat (a batch shares its sender, a relayed message names its
# recipient in RCPT TO and in its To header); validation with IDNA is the costliest step of
# accepting an email, and its result depends on the text alone, whatever field it came in.
@functools.lru_cache(maxsize=4096)
def _valid_address(value: str) -> Address | None:
    try:
        return _parse_address_text(value, "")
    except ValidationError:
        return None


def _parse_address_text(value: str, field: str) -> Address:
    _check_length(value, field)
    _check_characters(value, field)
    text = value.strip()
    if not text:
        raise ValidationError(f"{field!r} must not be empty: give an email address.")
    raw_name, addr_spec = _split_angle_address(text, field, value)
    local, domain = _validate_addr_spec(addr_spec.strip(), field, value)
    name = _unquote_display_name(raw_name) if raw_name is not None else None
    return Address(name=name if name and name.strip() else None, local=local, domain=domain)


def parse_address_list(value: object, field: str, *, required: bool = False) -> list[Address]:
    """Parse a field that is one address string or an array of them (SPEC: never comma-split).

    ``None`` means the field was omitted: an empty list, or an error when ``required``.
    """
    if value is None:
        if required:
            raise ValidationError(f"{field!r} is required: give an address or an array of them.")
        return []
    if isinstance(value, str):
        return [parse_address(value, field)]
    if not isinstance(value, list):
        raise ValidationError(
            f"{field!r} must be an address string or an array of them, got {json_type(value)}."
        )
    if not value and required:
        raise ValidationError(f"{field!r} must name at least one recipient.")
    return [_parse_list_item(item, f"{field}[{index}]") for index, item in enumerate(value)]


def _parse_list_item(item: object, item_field: str) -> Address:
    if not isinstance(item, str):
        raise ValidationError(f"{item_field!r} must be an address string, got {json_type(item)}.")
    return parse_address(item, item_field)


def _check_length(value: str, field: str) -> None:
    if len(value) > MAX_ADDRESS_INPUT_LENGTH:
        raise ValidationError(
            f"Invalid {field!r} address: it is {len(value)} characters long; "
            f"at most {MAX_ADDRESS_INPUT_LENGTH} are allowed."
        )


def _check_characters(value: str, field: str) -> None:
    """Refuse control characters anywhere: CR/LF in an address is a header-injection attempt."""
    if value.isascii() and value.isprintable():  # U+0020-U+007E only: nothing to refuse
        return
    for char in value:
        if _is_forbidden_character(char):
            raise _invalid(field, value, f"it contains {describe_character(char)}")


def _is_forbidden_character(char: str) -> bool:
    # Zl/Zp: Python's email package splits header lines on U+2028/U+2029 too.
    return unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp")


def _split_angle_address(text: str, field: str, value: str) -> tuple[str | None, str]:
    """Split ``Name <addr>`` into its raw (still quoted) display name and addr-spec.

    A plain ``addr`` gives ``(None, addr)``. Angle brackets inside a quoted name do not count.
    """
    opens, closes = _unquoted_angle_positions(text, field, value)
    if not opens and not closes:
        return None, text
    if len(opens) > 1:
        raise _invalid(field, value, "'<' appears more than once; quote a display name with '<'")
    if len(closes) > 1:
        raise _invalid(field, value, "'>' appears more than once; quote a display name with '>'")
    if len(opens) != len(closes) or opens[0] > closes[0]:
        raise _invalid(field, value, "unbalanced '<' and '>'")
    if closes[0] != len(text) - 1:
        raise _invalid(field, value, "unexpected text after '>'")
    return text[: opens[0]].strip(), text[opens[0] + 1 : closes[0]]


def _unquoted_angle_positions(text: str, field: str, value: str) -> tuple[list[int], list[int]]:
    """Positions of ``<`` and ``>`` outside double quotes; refuse an unclosed quote."""
    opens: list[int] = []
    closes: list[int] = []
    if '"' not in text and "<" not in text and ">" not in text:  # a bare address: nothing to find
        return opens, closes
    in_quote = escaped = False
    for index, char in enumerate(text):
        if in_quote:
            escaped, in_quote = _step_in_quote(char, escaped)
        elif char == '"':
            in_quote = True
        elif char == "<":
            opens.append(index)
        elif char == ">":
            closes.append(index)
    if in_quote:
        raise _invalid(field, value, "unbalanced double quotes")
    return opens, closes


def _step_in_quote(char: str, escaped: bool) -> tuple[bool, bool]:
    """Advance a quoted-string scan by one character: returns (escaped, still_in_quote)."""
    if escaped:
        return False, True
    if char == "\\":
        return True, True
    return False, char != '"'


def _unquote_display_name(raw: str) -> str:
    """Remove the quoting of an RFC 5322 phrase: ``"Doe, Jane"`` → ``Doe, Jane``."""
    chars: list[str] = []
    in_quote = escaped = False
    for char in raw:
        if not in_quote:
            if char == '"':
                in_quote = True
            else:
                chars.append(char)
            continue
        if escaped or char not in '\\"':
            chars.append(char)
        escaped, in_quote = _step_in_quote(char, escaped)
    return "".join(chars)


def _validate_addr_spec(addr_spec: str, field: str, value: str) -> tuple[str, str]:
    """Check ``local@domain`` and return the local part and the lowercase A-label domain."""
    checked = _checked_addr_spec(addr_spec)
    if isinstance(checked, _Refused):
        raise _invalid(field, value, checked.reason) from checked.cause
    return checked


@dataclass(frozen=True, slots=True)
class _Refused:
    """Why an addr-spec is invalid, whichever field or display name it came with."""

    reason: str
    cause: Exception | None = None


# Keyed on the addr-spec alone: one address arrives in several forms (a relay message's RCPT TO,
# its ``To`` header, the request built from both) and is validated once.
@functools.lru_cache(maxsize=4096)
def _checked_addr_spec(addr_spec: str) -> tuple[str, str] | _Refused:
    if not addr_spec:
        return _Refused("the address inside '<' and '>' is empty")
    if '"' in addr_spec:
        return _Refused("quoted local parts are not supported")
    at_signs = addr_spec.count("@")
    if at_signs == 0:
        return _Refused("missing '@'")
    if at_signs > 1:
        return _Refused("more than one '@'")
    local, _, domain = addr_spec.partition("@")
    return _checked_plain(local, domain) or _validated(addr_spec)


_CASE_INSENSITIVE = frozenset(CASE_INSENSITIVE_MAILBOX_NAMES)
# A domain part email_validator splits off as we do: no white space, quotes, brackets or other
# specials (what has them goes the whole way through ``_validated``).
_PLAIN_DOMAIN = re.compile(r'[^\s"(),:;<>@\[\\\]]+\Z')


def _checked_plain(local: str, domain: str) -> tuple[str, str] | None:
    """The common address, by email_validator's own rules with its domain validated once per
    domain rather than once per address: an ASCII dot-atom local part of at most 64 characters
    that email_validator keeps as given (not one of the RFC 2142 names it lowercases), at a
    domain it accepts, within its length limit. None: anything else (``_validated`` decides).

    A new recipient each time at a domain seen before is the send path's usual case; the full
    validation costs ~30-60 µs of which almost all is the domain's (IDNA, reserved names)."""
    if (
        len(local) > LOCAL_PART_MAX_LENGTH
        or DOT_ATOM_TEXT.match(local) is None
        or local.lower() in _CASE_INSENSITIVE
    ):
        return None
    forms = _domain_forms(domain)
    if forms is None:
        return None
    a_label, longest = forms
    # email_validator's length rule, on the three forms it checks (the local part is ASCII).
    if len(local) + 1 + longest > EMAIL_MAX_LENGTH:
        return None
    return local, a_label


@functools.lru_cache(maxsize=1024)
def _domain_forms(domain: str) -> tuple[str, int] | None:
    """A domain part's A-label, and the longest in bytes of the forms email_validator checks
    an address's length on (the domain as given, Unicode and ASCII), worked out once per
    domain (a broadcast's every member costs this); None when it is refused (``_validated``
    then says why, for the whole address)."""
    if _PLAIN_DOMAIN.match(domain) is None:
        return None
    try:
        checked = _validate("a@" + domain)
        a_label = _a_label(checked.domain)
    except (EmailNotValidError, idna.IDNAError):
        return None
    forms = (domain, checked.domain, checked.ascii_domain)
    return a_label, max(len(form.encode()) for form in forms)


def _validated(addr_spec: str) -> tuple[str, str] | _Refused:
    """``local@domain`` checked by email_validator (no DNS) with our rules."""
    try:
        checked = _validate(addr_spec)
    except EmailNotValidError as exc:
        return _Refused(_as_reason(str(exc)), exc.with_traceback(None))
    try:
        return checked.local_part, _a_label(checked.domain)
    except idna.IDNAError as exc:
        return _Refused(f"the domain is not valid IDNA ({exc})", exc.with_traceback(None))


def _validate(addr_spec: str) -> ValidatedEmail:
    """email_validator's syntax checks with our rules: no DNS, SMTPUTF8 local parts allowed,
    RFC 2606/6761 test domains accepted, other special-use domains refused, RFC lengths."""
    return validate_email(
        addr_spec,
        check_deliverability=False,
        allow_smtputf8=True,
        test_environment=True,
        globally_deliverable=True,
        strict=True,
    )


@functools.lru_cache(maxsize=4096)
def _a_label(domain: str) -> str:
    # Cached: recipients differ but their domains repeat, and IDNA checks are costly.
    ascii_domain = idna.encode(domain, uts46=True).decode("ascii").lower()
    idna.decode(ascii_domain)
    return ascii_domain


@functools.lru_cache(maxsize=1024)  # a sender's name repeats on each of its emails
def _format_display_name(name: str) -> str:
    """The name as an RFC 5322 phrase: quoted (with ``\\`` and ``"`` escaped) if it must be."""
    if name != name.strip() or not _RFC5322_SPECIALS.isdisjoint(name):
        escaped = name.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    return name


def _invalid(field: str, value: str, reason: str) -> ValidationError:
    return ValidationError(f"Invalid {field!r} address {_shown(value)}: {reason}.")


def _shown(value: str) -> str:
    """The value as a JSON string, control characters escaped and long values shortened."""
    dumped = json.dumps(shorten(value), ensure_ascii=False)
    return "".join(f"\\u{ord(c):04x}" if _is_forbidden_character(c) else c for c in dumped)


def _as_reason(message: str) -> str:
    """Fit an email_validator sentence after our colon: lower first letter, no final period."""
    message = message.rstrip(".")
    return message[:1].lower() + message[1:]

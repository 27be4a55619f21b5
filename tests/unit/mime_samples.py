"""Messages for the parser tests: a sample, generated multipart structures, and what a parse
decides (``shape``), to compare two parsers by."""

from __future__ import annotations

from email.message import EmailMessage, Message
from email.policy import SMTP
from typing import Any

from hypothesis import strategies as st


def shape(message: Message) -> Any:
    """Everything the parser decides: headers, structure, payloads, preamble, epilogue, defects."""
    payload = message.get_payload()
    body = [shape(part) for part in payload] if isinstance(payload, list) else payload
    return (
        message.items(),
        message.preamble,
        message.epilogue,
        [type(defect).__name__ for defect in message.defects],
        body,
    )


def sample() -> bytes:
    message = EmailMessage()
    message["From"] = "Acme <hello@acme.test>"
    message["To"] = "Customer <customer@example.com>"
    message["Subject"] = "Your receipt"
    message.set_content("Thank you for your order.\n" * 12)
    message.add_alternative("<p>Thank you for your order.</p>\n" * 12, subtype="html")
    message.add_attachment(b"%PDF-1.4 receipt" * 50, maintype="application", subtype="pdf")
    return message.as_bytes(policy=SMTP)


# Boundary characters: RFC 2046's, regex metacharacters and white space included.
BOUNDARY = st.text(alphabet="abcXYZ019'()+_,-./:=? *[]{}|^$&~#\t", min_size=1, max_size=20).filter(
    lambda b: b.strip() == b
)
EOL = st.sampled_from(["\r\n", "\n", "\r"])
WORDS = st.text(alphabet="ab- .=\t", max_size=8)


@st.composite
def body_line(draw: st.DrawFn, boundary: str) -> str:
    """Text, or something that starts like a boundary line and may or may not be one."""
    return draw(
        st.one_of(
            WORDS,
            st.builds(
                lambda tail: f"--{boundary}{tail}",
                st.sampled_from(["", "--", " ", "\t", "-- \t", "x", "--x", " x", "-"]),
            ),
        )
    )


@st.composite
def part(draw: st.DrawFn, depth: int = 0) -> list[str]:
    """Lines of one part (headers, blank line, body); multipart up to two levels deep."""
    if depth >= 2 or not draw(st.booleans()):
        text = draw(st.lists(WORDS, max_size=4))
        return ["Content-Type: text/plain", "", *text]
    boundary = draw(BOUNDARY)
    lines = [f'Content-Type: multipart/mixed; boundary="{boundary}"', ""]
    lines += draw(st.lists(body_line(boundary), max_size=2))  # preamble
    for child in draw(st.lists(part(depth + 1), min_size=0, max_size=3)):
        lines.append(f"--{boundary}")
        lines += child
        lines += draw(st.lists(body_line(boundary), max_size=2))
    close = draw(st.sampled_from(["--", "-- ", "--\t ", None]))
    if close is not None:
        lines.append(f"--{boundary}{close}")
    lines += draw(st.lists(WORDS, max_size=2))  # epilogue
    return lines


def generated_message(lines: list[str], eol: str, final_eol: bool) -> bytes:
    """A message of ``part()``'s lines, joined by ``eol``."""
    return ("From: a@example.com" + eol + eol.join(lines) + (eol if final_eol else "")).encode(
        "ascii"
    )

"""``core.mime_params`` reads boundary and charset as the stdlib's ``Message`` methods do."""

from __future__ import annotations

from collections.abc import Callable
from email.message import EmailMessage, Message

from hypothesis import example, given, settings
from hypothesis import strategies as st

from posthaste.core import mime_params
from posthaste.core.mime_params import _params

_token = st.text(alphabet="abcXYZ09-._+!#$%&'^`|~*", min_size=1, max_size=8)
_quoted = st.text(alphabet="abc 09=;:,/?<>()@[]\"\\'*%\t\u00e9", max_size=10).map(
    lambda text: f'"{text}"'
)
_space = st.sampled_from(["", " ", "  ", "\t", "\r\n ", "\n\t", "\r\n"])
_names = st.one_of(
    st.sampled_from(["boundary", "charset", "CHARSET", "Boundary", "format", "boundary*"]),
    st.sampled_from(["charset*0", "charset*", "boundary*0*", "name"]),
    _token,
)
_param = st.builds(
    lambda before, name, eq, value, after: f";{before}{name}{eq}{value}{after}",
    _space,
    _names,
    st.sampled_from(["=", "=", "=", " = ", "="]),
    st.one_of(_token, _quoted),
    _space,
)
_fields = st.builds(
    lambda lead, kind, params, end: f"{lead}{kind}{''.join(params)}{end}",
    _space,
    st.sampled_from(["text/plain", "text/html", "multipart/mixed", "Multipart/Alternative", "x"]),
    st.lists(_param, max_size=4),
    st.sampled_from(["", ";", " ", "; ", ";;"]),
)


def _message(field: str | None) -> Message:
    message = Message()
    if field is not None:
        message.set_raw("Content-Type", field)
    return message


@settings(max_examples=1000)
@given(field=st.one_of(_fields, st.text(max_size=40), st.none()))
@example(field='multipart/mixed; boundary="<abc>"')
@example(field='text/plain; charset="UTF-8 "; charset=latin-1')
@example(field="text/plain; charset*=utf-8''%e2%82%ac")
@example(field='multipart/alternative;\r\n boundary="===============1234=="')
def test_boundary_and_charset_are_what_the_stdlib_reads(field: str | None) -> None:
    message = _message(field)
    assert _outcome(lambda: mime_params.boundary(message)) == _outcome(message.get_boundary)
    assert _outcome(lambda: mime_params.charset(message, "us-ascii")) == _outcome(
        lambda: message.get_content_charset("us-ascii")
    )


def _outcome(read: Callable[[], object]) -> object:
    """What ``read`` returns, or the type of what it raises (the stdlib trips over some RFC 2231
    continuations with a TypeError; such fields go to it, so they still do)."""
    try:
        return read()
    except Exception as exc:
        return type(exc)


def test_fields_as_mail_is_written_are_read_here() -> None:
    message = EmailMessage()
    message.set_content("hello\n")
    message.add_alternative("<p>hello</p>\n", subtype="html")
    fields = [message["Content-Type"], *(part["Content-Type"] for part in message.iter_parts())]
    for field in fields:
        assert _params(_message(str(field))) is not None, field
    assert _params(_message('multipart/mixed;\r\n boundary="===============12=="')) == {
        "boundary": "===============12=="
    }

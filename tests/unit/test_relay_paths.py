"""The relay's fast MAIL/RCPT path parser agrees with aiosmtpd's own wherever it answers."""

import asyncio
from collections.abc import Iterator

import pytest
from aiosmtpd.smtp import SMTP
from hypothesis import example, given
from hypothesis import strategies as st

from posthaste.smtp.relay import RelaySMTP


@pytest.fixture(scope="module")
def session() -> Iterator[RelaySMTP]:
    loop = asyncio.new_event_loop()
    try:
        yield RelaySMTP(object(), set(), False, loop=loop)  # type: ignore[arg-type]
    finally:
        loop.close()


ATOM = st.text("abcXYZ019!#$%&'*+/=?^_`{|}~-", min_size=1, max_size=8)
NASTY = st.text('ab@.<> \t"()\\,:;[]é-', max_size=30)


@st.composite
def paths(draw: st.DrawFn) -> str:
    local = ".".join(draw(st.lists(ATOM, min_size=1, max_size=3)))
    domain = ".".join(draw(st.lists(st.text("ab0-", min_size=1, max_size=6), min_size=1)))
    lead = draw(st.sampled_from(["", " ", "\t"]))
    rest = draw(st.sampled_from(["", " SIZE=100", "  BODY=8BITMIME", "x", ">", " (c) SIZE=1"]))
    return f"{lead}<{local}@{domain}>{rest}"


@given(st.one_of(paths(), NASTY, NASTY.map(lambda s: f"<{s}>")))
@example(".@[")
@example("<")
def test_the_fast_path_agrees_with_aiosmtpd(session: RelaySMTP, arg: str) -> None:
    try:
        expected = SMTP._getaddr(session, arg)
    except (IndexError, ValueError, AttributeError):  # the stdlib's parser fails on some
        expected = (None, None)  # input: "<" (IndexError), ".@[" (AttributeError)
    assert session._getaddr(arg) == expected


def test_plain_paths_and_their_parameters(session: RelaySMTP) -> None:
    assert session._getaddr("<a.b+c@example.com> SIZE=10") == ("a.b+c@example.com", "SIZE=10")
    assert session._getaddr('<"quoted local"@example.com>') == SMTP._getaddr(
        session, '<"quoted local"@example.com>'
    )
    assert session._getaddr("<>") == SMTP._getaddr(session, "<>")
    assert session._getaddr("<") == (None, None)  # aiosmtpd itself raises IndexError here
    long_path = f"<{'x' * 65}@example.com>"
    assert session._getaddr(long_path) == SMTP._getaddr(session, long_path)
    session.local_part_limit = 64
    try:
        assert session._getaddr(long_path) == (None, None) == SMTP._getaddr(session, long_path)
    finally:
        session.local_part_limit = 0

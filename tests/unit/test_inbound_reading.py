"""Reading a received message (``core.inbound``) where it skips the stdlib's parsing: address
fields of the usual shape (``plain_addresses``) and parts that name no file (``_filename``),
each read exactly as ``policy.default`` reads them; anything else left to the stdlib."""

from __future__ import annotations

from email.headerregistry import Address
from email.parser import BytesParser

from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.inbound import POLICY, _filename, plain_addresses, read_inbound

_ATEXT = "ABCXYZabcxyz0189!#$%&'*+/=?^_`{|}~-"
atoms = st.text(_ATEXT, min_size=1, max_size=6)
space = st.sampled_from(["", " ", "  ", "\t", " \t ", "\r\n "])
gap = st.sampled_from([" ", "  ", "\t", " \t", "\r\n "])
dot_atoms = st.lists(atoms, min_size=1, max_size=3).map(".".join)
labels = st.text("abcXYZ019-", min_size=1, max_size=5)
domains = st.lists(labels, min_size=1, max_size=3).map(".".join)


@st.composite
def mailboxes(draw: st.DrawFn) -> str:
    addr = f"{draw(dot_atoms)}@{draw(domains)}"
    shape = draw(st.sampled_from(["bare", "angle", "named"]))
    if shape == "bare":
        return draw(space) + addr + draw(space)
    name = ""
    if shape == "named":
        words = draw(st.lists(atoms, min_size=1, max_size=3))
        name = "".join(w + draw(gap) for w in words[:-1]) + words[-1] + draw(space)
    return f"{draw(space)}{name}<{addr}>{draw(space)}"


def _stdlib(value: str) -> list[tuple[str, str, str, str, str]]:
    header = POLICY.header_fetch_parse("To", value)
    return [_shape(a) for a in header.addresses if a.addr_spec and "@" in a.addr_spec]


def _shape(address: Address) -> tuple[str, str, str, str, str]:
    found = (address.display_name, address.username, address.domain)
    return (*found, address.addr_spec, str(address))


@given(st.lists(mailboxes(), min_size=1, max_size=4).map(",".join))
def test_the_usual_shapes_read_as_the_stdlib_reads_them(value: str) -> None:
    plain = plain_addresses(value)
    if "=?" in value:  # an atom may look like an encoded word: the stdlib's business
        assert plain is None
        return
    assert plain is not None
    assert [_shape(a) for a in plain] == _stdlib(value)


@given(st.text(_ATEXT + ' <>@.,;:"()[]\\\t\r\n=?é', max_size=40))
def test_whatever_it_reads_it_reads_as_the_stdlib_does(value: str) -> None:
    plain = plain_addresses(value)
    if plain is not None:
        assert [_shape(a) for a in plain] == _stdlib(value)


def test_other_shapes_are_left_to_the_stdlib() -> None:
    for value in [
        '"Doe, Jane" <jane@example.com>',  # quoted name
        "=?utf-8?q?Jos=C3=A9?= <jose@example.com>",  # encoded name
        "jane@example.com (Jane)",  # comment
        "Friends: a@example.com, b@example.com;",  # group
        "J. Doe <j@example.com>",  # obsolete phrase
        "a@example.com,",  # empty item
        "Zoë <zoe@example.com>",  # UTF-8
        "jane@[192.0.2.1]",  # address literal
        "",
    ]:
        assert plain_addresses(value) is None, value
    assert plain_addresses(None) is None


def test_a_message_reads_the_same_with_either_path() -> None:
    raw = (
        b"From: Acme <hello@acme.test>\r\nTo: Customer <c@acme.test>, b@acme.test\r\n"
        b'Cc: "Doe, Jane" <jane@acme.test>\r\nReply-To: =?utf-8?q?Zo=C3=AB?= <z@acme.test>\r\n'
        b"Subject: hi\r\n\r\nbody\r\n"
    )
    read = read_inbound(raw, "bounce@else.test")
    assert read.from_address == "Acme <hello@acme.test>"
    assert read.from_lookup == "hello@acme.test"
    assert read.to == ["Customer <c@acme.test>", "b@acme.test"]
    assert read.cc == ['"Doe, Jane" <jane@acme.test>']
    assert read.reply_to == ["Zoë <z@acme.test>"]
    assert read.addresses == ["c@acme.test", "b@acme.test", "jane@acme.test"]


_PARAMETERS = st.sampled_from(
    [
        "",
        "; charset=utf-8",
        '; name="report.pdf"',
        "; NAME=a.txt",
        '; filename="a b.txt"',
        "; FileName*=utf-8''%E2%82%AC.txt",
        "; filename*0=a; filename*1=b",
        "; x=y",
        "; =?utf-8?q?name=3Da?=",
        ';name="=?utf-8?b?w6k=?="',
    ]
)


@given(
    st.sampled_from(["text/plain", "application/pdf", "image/png", None]),
    st.lists(_PARAMETERS, max_size=2).map("".join),
    st.sampled_from(["attachment", "inline", "", None]),
    st.lists(_PARAMETERS, max_size=2).map("".join),
)
def test_a_part_s_filename_is_the_stdlib_s(
    content_type: str | None, type_params: str, disposition: str | None, params: str
) -> None:
    """``_filename`` skips ``get_filename`` only where it would find nothing."""
    headers = ""
    if content_type is not None:
        headers += f"Content-Type: {content_type}{type_params}\r\n"
    if disposition is not None:
        headers += f"Content-Disposition: {disposition}{params}\r\n"
    part = BytesParser(policy=POLICY).parsebytes(f"{headers}\r\nbody\r\n".encode())
    try:
        name = part.get_filename()
        expected = " ".join(name.split()) if name else None
    except (ValueError, TypeError, LookupError):
        expected = None
    assert _filename(part) == expected

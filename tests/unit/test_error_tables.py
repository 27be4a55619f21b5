"""Every error of the tree maps in both tables: HTTP (api/errors.py) and SMTP (smtp/replies.py).

The tree is walked, not listed: a new error class without a mapping fails here. A grouping
class (one with subclasses and no ``name`` of its own, such as ``AuthError``) is never raised
and is checked through its subclasses. A subclass that keeps its parent's ``name`` (such as
``RecipientSuppressed``) maps through the parent in both tables, unless it has its own reply.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from posthaste import errors
from posthaste.api.errors import HTTP_STATUS
from posthaste.smtp.replies import INTERNAL, REPLIES, Reply


def tree(root: type[Any]) -> Iterator[type[Any]]:
    for cls in root.__subclasses__():
        yield cls
        yield from tree(cls)


def unmapped(
    root: type[Any], http: Mapping[str, int], smtp: Mapping[type[Exception], Reply]
) -> list[str]:
    """What is wrong with each class below ``root`` (empty: every class maps in both)."""
    found: list[str] = []
    for cls in tree(root):
        named_by = next(c for c in cls.__mro__ if "name" in vars(c))
        if cls.__subclasses__() and named_by is not cls:
            continue  # a grouping
        name: str = cls.name
        if named_by is root:
            found.append(f"{cls.__name__}: no name of its own (would be {name!r})")
        elif name not in http:
            found.append(f"{cls.__name__}: {name!r} has no HTTP status")
        reply = next((smtp[c] for c in cls.__mro__ if c in smtp), None)
        if reply is None:
            found.append(f"{cls.__name__}: no SMTP reply")
        elif reply is INTERNAL and http.get(name, 500) < 500:
            found.append(f"{cls.__name__}: a client error answered as a server fault (451)")
    return found


def test_every_error_maps_to_http_and_smtp() -> None:
    assert unmapped(errors.PosthasteError, HTTP_STATUS, REPLIES) == []


def test_every_http_name_belongs_to_an_error() -> None:
    names = {cls.name for cls in tree(errors.PosthasteError)}
    assert set(HTTP_STATUS) == names


def test_a_new_error_without_mappings_is_caught() -> None:
    class Root(Exception):
        name = "internal_server_error"

    class Mapped(Root):
        name = "mapped"

    class Group(Root):
        pass

    class Unnamed(Group):
        pass

    class Unknown(Root):
        name = "unknown"

    class Narrower(Mapped):
        pass

    replies: dict[type[Exception], Reply] = {Mapped: Reply(550, "5.7.1", "No"), Unknown: INTERNAL}
    found = unmapped(Root, {"mapped": 403, "unknown": 400}, replies)
    assert sorted(found) == [
        "Unknown: a client error answered as a server fault (451)",
        "Unnamed: no SMTP reply",
        "Unnamed: no name of its own (would be 'internal_server_error')",
    ]
    assert Narrower.name == "mapped"  # maps through its parent in both tables

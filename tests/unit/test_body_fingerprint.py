"""The idempotency fingerprint, fed to the hash piece by piece, is the hash of the body as
``orjson.dumps(body, option=OPT_SORT_KEYS)`` writes it (the fingerprints kept before)."""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from posthaste.core.idempotency import body_fingerprint

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=12,
)


def whole(body: Any) -> str:
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


@given(json_values)
def test_the_fingerprint_is_the_hash_of_the_sorted_document(body: Any) -> None:
    assert body_fingerprint(body) == whole(body)


def test_long_strings_and_deep_nesting_hash_as_written_whole() -> None:
    text = 'é"\\\n😀/' * 40_000 + "x" * 70_000
    deep: Any = {"z": text, "a": [text]}
    for _ in range(100):
        deep = [deep, {"b": 1.5, "a": None}]
    assert body_fingerprint(deep) == whole(deep)

"""The streamed full-set list: valid JSON in bounded chunks, errors before the first byte."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from posthaste.api.streamed import CHUNK_BYTES, streamed_listing
from posthaste.errors import ServiceUnavailable


async def records(count: int) -> AsyncIterator[dict[str, Any]]:
    for number in range(count):
        yield {"id": number, "html": "x" * 1000}


async def body_chunks(count: int) -> list[bytes]:
    response = await streamed_listing(records(count))
    assert response.media_type == "application/json"
    return [
        chunk if isinstance(chunk, bytes) else chunk.encode()
        async for chunk in response.body_iterator
    ]


@pytest.mark.parametrize("count", [0, 1, 3, 500])
async def test_the_chunks_join_into_the_list(count: int) -> None:
    chunks = await body_chunks(count)
    listed = orjson.loads(b"".join(chunks))
    assert listed["object"] == "list" and [r["id"] for r in listed["data"]] == list(range(count))


async def test_chunks_stay_bounded() -> None:
    chunks = await body_chunks(500)
    assert len(chunks) > 5 and max(len(c) for c in chunks) < CHUNK_BYTES + 2000


async def test_a_failing_query_raises_before_answering() -> None:
    async def broken() -> AsyncIterator[dict[str, Any]]:
        raise ServiceUnavailable()
        yield {}

    with pytest.raises(ServiceUnavailable):
        await streamed_listing(broken())

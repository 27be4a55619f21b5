"""A full-set list (``{"object": "list", "data": [...]}``) streamed in chunks, in flat memory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.responses import StreamingResponse

CHUNK_BYTES = 64 * 1024


async def streamed_listing(
    records: AsyncIterator[dict[str, Any]], *, has_more: bool | None = None
) -> StreamingResponse:
    """Encode records as they arrive. The first record is awaited before answering, so a
    failure to query (the database down, say) still answers with a proper error status.
    ``has_more`` (Resend's paging field) is written after ``data`` when given."""
    tail = b"]}" if has_more is None else b'],"has_more":' + orjson.dumps(has_more) + b"}"
    chunks = _encode(records, tail)
    first = await anext(chunks)
    return StreamingResponse(_prepend(first, chunks), media_type="application/json")


async def _encode(records: AsyncIterator[dict[str, Any]], tail: bytes) -> AsyncIterator[bytes]:
    buffer = bytearray(b'{"object":"list","data":[')
    separator = b""
    async for record in records:
        buffer += separator + orjson.dumps(record)
        separator = b","
        if len(buffer) >= CHUNK_BYTES:
            yield bytes(buffer)
            buffer.clear()
    buffer += tail
    yield bytes(buffer)


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async for chunk in rest:
        yield chunk

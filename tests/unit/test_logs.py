"""JSON log lines: one object per line, structured fields at the top level."""

from __future__ import annotations

import io
import logging

import orjson

from posthaste.logs import JsonFormatter


def test_log_line_is_one_json_object_with_fields() -> None:
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("posthaste.test.logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        logger.info(
            "%s %s", "GET", "/emails", extra={"fields": {"status": 200, "request_id": "r1"}}
        )
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("failed\nline two")
    finally:
        logger.removeHandler(handler)
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (orjson.loads(line) for line in lines)
    assert first["message"] == "GET /emails" and first["status"] == 200
    assert first["request_id"] == "r1" and first["level"] == "info"
    assert first["time"].endswith("+00:00")
    assert second["message"] == "failed\nline two" and "ValueError: boom" in second["exception"]

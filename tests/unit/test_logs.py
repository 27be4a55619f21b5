"""JSON log lines: one object per line, structured fields at the top level."""

from __future__ import annotations

import io
import logging

import orjson

from posthaste.logs import EMAIL_ID, SESSION_ID, JsonFormatter, logged_with


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


def test_context_ids_land_on_the_lines_logged_within_them_only() -> None:
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("posthaste.test.context")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        with logged_with(SESSION_ID, "s1"), logged_with(EMAIL_ID, "e1"):
            logger.info("within")
            with logged_with(EMAIL_ID, "e2"):
                logger.info("nested")
            logger.info("own field wins", extra={"fields": {"email_id": "e9"}})
        logger.info("after")
    finally:
        logger.removeHandler(handler)
    within, nested, own, after = (orjson.loads(line) for line in buffer.getvalue().splitlines())
    assert (within["session_id"], within["email_id"]) == ("s1", "e1")
    assert (nested["session_id"], nested["email_id"]) == ("s1", "e2")
    assert own["email_id"] == "e9"
    assert not {"session_id", "email_id", "request_id"} & set(after)

"""A database that cannot be reached is 503 (``ServiceUnavailable``), asyncpg's own errors
included: asyncpg is imported lazily (``storage/database.py``), its errors matched once loaded."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy.exc import DBAPIError

from posthaste.errors import ServiceUnavailable
from posthaste.storage.database import _translate_db_errors


@pytest.mark.parametrize(
    "error",
    [
        asyncpg.CannotConnectNowError("the database system is starting up"),
        asyncpg.exceptions.AdminShutdownError("terminating connection"),
        asyncpg.exceptions.TooManyConnectionsError("too many clients"),
        ConnectionRefusedError(111, "refused"),
    ],
)
async def test_an_unreachable_database_is_unavailable(error: Exception) -> None:
    with pytest.raises(ServiceUnavailable):
        async with _translate_db_errors():
            raise error


async def test_wrapped_by_sqlalchemy_too() -> None:
    wrapped = DBAPIError("SELECT 1", None, asyncpg.exceptions.CrashShutdownError("crash"))
    with pytest.raises(ServiceUnavailable):
        async with _translate_db_errors():
            raise wrapped


async def test_a_statement_error_stays_what_it_is() -> None:
    with pytest.raises(asyncpg.exceptions.UniqueViolationError):
        async with _translate_db_errors():
            raise asyncpg.exceptions.UniqueViolationError("duplicate key")

"""The metadata every table belongs to, and the column types shared by all of them."""

from __future__ import annotations

from sqlalchemy import BigInteger, MetaData, String

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

ID = String(36)
MS = BigInteger

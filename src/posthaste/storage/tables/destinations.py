"""Deliverability: the receiving destinations' throttle and the replies behind it; the source
addresses of IP pools and their daily counts."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
)

from posthaste.storage.tables._base import ID, MS, metadata

# Machine-wide, not team-owned: the throttle of each receiving destination (the registered
# domain of its primary MX host), shared by every worker of the fleet (core/destinations.py).
destinations = Table(
    "destinations",
    metadata,
    Column("name", String(253), primary_key=True),
    Column("mx_hosts", JSON, nullable=False),
    # The current pace: microseconds between two messages (the rate, inverted).
    Column("interval_us", BigInteger, nullable=False),
    # The earliest time (epoch microseconds) the next message may leave.
    Column("next_slot_us", BigInteger, nullable=False),
    Column("suspended_until", MS, nullable=False),
    Column("strikes", Integer, nullable=False),  # "slow down" replies in a row
    # The pace that was too fast at the last "slow down" (0: none yet): climb back to near it
    # quickly, then probe above it slowly.
    Column("ceiling_us", BigInteger, nullable=False),
    Column("changed_at", MS, nullable=False),  # the last change of the pace
    Column("updated_at", MS, nullable=False),
    # The pace the fleet actually took (migration 0020): messages sent since ``window_us``
    # (epoch µs), and the mean interval between them over the last window of a second or more
    # (0: unknown). A "slow down" halves this rate when it is below ``interval_us``'s.
    Column("window_us", BigInteger, nullable=False, server_default="0"),
    Column("window_slots", BigInteger, nullable=False, server_default="0"),
    Column("used_interval_us", BigInteger, nullable=False, server_default="0"),
    # The latest turn (epoch µs) given to held mail (migration 0022): the next held mail comes
    # back a step after it, so held mail returns spread at the destination's pace.
    Column("held_until_us", BigInteger, nullable=False, server_default="0"),
)

# Machine-wide, not team-owned: each source address of an IP pool (core/pools.py) with the
# first UTC day it sent (its warm-up's day 0) and the messages it took on its latest day.
pool_addresses = Table(
    "pool_addresses",
    metadata,
    Column("address", String(45), primary_key=True),
    Column("first_day", Integer, nullable=False),  # UTC days since 1970-01-01
    Column("day", Integer, nullable=False),  # the day ``sent`` counts
    Column("sent", Integer, nullable=False),
    Column("updated_at", MS, nullable=False),
)

# The replies behind the throttle's decisions, the newest few per destination.
destination_replies = Table(
    "destination_replies",
    metadata,
    Column("id", ID, primary_key=True),
    Column(
        "destination",
        String(253),
        ForeignKey("destinations.name", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("at", MS, nullable=False),
    Column("reply", Text, nullable=False),
    Column("decision", Text, nullable=False),
    Index("ix_destination_replies_destination_at", "destination", "at"),
)

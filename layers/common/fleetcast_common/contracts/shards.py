"""Customers' data between the jobs: many customers per object, never one object each.

Processing keeps every customer's history in one of :data:`HISTORY_SHARDS` history shards
(``history/shard-0042-of-0064.parquet``), chosen by a stable hash of the customer id, and
rewrites only the shards an upload touches. It writes a run's training input as
:func:`train_part_count` parts (``runs/<run>/train/part-00003.parquet``): a multiple of
the training instances, so ``ShardedByS3Key`` gives every instance the same number of
parts, with customers dealt round-robin so the parts are within a customer of even.

Both kinds of object are Parquet files of :data:`COLUMNS`, sorted by customer then time,
each customer's rows together. Customer ids pass the allow-list before they reach a file;
readers check them again.

Stores written before shards keep one ``history/{customer_id}.csv`` per customer. Those
still read: a customer found in its shard is read from the shard only, and an old file
of a customer not yet in its shard is read until an upload moves the customer there.
"""

from __future__ import annotations

import re
import zlib

# Changing the count moves customers between shards: the count is part of every name, and
# a store written with another count is refused rather than half read (see history.py).
HISTORY_SHARDS = 64
# Training parts per training instance: more than one so a slow part does not hold up an
# instance alone, few enough that a run writes a handful of objects per instance.
TRAIN_PARTS_PER_INSTANCE = 4
SHARD_SUFFIX = ".parquet"

COLUMNS = ("customer_id", "ds", "y")
# ds: timestamp[us] without a zone (UTC), y: float64, customer_id: string.

_HISTORY_SHARD = re.compile(r"shard-(\d{4})-of-(\d{4})\.parquet")


def history_shard_of(customer_id: str, shards: int = HISTORY_SHARDS) -> int:
    """The history shard a customer lives in: CRC-32 of its id, so every process, language
    and release agrees without a lookup table."""
    return zlib.crc32(customer_id.encode()) % shards


def history_shard_name(index: int, shards: int = HISTORY_SHARDS) -> str:
    return f"shard-{index:04d}-of-{shards:04d}{SHARD_SUFFIX}"


def parse_history_shard_name(name: str) -> tuple[int, int] | None:
    """``(index, shards)`` of a history shard's file name; None for any other name."""
    match = _HISTORY_SHARD.fullmatch(name)
    return None if match is None else (int(match[1]), int(match[2]))


def train_part_count(instances: int, customers: int) -> int:
    """Parts for a run: :data:`TRAIN_PARTS_PER_INSTANCE` per instance, never more than the
    customers (a part is never empty)."""
    return max(1, min(customers, instances * TRAIN_PARTS_PER_INSTANCE))


def train_part_name(index: int) -> str:
    return f"part-{index:05d}{SHARD_SUFFIX}"

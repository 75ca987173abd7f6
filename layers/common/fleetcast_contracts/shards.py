"""Customers' data between the jobs: many customers per object, never one object each.

Processing keeps every customer's history in one of :data:`HISTORY_SHARDS` history shards
(``history/shard-0042-of-0064.parquet``), chosen by a stable hash of the customer id, and
rewrites only the shards an upload touches. It writes a run's training input as
:func:`train_part_count` parts (``runs/<run>/train/part-00003.parquet``): a multiple of
the training instances, so ``ShardedByS3Key`` gives every instance the same number of
parts, with customers dealt round-robin so the parts are within a customer of even.

Both kinds of object are Parquet files with each customer's rows together, in time order
(a history shard also sorted by customer id; a training part by id within each history
shard's customers, shard after shard). Customer ids pass the allow-list before they reach
a file; readers check them again.

A **history shard** keeps readings, not totals (:data:`HISTORY_COLUMNS`): one row per
reading as it was uploaded, so an upload merges reading by reading. A reading of the same
customer and timestamp (to the millisecond) replaces the stored one; any other reading is
added, whatever period it falls in. A day cut over two files (at local midnight, at the
hour, where a transfer broke) is then whole once both have arrived.

A **training part** keeps one row per customer and period (:data:`TRAIN_COLUMNS`): the
period's total, how many readings made it and the customer's reading interval, so that a
period with fewer readings than the interval implies is known to be incomplete rather
than taken for low consumption.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

# Changing the count moves customers between shards: the count is part of every name, and
# a store written with another count is refused rather than half read (processing's
# shards.py).
HISTORY_SHARDS = 64
# Training parts per training instance: more than one so a slow part does not hold up an
# instance alone, few enough that a run writes a handful of objects per instance.
TRAIN_PARTS_PER_INSTANCE = 4
SHARD_SUFFIX = ".parquet"

# A history shard: customer_id (string), ts (timestamp[us] without a zone, UTC: the
# reading's instant), y (float64: the reading), sorted by customer_id then ts, one row per
# customer and instant.
HISTORY_COLUMNS = ("customer_id", "ts", "y")

# A training part: one row per customer and period, each customer's rows together by ds.
#   customer_id  string
#   ds           timestamp[us] without a zone (UTC): the period's start (a UTC day, or an
#                hour for hourly models)
#   y            float64: the total of the customer's stored readings in the period
#   readings     int64: how many readings make that total
#   interval_s   float64: the customer's reading interval in seconds, the same on each of
#                its rows: the median gap between consecutive stored readings (over its
#                whole history, so missing readings, which make a few long gaps, do not
#                move it); null for a customer with a single reading.
#   use          string: what training is to do with the period (USES); the row is kept
#                whatever it says, so every reading stays accounted for
TRAIN_COLUMNS = ("customer_id", "ds", "y", "readings", "interval_s", "use")

# ``use``, decided by processing per customer and period (thresholds: the job's
# FLEETCAST_INCOMPLETE_BELOW and FLEETCAST_ZERO_RUN_DAYS, contracts.processing.JobLimits):
# - ok: fit it.
# - incomplete: its readings cover less than FLEETCAST_INCOMPLETE_BELOW (0.9) of its
#   time, each reading covering the time since its meter's previous one, up to a limit
#   (fleetcast_processing.usage says which). Its total is too low because readings are
#   missing, not because less was used: a missing period for fitting, not a low one. A
#   customer without an interval (one reading) has none. Every period of a meter whose
#   interval is more than COARSER_THAN_PERIOD periods (daily readings, hourly periods) is
#   incomplete: each reading totals a stretch longer than the period it falls in.
# - inactive: zero consumption while the meter was not in use: the leading run of zero
#   periods (before the customer was connected), and any later run of zero periods that
#   spans at least FLEETCAST_ZERO_RUN_DAYS (7) days, inside the history or at its end.
#   Not consumption of nothing; not fitted. Inactive wins over incomplete.
# Model families fit the ok periods only, treating the others as gaps: none of them is
# filled in or invented; the stored readings keep all of them.
USE_OK = "ok"
USE_INCOMPLETE = "incomplete"
USE_INACTIVE = "inactive"
USES = (USE_OK, USE_INCOMPLETE, USE_INACTIVE)
# A meter whose usual interval is longer than this many periods reads less often than the
# periods (a jittered meter's median gap is its interval to a few seconds).
COARSER_THAN_PERIOD = 1.1


def reads_less_often(interval_s: Any, period_seconds: float) -> Any:
    """Whether a meter of reading interval ``interval_s`` (seconds; a number or an array of
    them, NaN: one reading, never) reads less often than periods of ``period_seconds``:
    processing marks all its periods incomplete, and training says why."""
    return interval_s > COARSER_THAN_PERIOD * period_seconds


# Every training part's Parquet key-value metadata: the run's last period, the latest ``ds``
# of any customer in the run's training input (ISO 8601, UTC, no zone), the same in every
# part. Training exports each customer's forecast from the period after its own last one
# through ForecastExportDays after this one, so every customer's export covers the run's
# horizon, a customer whose readings lag the others' included (Amazon Forecast's export
# starts every item at the dataset's end too).
RUN_LAST_PERIOD_KEY = "fleetcast.run_last_period"

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

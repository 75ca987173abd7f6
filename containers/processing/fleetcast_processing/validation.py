"""The rules a reading must pass, applied to a whole block of rows at once.

Every function here takes Arrow string arrays exactly as they were read and returns numpy
arrays; nothing loops over rows in Python. A row fails on the first rule it breaks, in
the order :func:`check_rows` lists them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from fleetcast_contracts.ids import is_valid_customer_id
from fleetcast_contracts.processing import REQUIRED_COLUMNS, RejectReason

EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
FUTURE_TOLERANCE = timedelta(days=1)
IMPLAUSIBLE_CONSUMPTION = 1e9
US_PER_SECOND = 1_000_000

# Reason codes as small integers, 0 meaning "accepted"; REASONS[code - 1] is the reason.
REASONS: tuple[RejectReason, ...] = tuple(RejectReason)
ACCEPTED = 0


def reason_code(reason: RejectReason) -> int:
    return REASONS.index(reason) + 1


NUMBER_PATTERN = r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"
# A number with a non-zero digit before a negative exponent: if it reads as 0, it is
# smaller than the smallest double (1e-400), not zero, and is not taken as 0.
_NON_ZERO_TIMES_SMALL_POWER = r"^[^eE]*[1-9][^eE]*[eE]\s*-"
_CAST_SLICE = 1 << 16
_SUB_MICROSECOND = r"(\.\d{6})\d+"
_DECIMAL_COMMA = r"^([+-]?\d*),(\d+)$"
# An offset after a time of day: "-01" alone is the day of "2024-01-01", not an offset.
# ISO 8601's reduced precisions "2024-02" and "2024" (with optional spaces and sign).
_MONTH_OR_YEAR = r"^\s*[+-]?\d{4}(-\d{2})?\s*$"
_HAS_OFFSET = re.compile(r"[T ]\d\d.*(Z|[+-]\d\d(:?\d\d)?)$", re.IGNORECASE)


class CustomerCodes:
    """Small integer codes for the valid customer ids of one job, in order of first sight."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self.ids: list[str] = []

    def encode(self, customer_ids: pa.Array) -> npt.NDArray[np.int64]:
        """The code of each id, -1 where the id is not a valid customer id."""
        encoded = pc.dictionary_encode(customer_ids)
        # Validate each distinct id once: a block holds far fewer customers than rows.
        lookup = np.fromiter(
            (self._code(value) for value in encoded.dictionary.to_pylist()),
            dtype=np.int64,
            count=len(encoded.dictionary),
        )
        return lookup[encoded.indices.to_numpy(zero_copy_only=False)]

    def _code(self, customer_id: str) -> int:
        code = self._codes.get(customer_id)
        if code is not None:
            return code
        if not is_valid_customer_id(customer_id):
            return -1
        code = self._codes[customer_id] = len(self.ids)
        self.ids.append(customer_id)
        return code


def _cast_leading(
    raw: pa.Array, convert: Callable[[pa.Array], npt.NDArray[Any]]
) -> tuple[list[npt.NDArray[Any]], int]:
    """Convert ``raw`` with Arrow's all-or-nothing cast, a slice at a time, up to the first
    slice that fails: the converted slices, and how many values they hold.

    A failed cast costs microseconds for every value that does not parse, far more than a
    successful one: trying a slice at a time bounds what one failure costs.
    """
    converted: list[npt.NDArray[Any]] = []
    done = 0
    while done < len(raw):
        piece = raw.slice(done, _CAST_SLICE)
        try:
            converted.append(convert(piece))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            break
        done += len(piece)
    return converted, done


def parse_instants(raw: pa.Array) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """ISO 8601 dates and date-times as UTC microseconds since the epoch, and which parsed.

    Offsets (``Z``, ``+02:00``) are converted to UTC; values without one are taken as UTC.
    A month or a year alone (``2024-02``, ``2024``) is not a reading's time: it does not
    parse (:func:`month_or_year` tells those apart).
    """
    if len(raw) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.bool_)
    # Fast path: timestamps that all share one shape are cast by Arrow. The shape is
    # guessed from the first value.
    first = raw[0].as_py().strip()
    target = pa.timestamp("us", tz="UTC") if _HAS_OFFSET.search(first) else pa.timestamp("us")
    fast, done = _cast_leading(
        raw,
        lambda piece: pc.cast(piece, target).cast(pa.int64()).to_numpy(zero_copy_only=False),
    )
    if done == len(raw):
        return np.concatenate(fast), np.ones(len(raw), dtype=np.bool_)
    slow, valid = _parse_each_instant(raw.slice(done))
    return (
        np.concatenate([*fast, slow]),
        np.concatenate([np.ones(done, dtype=np.bool_), valid]),
    )


def _parse_each_instant(raw: pa.Array) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    # Mixed shapes, offsets or bad values: pandas parses each value on its own.
    # Upper case: ISO 8601 allows "t" and "z", pandas does not.
    trimmed = pc.utf8_upper(pc.utf8_trim_whitespace(raw))
    # Instants are kept to the microsecond. Cut finer fractions first: pandas would parse
    # the whole array in nanoseconds, whose range (1677 to 2262) turns dates such as
    # 9999-12-31 into "not a date" instead of "out of range".
    trimmed = pc.replace_substring_regex(trimmed, _SUB_MICROSECOND, r"\1")
    parsed = pd.to_datetime(trimmed.to_pandas(), format="ISO8601", utc=True, errors="coerce")
    valid = parsed.notna().to_numpy() & ~month_or_year(raw)
    ticks = parsed.array.asi8
    unit = parsed.dt.unit
    if unit == "ns":
        ticks = ticks // 1000
    elif unit != "us":
        ticks = ticks * {"s": US_PER_SECOND, "ms": 1000}[unit]
    return np.where(valid, ticks, 0).astype(np.int64), valid


def month_or_year(raw: pa.Array) -> npt.NDArray[np.bool_]:
    """Which values are a month (``2024-02``) or a year (``2024``) alone."""
    return pc.match_substring_regex(raw, _MONTH_OR_YEAR).to_numpy(zero_copy_only=False)


def parse_consumption(raw: pa.Array, decimal_comma: bool) -> npt.NDArray[np.float64]:
    """Readings as floats; NaN where the value is not a plain finite number.

    ``decimal_comma`` accepts ``12,5`` for 12.5, as semicolon-separated files often write it.
    """
    fast, done = _cast_leading(
        raw, lambda piece: pc.cast(piece, pa.float64()).to_numpy(zero_copy_only=False)
    )
    if done == len(raw):
        return np.concatenate(fast) if fast else np.zeros(0, dtype=np.float64)
    trimmed = pc.utf8_trim_whitespace(raw.slice(done))
    if decimal_comma:
        trimmed = pc.replace_substring_regex(trimmed, _DECIMAL_COMMA, r"\1.\2")
    numeric = pc.match_substring_regex(trimmed, NUMBER_PATTERN)
    values = pc.cast(pc.if_else(numeric, trimmed, pa.scalar("nan")), pa.float64())
    return np.concatenate([*fast, values.to_numpy(zero_copy_only=False)])


def underflowed(raw: pa.Array, values: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    """Which readings were read as 0 though they are not zero (``1e-400``: too small for
    a double): a reading that cannot be stored as written is rejected, not rounded."""
    zero = values == 0
    if not zero.any():
        return zero
    small = pc.fill_null(pc.match_substring_regex(raw, _NON_ZERO_TIMES_SMALL_POWER), False)
    return zero & small.to_numpy(zero_copy_only=False)


def repeated_header(timestamps: pa.Array, consumption: pa.Array) -> npt.NDArray[np.bool_]:
    """Which rows are the header line again (their timestamp and consumption fields are
    those columns' names)."""
    _, timestamp_name, consumption_name = REQUIRED_COLUMNS
    named = [
        pc.fill_null(pc.equal(pc.utf8_lower(pc.utf8_trim_whitespace(raw)), name), False)
        for raw, name in ((timestamps, timestamp_name), (consumption, consumption_name))
    ]
    return pc.and_(*named).to_numpy(zero_copy_only=False)


@dataclass(frozen=True)
class CheckedBlock:
    """A block's parsed values and, per row, 0 (accepted) or the code of the rule it broke."""

    codes: npt.NDArray[np.int64]
    instants: npt.NDArray[np.int64]
    consumption: npt.NDArray[np.float64]
    reasons: npt.NDArray[np.int8]


def check_rows(
    codes: npt.NDArray[np.int64],
    timestamps: pa.Array,
    consumption: pa.Array,
    now: datetime,
    decimal_comma: bool = False,
) -> CheckedBlock:
    """Apply every rule except duplicates (which need the rows of earlier blocks)."""
    instants, parsed = parse_instants(timestamps)
    values = parse_consumption(consumption, decimal_comma)
    earliest, latest = _instant(EARLIEST), _instant(now + FUTURE_TOLERANCE)
    coarse = np.zeros(len(parsed), dtype=np.bool_)
    header = np.zeros(len(parsed), dtype=np.bool_)
    if not parsed.all():
        coarse = month_or_year(timestamps)
        header = repeated_header(timestamps, consumption)
    with np.errstate(invalid="ignore"):
        # Each rule and the rows that break it, in the order a row is tested.
        rules = (
            (RejectReason.REPEATED_HEADER, header),
            (RejectReason.INVALID_CUSTOMER_ID, codes < 0),
            (RejectReason.MONTH_OR_YEAR_TIMESTAMP, coarse),
            (RejectReason.INVALID_TIMESTAMP, ~parsed),
            (RejectReason.OUT_OF_RANGE_TIMESTAMP, (instants < earliest) | (instants > latest)),
            (
                RejectReason.INVALID_CONSUMPTION,
                ~np.isfinite(values) | underflowed(consumption, values),
            ),
            (RejectReason.NEGATIVE_CONSUMPTION, values < 0),
            (RejectReason.IMPLAUSIBLE_CONSUMPTION, values > IMPLAUSIBLE_CONSUMPTION),
        )
    reasons = np.select(
        [broken for _, broken in rules], [reason_code(rule) for rule, _ in rules], ACCEPTED
    )
    return CheckedBlock(codes, instants, values, reasons.astype(np.int8))


def _instant(moment: datetime) -> int:
    return int(moment.astimezone(UTC).timestamp() * US_PER_SECOND)

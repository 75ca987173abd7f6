"""The processing container's building blocks: rules, duplicates, totals, merge, file names."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.processing import RejectReason
from fleetcast_processing.aggregate import period_labels, period_totals
from fleetcast_processing.duplicates import _EPOCH_2000_US, deduplicate, reading_keys
from fleetcast_processing.history import Readings, merge_readings, reading_intervals
from fleetcast_processing.source import _record_boundary
from fleetcast_processing.validation import (
    CustomerCodes,
    check_rows,
    parse_consumption,
    parse_instants,
    reason_code,
)

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
US = 1_000_000


def _utc_us(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * US)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2024-01-31", "2024-01-31T00:00:00+00:00"),
        ("2024-01-31T13:45:00", "2024-01-31T13:45:00+00:00"),
        ("2024-01-31 13:45:00", "2024-01-31T13:45:00+00:00"),
        ("2024-01-31T13:45:00Z", "2024-01-31T13:45:00+00:00"),
        ("2024-01-31T13:45:00+02:00", "2024-01-31T11:45:00+00:00"),
        ("2024-01-31T23:45:00-05:00", "2024-02-01T04:45:00+00:00"),
        ("2024-01-31T13:45:00.250Z", "2024-01-31T13:45:00.250000+00:00"),
        (" 2024-01-31 ", "2024-01-31T00:00:00+00:00"),
        ("2024-01-31t13:45:00z", "2024-01-31T13:45:00+00:00"),
        ("20240131T134500Z", "2024-01-31T13:45:00+00:00"),
    ],
)
def test_iso_timestamps_parse_to_utc(raw: str, expected: str) -> None:
    # Given one ISO 8601 value, alone and after values of another shape (the slow path)
    for values in ([raw], ["2024-01-01T00:00:00Z", raw], [raw, "2024-01-01"]):
        # When it is parsed
        instants, parsed = parse_instants(pa.array(values))

        # Then it is the expected UTC instant
        assert parsed.all()
        assert instants[values.index(raw)] == _utc_us(expected)


@pytest.mark.parametrize(
    "raw", ["", "yesterday", "2024-13-01", "2024-02-30", "31/01/2024", "2024-01-31T25:00:00", "12"]
)
def test_non_iso_timestamps_do_not_parse(raw: str) -> None:
    # Given a value that is not an ISO 8601 date or date-time, among good ones
    values = pa.array(["2024-01-01", raw, "2024-01-02"])

    # When parsed
    _, parsed = parse_instants(values)

    # Then only it fails
    assert parsed.tolist() == [True, False, True]


@pytest.mark.parametrize(
    ("raw", "decimal_comma", "expected"),
    [
        ("12.5", False, 12.5),
        ("1e3", False, 1000.0),
        (" 7 ", False, 7.0),
        ("-3", False, -3.0),
        ("12,5", True, 12.5),
        ("12,5", False, None),
        ("1,234.5", True, None),
        ("", False, None),
        ("abc", False, None),
        ("NaN", False, None),
        ("inf", False, None),
        ("-Infinity", False, None),
        ("0x10", False, None),
        ("1e999", False, None),
    ],
)
def test_consumption_must_be_a_finite_number(
    raw: str, decimal_comma: bool, expected: float | None
) -> None:
    # Given a consumption value among good ones
    values = pa.array(["1", raw, "2"])

    # When it is parsed
    parsed = parse_consumption(values, decimal_comma)

    # Then it is the number, or not finite when it is not a plain number
    assert parsed[0] == 1.0 and parsed[2] == 2.0
    if expected is None:
        assert not np.isfinite(parsed[1])
    else:
        assert parsed[1] == expected


def test_customer_codes_validate_each_id_and_keep_codes_stable() -> None:
    # Given ids over two blocks, valid and not
    codes = CustomerCodes()

    # When they are encoded
    first = codes.encode(pa.array(["007", "7", "../x", "007", "a" * 64, "a" * 65]))
    second = codes.encode(pa.array(["7", "new", "", "cust 1"]))

    # Then valid ids keep one code across blocks, invalid ones are -1, "007" is not "7"
    assert first.tolist() == [0, 1, -1, 0, 2, -1]
    assert second.tolist() == [1, 3, -1, -1]
    assert codes.ids == ["007", "7", "a" * 64, "new"]


@pytest.mark.parametrize("raw", ["2024-02", "2024", " 2024-02 ", "+2024"])
def test_a_month_or_a_year_is_not_a_reading_time(raw: str) -> None:
    # Given a timestamp that names a month or a year, not a time
    ids = CustomerCodes().encode(pa.array(["ok", "ok"]))

    # When checked beside a proper date
    checked = check_rows(ids, pa.array([raw, "2024-02-01"]), pa.array(["1", "1"]), NOW)

    # Then it is rejected as a month or a year, and the date is not
    assert checked.reasons.tolist() == [reason_code(RejectReason.MONTH_OR_YEAR_TIMESTAMP), 0]
    assert not parse_instants(pa.array([raw]))[1].any()


def test_rules_apply_in_order_and_first_broken_rule_wins() -> None:
    # Given rows breaking one or more rules
    ids = CustomerCodes().encode(pa.array(["ok", "bad id", "ok", "ok", "ok", "ok", "ok", "ok"]))
    timestamps = pa.array(
        [
            "2024-01-01",
            "nope",  # bad id and bad timestamp: the id is reported
            "1999-12-31",
            "2024-06-02T11:59:59Z",  # within a day of NOW
            "2024-06-02T12:00:01Z",  # beyond a day
            "2024-01-01",
            "2024-01-01",
            "2024-01-01",
        ]
    )
    consumption = pa.array(["1", "1", "1", "1", "1", "-0.5", "1000000000.5", "x"])

    # When checked
    checked = check_rows(ids, timestamps, consumption, NOW)

    # Then each row carries the first rule it breaks
    assert checked.reasons.tolist() == [
        0,
        reason_code(RejectReason.INVALID_CUSTOMER_ID),
        reason_code(RejectReason.OUT_OF_RANGE_TIMESTAMP),
        0,
        reason_code(RejectReason.OUT_OF_RANGE_TIMESTAMP),
        reason_code(RejectReason.NEGATIVE_CONSUMPTION),
        reason_code(RejectReason.IMPLAUSIBLE_CONSUMPTION),
        reason_code(RejectReason.INVALID_CONSUMPTION),
    ]


def test_a_reading_too_small_to_store_and_a_repeated_header_are_rejected_saying_so() -> None:
    # Given a file joined from two (the second's header mid-file), and readings written
    # with exponents: one too small for a double (it would be read as 0), and true zeros
    customers = CustomerCodes()
    ids = customers.encode(pa.array(["7", "customer_id", "7", "7", "7"]))
    timestamps = pa.array(["2024-01-01", " Timestamp ", "2024-01-02", "2024-01-03", "2024-01-04"])
    consumption = pa.array(["1e-400", "CONSUMPTION", "0e-5", "0.0", "2.5e-300"])
    # When checked
    checked = check_rows(ids, timestamps, consumption, NOW)
    # Then the tiny reading is invalid, not 0; the header line is a repeated header, not
    # a bad timestamp; zeros and small numbers a double holds are taken
    assert checked.reasons.tolist() == [
        reason_code(RejectReason.INVALID_CONSUMPTION),
        reason_code(RejectReason.REPEATED_HEADER),
        0,
        0,
        0,
    ]
    assert checked.consumption[4] == 2.5e-300


@settings(max_examples=60, deadline=None)
@given(readings=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), max_size=80))
def test_duplicates_match_a_plain_set(readings: list[tuple[int, int]]) -> None:
    # Given (customer, instant) readings on lines 2.., in file order
    codes = np.array([customer for customer, _ in readings], dtype=np.int64)
    instants = np.array(
        [_utc_us("2024-01-01T00:00:00+00:00") + second * US for _, second in readings],
        dtype=np.int64,
    )
    lines = np.arange(2, len(readings) + 2, dtype=np.int64)

    # When they are deduplicated
    found = deduplicate(codes, instants, lines)

    # Then the repeats are exactly those a set finds, each naming the first line, and the
    # rows kept are the first of each reading, in (customer, instant) order
    first_line: dict[tuple[int, int], int] = {}
    expected_repeats: dict[int, int] = {}
    for line, reading in zip(lines.tolist(), readings, strict=True):
        if reading in first_line:
            expected_repeats[line] = first_line[reading]
        first_line.setdefault(reading, line)
    repeats = dict(zip(lines[found.repeated].tolist(), found.original_line.tolist(), strict=True))
    assert repeats == expected_repeats
    assert lines[found.kept].tolist() == [first_line[key] for key in sorted(first_line)]


def test_period_totals_match_a_plain_sum_over_unsorted_readings() -> None:
    # Given readings in random order
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 5, 2000)
    instants = _utc_us("2024-01-01T00:00:00+00:00") + rng.integers(0, 10 * 86_400, 2000) * US
    values = rng.uniform(0, 10, 2000)

    # When they are totalled per day
    result, rows = period_totals(codes, instants, values, Frequency("D"))

    # Then the totals equal a plain per-(customer, day) sum, sorted by customer then day,
    # each with the count of its readings
    expected: dict[tuple[int, int], list[float]] = {}
    for code, instant, value in zip(codes, instants, values, strict=True):
        key = (int(code), int(instant // (86_400 * US)))
        expected.setdefault(key, []).append(float(value))
    keys = list(zip(result.codes.tolist(), result.periods.tolist(), strict=True))
    assert keys == sorted(expected)
    assert result.values.tolist() == pytest.approx([sum(expected[key]) for key in keys])
    assert rows.tolist() == [len(expected[key]) for key in keys]


def test_frequency_labels() -> None:
    # Given days and hours since the epoch
    day = _utc_us("2024-02-29T00:00:00+00:00") // (86_400 * US)

    # When formatted
    days = period_labels(np.array([day, day + 1, day], dtype=np.int64), Frequency.DAILY)
    hours = period_labels(np.array([day * 24 + 23], dtype=np.int64), Frequency.HOURLY)

    # Then they read as ds values
    assert days.to_pylist() == ["2024-02-29", "2024-03-01", "2024-02-29"]
    assert hours.to_pylist() == ["2024-02-29T23:00:00"]
    with pytest.raises(ValueError, match="frequency must be one of D, H, not 'W'"):
        Frequency.parse("W")


def _readings(rows: dict[tuple[int, int], float]) -> Readings:
    ranks = np.array([rank for rank, _ in sorted(rows)], dtype=np.int64)
    instants = np.array([_EPOCH_2000_US + second * US for _, second in sorted(rows)], np.int64)
    values = np.array([rows[key] for key in sorted(rows)], dtype=np.float64)
    return Readings(reading_keys(ranks, instants), ranks, instants, values)


_READINGS = st.dictionaries(
    st.tuples(st.integers(0, 3), st.integers(0, 20)), st.sampled_from([1.0, 2.0]), max_size=40
)


@settings(max_examples=80, deadline=None)
@given(stored=_READINGS, uploaded=_READINGS)
def test_merging_readings_matches_a_plain_dict_update(
    stored: dict[tuple[int, int], float], uploaded: dict[tuple[int, int], float]
) -> None:
    # When two sets of readings are merged
    merged = merge_readings(_readings(stored), _readings(uploaded))

    # Then the result is the stored readings updated with the uploaded ones, sorted
    expected = {**stored, **uploaded}
    assert merged.readings.keys.tolist() == _readings(expected).keys.tolist()
    assert merged.readings.values.tolist() == [expected[key] for key in sorted(expected)]
    # And the replaced and the changed readings are counted, with the values they replaced
    upload_keys = sorted(uploaded)
    replaced = [upload_keys[i] for i in merged.replaced.tolist()]
    assert replaced == [key for key in upload_keys if key in stored]
    changed = [upload_keys[i] for i in merged.changed.tolist()]
    assert changed == [key for key in replaced if stored[key] != uploaded[key]]
    assert merged.stored_values.tolist() == [stored[key] for key in changed]


@settings(max_examples=80, deadline=None)
@given(
    series=st.lists(
        st.lists(st.integers(0, 10_000), min_size=1, max_size=12, unique=True), max_size=6
    )
)
def test_reading_intervals_are_each_customers_median_gap(series: list[list[int]]) -> None:
    # Given customers' reading times (seconds), sorted, one customer after the other
    ranks = np.repeat(np.arange(len(series)), [len(times) for times in series]).astype(np.int64)
    instants = np.array([t * US for times in series for t in sorted(times)], dtype=np.int64)

    # When their intervals are worked out
    intervals = reading_intervals(ranks, instants)

    # Then each is the median of the customer's gaps (NaN for a single reading)
    expected = [np.median(np.diff(sorted(times))) if len(times) > 1 else np.nan for times in series]
    np.testing.assert_allclose(intervals, expected)


@pytest.mark.parametrize(
    ("data", "cut"),
    [
        (b"a,1\nb,2\nc", 8),
        (b"a,1\nb,2\n", 8),
        (b"no newline", 0),
        (b'a,"x\ny",1\nb,2', 10),  # the newline inside quotes is not a boundary
        (b'a,"x""\ny",1\n', 12),  # an escaped quote does not close the value
        (b'a,"x\ny', 5),  # no balanced newline at all (a stray quote?): the last newline
    ],
)
def test_record_boundary_does_not_cut_inside_quotes(data: bytes, cut: int) -> None:
    # Given a block's bytes
    # When the reader looks for where to cut
    # Then it cuts after a newline that is not inside quotes
    assert _record_boundary(data) == cut

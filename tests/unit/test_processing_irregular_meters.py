"""Irregular meters are served like regular ones (issue 39, part 1): a day is complete when
its readings cover it, not when there are enough of them. The meters here are real
half-hourly households of make accuracy's London set, made irregular as smart water and
gas meters are: transmissions missed, their consumption carried into the next reading, and
timestamps jittered."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from shard_helpers import parts_in
from test_processing import HEADER, Job

from bench.accuracy.datasets import DATA_SETS
from fleetcast_contracts.opt_ml import OPT_ML_ENV

CUSTOMERS = 4
DAYS = 120
MISSED = 0.2  # a fifth of the transmissions never arrive
HALF_HOUR = pd.Timedelta(minutes=30)


@pytest.fixture(scope="module")
def regular() -> pd.DataFrame:
    """Four real households' first DAYS days of half-hourly readings, as published."""
    london = next(data_set for data_set in DATA_SETS if data_set.key == "london-lcl")
    readings = pq.read_table(london.path).to_pandas()
    readings["customer_id"] = readings["customer_id"].astype(str)
    chosen = sorted(readings["customer_id"].unique())[10 : 10 + CUSTOMERS]
    rows = readings[readings["customer_id"].isin(chosen)]
    start = rows["timestamp"].min().normalize()
    return rows[rows["timestamp"] < start + pd.Timedelta(days=DAYS)].reset_index(drop=True)


def irregular(regular: pd.DataFrame, seed: int = 39) -> tuple[pd.DataFrame, pd.Series]:
    """``regular`` as a meter that misses a fifth of its transmissions (the next reading
    that arrives carries their consumption) and sends each reading up to 12 minutes late;
    and, per customer and day, the consumption carried out of the day into the next."""
    rng = np.random.default_rng(seed)
    rows = regular.sort_values(["customer_id", "timestamp"]).reset_index(drop=True)
    sent = rng.random(len(rows)) >= MISSED
    last_of_customer = rows["customer_id"].ne(rows["customer_id"].shift(-1))
    sent |= last_of_customer.to_numpy()  # the end of the data is not a missed transmission
    # Each reading's consumption goes to the next reading sent (of the same customer).
    group = np.cumsum(sent[::-1])[::-1]
    carried = rows.groupby([rows["customer_id"], group], sort=False)["consumption"].transform("sum")
    kept = rows[sent].copy()
    kept["consumption"] = carried[sent]
    kept["timestamp"] += pd.to_timedelta(rng.uniform(0, 12, len(kept)), unit="min").round("s")
    # What a day's missed readings after its last sent one carry into the next day.
    day = rows["timestamp"].dt.normalize()
    tail = ~sent & (
        pd.Series(sent).groupby([rows["customer_id"], day]).cumsum()
        == pd.Series(sent).groupby([rows["customer_id"], day]).transform("sum")
    )
    out = rows[tail].groupby(["customer_id", day[tail]])["consumption"].sum()
    return kept.reset_index(drop=True), out


def _processed(
    root: Path, monkeypatch: pytest.MonkeyPatch, readings: pd.DataFrame, *args: str
) -> dict[str, dict[str, tuple[float, str]]]:
    """Each customer's days (total, use) as a processing job of its own writes them (its
    periods, keyed by their ``ds``, with the job's ``args`` ``--frequency h``)."""
    monkeypatch.setenv(OPT_ML_ENV, str(root))
    job = Job(root)
    lines = [
        f"{c},{t.isoformat()}Z,{v!r}\n"
        for c, t, v in readings[["customer_id", "timestamp", "consumption"]].itertuples(index=False)
    ]
    job.upload(HEADER + "".join(lines))
    assert job.run(*args) == 0, job.message()
    table = pq.read_table(parts_in(job.paths.train_output)).to_pandas()
    days: dict[str, dict[str, tuple[float, str]]] = defaultdict(dict)
    for customer_id, ds, y, use in table[["customer_id", "ds", "y", "use"]].itertuples(index=False):
        key = str(pd.Timestamp(ds).date()) if not args else str(ds)
        days[customer_id][key] = (y, use)
    return days


def test_an_hourly_meter_whose_timestamps_jitter_has_the_regular_meters_hours(
    regular: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the real households' readings summed to hours, once stamped on the hour and
    # once sent at a random minute of their hour (a meter that transmits late)
    hourly = (
        regular.groupby(["customer_id", regular["timestamp"].dt.floor("h")])["consumption"]
        .sum()
        .reset_index()
    )
    late = hourly.copy()
    minutes = np.random.default_rng(42).uniform(0, 59.9, len(late))
    late["timestamp"] += pd.to_timedelta(minutes, unit="min").round("s")

    # When each is processed into hourly periods
    on_the_hour = _processed(tmp_path / "regular", monkeypatch, hourly, "--frequency", "h")
    jittered = _processed(tmp_path / "late", monkeypatch, late, "--frequency", "h")

    # Then the late meter has the same hours, totals and uses: an hour is whole when its
    # readings cover it, whichever reading covers which part (counted by reading, about
    # two hours in five were incomplete)
    assert jittered.keys() == on_the_hour.keys()
    for customer_id, hours in on_the_hour.items():
        late_hours = jittered[customer_id]
        assert late_hours.keys() == hours.keys(), customer_id
        assert [y for y, _ in late_hours.values()] == pytest.approx([y for y, _ in hours.values()])
        uses = [use for _, use in hours.values()]
        assert [use for _, use in late_hours.values()] == uses, customer_id
        assert uses.count("ok") > 0.9 * len(uses), customer_id


def test_an_irregular_meter_gets_the_regular_meters_days(
    regular: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the same real households read regularly, and by a meter that misses a fifth
    # of its transmissions and sends late
    jittered, carried_out = irregular(regular)
    assert len(jittered) < 0.85 * len(regular)

    # When each is processed
    whole = _processed(tmp_path / "regular", monkeypatch, regular)
    irregular_days = _processed(tmp_path / "irregular", monkeypatch, jittered)

    # Then every customer has the same days, and every day the regular meter fits is
    # fitted (the irregular meter carries, so a day the published data lacks a few
    # half-hours of may be whole for it)
    assert set(irregular_days) == set(whole)
    for customer_id, days in whole.items():
        assert set(irregular_days[customer_id]) == set(days), customer_id
        fitted = {d for d, (_, use) in days.items() if use == "ok"}
        assert fitted <= {d for d, (_, use) in irregular_days[customer_id].items() if use == "ok"}
        assert len(fitted) >= 28
        # And each day's total is the regular day's, less what its last missed readings
        # carried into the next day, plus what the day before carried into it
        for day, (total, _) in days.items():
            previous = str(pd.Timestamp(day).date() - pd.Timedelta(days=1))
            expected = (
                total
                - carried_out.get((customer_id, pd.Timestamp(day)), 0.0)
                + carried_out.get((customer_id, pd.Timestamp(previous)), 0.0)
            )
            assert irregular_days[customer_id][day][0] == pytest.approx(expected, abs=1e-9)


MISSED_SLOTS = (5, 15, 25, 35, 45)


def _half_hours(customer_id: str, day: str, slots: dict[int, float]) -> str:
    return "".join(
        f"{customer_id},{day}T{slot // 2:02d}:{slot % 2 * 30:02d}:00Z,{value}\n"
        for slot, value in sorted(slots.items())
    )


@pytest.mark.parametrize(
    ("case", "day_two", "expected"),
    [
        # five half-hours lost (not carried: the next readings are as usual): 43 of 48
        ("loses", {s: 1.0 for s in range(48) if s not in MISSED_SLOTS}, "incomplete"),
        # the same five missed, their consumption carried into the next reading: whole
        (
            "carries",
            {s: 2.0 if s - 1 in MISSED_SLOTS else 1.0 for s in range(48) if s not in MISSED_SLOTS},
            "ok",
        ),
        # off for six hours, all of it carried into the next reading: a reading covers
        # 2.4 hours back at most, so 4 of the day's 24 hours are uncovered
        (
            "off",
            {s: 13.0 if s == 30 else 1.0 for s in range(48) if s not in range(18, 30)},
            "incomplete",
        ),
        # installed at noon
        ("noon", {s: 1.0 for s in range(24, 48)}, "incomplete"),
    ],
)
def test_a_day_is_whole_when_its_readings_cover_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    day_two: dict[int, float],
    expected: str,
) -> None:
    # Given a meter's whole first day, then a second day as the case says, then whole days
    whole = {s: 1.0 for s in range(48)}
    first = {} if case == "noon" else whole
    rows = _half_hours(case, "2024-03-01", first) + _half_hours(case, "2024-03-02", day_two)
    rows += "".join(_half_hours(case, f"2024-03-{d:02d}", whole) for d in range(3, 6))
    monkeypatch.setenv(OPT_ML_ENV, str(tmp_path))
    job = Job(tmp_path)
    job.upload(HEADER + rows)

    # When it is processed
    assert job.run() == 0, job.message

    # Then the second day is whole or not as its cover says, and the days after it whole
    table = pq.read_table(parts_in(job.paths.train_output)).to_pandas()
    uses = dict(zip(table["ds"].astype(str).str[:10], table["use"], strict=True))
    assert uses["2024-03-02"] == expected
    assert [uses[f"2024-03-{d:02d}"] for d in range(3, 6)] == ["ok"] * 3


@pytest.mark.parametrize("early", [False, True])
def test_a_meter_with_no_long_gap_is_covered_as_the_general_rule_covers_it(early):
    """The shortcut for meters with no gap longer than their interval (regular meters)
    gives each reading the cover the general rule (carrying or not) would give it."""
    import numpy as np

    from fleetcast_contracts.frequency import Frequency
    from fleetcast_processing import history, usage

    # Given three half-hourly meters, one with a single reading, the others with
    # readings every interval or, with ``early``, some sooner than that
    rng = np.random.default_rng(7)
    step_us = 1_800 * 1_000_000
    instants, ranks = [], []
    for rank, count in enumerate((200, 1, 150)):
        gaps = np.full(count, step_us)
        if early:
            gaps = gaps - rng.integers(0, step_us // 2, count) * (rng.random(count) < 0.3)
        instants.append(1_700_000_000_000_000 + np.cumsum(gaps))
        ranks.append(np.full(count, rank))
    ranks_all, instants_all = np.concatenate(ranks), np.concatenate(instants)
    readings = history.Readings(
        ranks_all * 10**15 + instants_all, ranks_all, instants_all, rng.random(len(ranks_all))
    )
    intervals = history.reading_intervals(readings.ranks, readings.instants)
    rules = usage.UseRules()
    # When the cover is computed with the shortcut
    steps = history._Steps.of(readings.ranks, readings.instants)
    cover = history._reading_cover(readings, steps, intervals, Frequency.DAILY, rules)
    # Then it is the general rule's
    first = np.concatenate([[True], ranks_all[1:] != ranks_all[:-1]])
    gaps = np.concatenate([[np.nan], np.diff(instants_all // 1_000) / 1_000])  # to the ms
    gaps[first] = np.nan
    meters = np.cumsum(first) - 1
    per_reading = intervals[meters]
    longest = usage.longest_cover(per_reading, Frequency.DAILY, rules)
    carries = usage.carrying_meters(meters, gaps, per_reading, readings.values, longest)
    expected = usage.covered_seconds(gaps, per_reading, carries, longest)
    np.testing.assert_array_equal(cover, expected)
    assert np.isnan(cover[200]) and (cover[:200] > 0).all()

"""The training parts say what to fit (issue 26, item 1): a period with too few readings is
incomplete, zeros before a meter was connected (and long runs of them later) inactive;
every period stays in the parts and every decision is counted."""

from __future__ import annotations

from datetime import date, timedelta

import pyarrow.parquet as pq
import pytest
from shard_helpers import parts_in
from test_processing import HEADER, Job, job  # noqa: F401  (the fixture)

from fleetcast_contracts.processing import INCOMPLETE_BELOW_ENV, ZERO_RUN_DAYS_ENV

START = date(2024, 3, 1)


def _daily(customer_id: str, values: list[float]) -> str:
    return "".join(
        f"{customer_id},{START + timedelta(days=day)},{value}\n" for day, value in enumerate(values)
    )


def _hourly_day(customer_id: str, day: date, hours: int) -> str:
    return "".join(f"{customer_id},{day}T{hour:02d}:00:00Z,1\n" for hour in range(hours))


def _uses(job: Job) -> dict[str, list[str]]:  # noqa: F811
    table = pq.read_table(parts_in(job.paths.train_output))
    found: dict[str, list[str]] = {}
    for customer_id, use in zip(
        table.column("customer_id").to_pylist(), table.column("use").to_pylist(), strict=True
    ):
        found.setdefault(customer_id, []).append(use)
    return found


def test_zero_runs_and_thin_periods_are_marked_not_dropped(job: Job) -> None:  # noqa: F811
    # Given: 'joins' reads 0 for 10 days before it is connected; 'away' has 8 days of zeros
    # inside its history and 2 short ones; 'leaves' ends with 7 days of zeros, 'pauses'
    # with 3; 'hourly' has a day of 20 of 24 readings and one of 22
    ones = [1.0] * 20
    upload = (
        HEADER
        + _daily("joins", [0.0] * 10 + ones)
        + _daily("away", ones[:5] + [0.0] * 8 + ones[:5] + [0.0] * 2 + ones[:5])
        + _daily("leaves", ones + [0.0] * 7)
        + _daily("pauses", ones + [0.0] * 3)
        + _hourly_day("hourly", START, 24)
        + _hourly_day("hourly", START + timedelta(days=1), 20)
        + _hourly_day("hourly", START + timedelta(days=2), 22)
    )
    job.upload(upload)

    # When the job runs
    assert job.run() == 0

    # Then each period says what to do with it, every period kept
    uses = _uses(job)
    assert uses["joins"] == ["inactive"] * 10 + ["ok"] * 20
    assert uses["away"] == ["ok"] * 5 + ["inactive"] * 8 + ["ok"] * 12
    assert uses["leaves"] == ["ok"] * 20 + ["inactive"] * 7
    assert uses["pauses"] == ["ok"] * 23
    assert uses["hourly"] == ["ok", "incomplete", "ok"]
    # And the summary counts every decision, per customer and for the run, with the
    # customers' reading intervals
    summary = job.summary
    assert summary.periods_by_use == {"inactive": 25, "incomplete": 1, "ok": 82}
    assert sum(summary.periods_by_use.values()) == summary.days_written
    assert summary.unused_periods == {
        "away": {"inactive": 8},
        "hourly": {"incomplete": 1},
        "joins": {"inactive": 10},
        "leaves": {"inactive": 7},
    }
    assert summary.customers_by_interval_s == {"3600": 1, "86400": 4}
    # And the stored history keeps every reading, zeros included
    assert job.history("joins")[:2] == [("2024-03-01", 0.0), ("2024-03-02", 0.0)]


@pytest.mark.parametrize(
    ("setting", "value", "expected"),
    [
        (INCOMPLETE_BELOW_ENV, "0.8", {"hourly": ["ok", "ok"]}),
        (ZERO_RUN_DAYS_ENV, "3", {"pauses": ["ok", "ok", "inactive", "inactive", "inactive"]}),
    ],
)
def test_the_thresholds_are_job_settings(
    job: Job,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    setting: str,
    value: str,
    expected: dict[str, list[str]],
) -> None:
    # Given a day of 20 of 24 readings, and a history ending in 3 days of zeros
    job.upload(
        HEADER
        + _hourly_day("hourly", START, 24)
        + _hourly_day("hourly", START + timedelta(days=1), 20)
        + _daily("pauses", [1.0, 1.0, 0.0, 0.0, 0.0])
    )
    # When the threshold is set for the job
    monkeypatch.setenv(setting, value)
    assert job.run() == 0
    # Then the decisions follow it
    uses = _uses(job)
    assert {customer: uses[customer] for customer in expected} == expected


def test_a_meter_reading_less_often_than_the_periods_has_no_whole_period(job: Job) -> None:  # noqa: F811
    # Given, for an hourly model, a meter read once a day (at midnight: each reading the
    # day before it), one read every 70 minutes, and an hourly meter whose readings come
    # a few minutes late or early
    late = [0, 3, -2, 5, 1, -4, 2, 0, 6, -1, 3, 0]
    upload = (
        HEADER
        + "".join(f"daily,2024-03-{day:02d}T00:00:00Z,24\n" for day in range(1, 11))
        + "".join(
            f"slow,2024-03-01T{minutes // 60:02d}:{minutes % 60:02d}:00Z,1.2\n"
            for minutes in range(0, 12 * 70, 70)
        )
        + "".join(
            f"hourly,2024-03-01T{hour:02d}:{max(offset, 0):02d}:00Z,1\n"
            for hour, offset in enumerate(late)
        )
    )
    job.upload(upload)

    # When the job runs hourly
    assert job.run("--frequency", "h") == 0

    # Then every period of the daily and the 70-minute meters is incomplete (each reading
    # totals more than the hour it falls in), every reading still in its period, while the
    # jittered hourly meter's hours are whole but for its last
    uses = _uses(job)
    assert uses["daily"] == ["incomplete"] * 10
    assert set(uses["slow"]) == {"incomplete"} and len(uses["slow"]) == 12
    assert uses["hourly"][:-1] == ["ok"] * 11
    assert job.summary.unused_periods["daily"] == {"incomplete": 10}
    assert sum(y for _, y in job.train("daily")) == 240


def test_a_daily_meter_is_whole_in_daily_periods_and_one_read_every_three_days_is_not(
    job: Job,  # noqa: F811
) -> None:
    # Given a daily meter and one read every third day
    upload = (
        HEADER
        + _daily("daily", [1.0] * 12)
        + "".join(f"third,{START + timedelta(days=3 * k)},3\n" for k in range(6))
    )
    job.upload(upload)
    # When the job runs with the default daily frequency
    assert job.run() == 0
    # Then the daily meter's days are whole, the other's are not
    uses = _uses(job)
    assert uses["daily"] == ["ok"] * 12
    assert uses["third"] == ["incomplete"] * 6

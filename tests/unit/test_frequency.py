"""The one model-frequency type (fleetcast_contracts.frequency): its wire codes, the
spellings it reads, and what each member says about its periods."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import TypeAdapter
from template_helpers import load_template

from fleetcast_contracts.frequency import CODES, LONGEST_PERIOD, Frequency, period_limits
from fleetcast_contracts.horizons import MAX_PERIOD
from fleetcast_contracts.model_archive import ModelMetadata


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("D", Frequency.DAILY),
        ("d", Frequency.DAILY),
        ("H", Frequency.HOURLY),
        ("h", Frequency.HOURLY),
    ],
)
def test_both_spellings_are_read_and_the_code_is_written(text: str, expected: Frequency) -> None:
    assert Frequency.parse(text) is expected
    # (the wire keeps the template's codes)
    assert f"{expected}" == expected.value in CODES == ("D", "H")


@pytest.mark.parametrize("text", ["W", "", "1h", "hourly"])
def test_anything_else_is_refused_naming_the_codes(text: str) -> None:
    with pytest.raises(ValueError, match="frequency must be one of D, H"):
        Frequency.parse(text)


def test_each_member_says_its_periods_in_one_place() -> None:
    for frequency in Frequency:
        assert frequency.period_seconds * frequency.periods_per_day == 86_400
        assert frequency.season_periods <= frequency.max_period <= LONGEST_PERIOD == MAX_PERIOD
    hourly = Frequency.HOURLY
    assert (hourly.pandas_alias, hourly.unit, hourly.adjective) == ("h", "hour", "hourly")
    # 30 days of hours, a year of days
    assert (hourly.max_period, Frequency.DAILY.max_period) == (720, 365)
    assert (hourly.periods(1), hourly.periods(48), hourly.days(720)) == ("1 hour", "48 hours", 30)
    assert period_limits() == "365 days for a daily model, 720 hours for an hourly model"


def test_an_archive_of_before_the_type_reads_its_pandas_spelling() -> None:
    # Given the archive metadata's frequency field as pydantic reads it
    field = ModelMetadata.model_fields["frequency"]
    reads = TypeAdapter(Annotated[(Frequency, *field.metadata)])
    # When an archive written before the type says "h", then it is hourly, written "H"
    assert reads.validate_python("h") is Frequency.HOURLY
    assert reads.dump_python(Frequency.HOURLY, mode="json") == "H"
    # And an archive without one is daily
    assert field.default is Frequency.DAILY


def test_the_templates_model_frequencies_are_the_types() -> None:
    # (a new frequency is a member here and a value the template allows: nothing else)
    parameter = load_template()["Parameters"]["ModelFrequency"]
    assert [str(value) for value in parameter["AllowedValues"]] == list(CODES)
    assert parameter["Default"] == Frequency.DAILY.value

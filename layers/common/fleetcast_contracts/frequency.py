"""The model frequency: what one period of a customer's model is.

One type for every part that needs it (the template's ``ModelFrequency`` parameter, the
processing job's totals, the training job's hyperparameters, the archives, the registry,
the forecast API and the CLI). A new frequency is one member here: its code, its pandas
alias, its unit, how many of its periods make a day, the longest forecast served and the
season the seasonal-naive yardstick repeats; and its code among template.yaml's
``ModelFrequency`` AllowedValues (tests/unit/test_frequency.py holds the two together).

On the wire it is its code: ``D`` or ``H`` (template.yaml, hyperparameters, archives).
Archives and hyperparameters written before this type say ``h`` for hourly (pandas 3's
alias); :meth:`Frequency.parse` reads either spelling.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

SECONDS_PER_DAY = 24 * 60 * 60
# 1970-01-01, where periods are counted from, was a Thursday: day 3 of a week Monday-first.
EPOCH_WEEKDAY = 3
# A count of periods since 1970: one, or an array of them.
Periods = TypeVar("Periods", int, "npt.NDArray[np.int64]")


class Frequency(StrEnum):
    """A model's frequency: D (each period a UTC day) or H (a UTC hour)."""

    # code, pandas alias, unit, adjective, periods a day, longest forecast (periods: a
    # year of days, 30 days of hours), the seasonal-naive season (periods: a week of days,
    # a week of hours: the hourly families then see the weekly cycle)
    DAILY = ("D", "D", "day", "daily", 1, 365, 7)
    HOURLY = ("H", "h", "hour", "hourly", 24, 720, 168)

    # (annotations, not members: the attributes each member is given in __new__)
    pandas_alias: str
    unit: str
    adjective: str
    periods_per_day: int
    max_period: int
    season_periods: int

    def __new__(
        cls,
        code: str,
        pandas_alias: str,
        unit: str,
        adjective: str,
        periods_per_day: int,
        max_period: int,
        season_periods: int,
    ) -> Frequency:
        member = str.__new__(cls, code)
        member._value_ = code
        member.pandas_alias = pandas_alias
        member.unit = unit
        member.adjective = adjective
        member.periods_per_day = periods_per_day
        member.max_period = max_period
        member.season_periods = season_periods
        return member

    @property
    def units(self) -> str:
        """The unit's plural: "days", "hours"."""
        return f"{self.unit}s"

    @property
    def period_seconds(self) -> int:
        return SECONDS_PER_DAY // self.periods_per_day

    def periods(self, count: int) -> str:
        """``count`` periods in words: "1 hour", "48 hours"."""
        return f"{count} {self.unit if count == 1 else self.units}"

    def period_of_week(self, periods: Periods) -> Periods:
        """Of ``periods`` counted from 1970 (UTC), each one's period of the week, Monday
        00:00 its 0: a daily model's weekday, an hourly one's hour of the week."""
        return (periods + EPOCH_WEEKDAY * self.periods_per_day) % (7 * self.periods_per_day)

    def days(self, periods: int) -> float:
        """How many days ``periods`` periods cover."""
        return periods / self.periods_per_day

    @classmethod
    def of_periods_per_day(cls, periods_per_day: int) -> Frequency:
        """The frequency with ``periods_per_day`` periods a day."""
        for member in cls:
            if member.periods_per_day == periods_per_day:
                return member
        raise ValueError(f"no frequency has {periods_per_day} periods a day")

    @classmethod
    def parse(cls, value: object) -> Frequency:
        """A frequency from its code in either case (``h`` is pandas' and older archives'
        spelling of hourly), or from a member."""
        if isinstance(value, Frequency):
            return value
        if isinstance(value, str):
            text = value.strip().upper()
            for member in cls:
                if member.value == text:
                    return member
        codes = ", ".join(member.value for member in cls)
        raise ValueError(f"frequency must be one of {codes}, not {value!r}")


# As a pydantic field: ``Annotated[Frequency, BeforeValidator(Frequency.parse)]`` reads
# "D", "H" and "h". (No pydantic here: `fleetcast --help` reads this module.)
CODES = tuple(member.value for member in Frequency)
# The longest forecast any model serves (an hourly one's): what a request is checked
# against before its customer's model, and so its frequency, is known.
LONGEST_PERIOD = max(member.max_period for member in Frequency)


def period_limits() -> str:
    """The longest forecast of every frequency in words, for help texts and docs:
    "365 days for a daily model, 720 hours for an hourly one"."""
    return ", ".join(
        f"{member.periods(member.max_period)} for {_article(member.adjective)} model"
        for member in Frequency
    )


def _article(word: str) -> str:
    # "an hourly": the h is silent.
    return f"an {word}" if word[0] in "aeiou" or word.startswith("hour") else f"a {word}"

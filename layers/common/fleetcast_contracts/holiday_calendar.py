"""Which public-holiday calendar a customer's model uses, and its holidays.

Training and serving must see the same holidays, or a served forecast would not be the
one Prophet gives. Both build them here, the way Prophet 1.5's own ``make_holidays_df``
does (the ``holidays`` package, English names, one row per name per date), and the
model archive records the :class:`HolidayCalendar` so a reader knows which calendar,
from which version of the ``holidays`` package, a forecast includes.

Prophet 1.5's ``add_country_holidays`` takes a country only. A model without a
subdivision uses it, and Prophet regenerates the country's holidays for the years it
forecasts. A model with a subdivision gets :func:`holidays_frame` as Prophet's
``holidays=`` frame instead, built for :func:`calendar_years`, which reach as far as
any forecast may.

``holidays`` (and pandas) are imported only where used: Lambdas read archive metadata
through this module without either installed.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import date
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    import pandas as pd

# Prophet's own substitution (prophet.make_holidays.get_country_holidays_class).
_COUNTRY_ALIASES = {"TU": "TR"}
# The language of Prophet's holiday names, so every model's column names are the same.
HOLIDAY_LANGUAGE = "en_US"
# The installed release (None without the package), which HolidayCalendar.of records.
try:
    HOLIDAYS_VERSION: str | None = version("holidays")
except PackageNotFoundError:
    HOLIDAYS_VERSION = None
# A forecast may reach this far past the last day of history (the serving horizon is
# 365 periods of at most a day each).
_FORECAST_REACH_YEARS = 1


class HolidayCalendar(BaseModel):
    """The calendar a model was fitted with, as its archive records it."""

    model_config = ConfigDict(frozen=True)

    country: str = Field(description="ISO 3166-1 code of the holidays package, e.g. US, DE")
    subdivision: str | None = Field(
        default=None, description="Subdivision code of the holidays package, e.g. CA, BY"
    )
    holidays_version: str = Field(description="Version of the holidays package used")

    @classmethod
    def of(cls, country: str, subdivision: str | None = None) -> HolidayCalendar:
        """The calendar of ``country`` (and ``subdivision``) with the installed ``holidays``;
        raise ``ValueError`` naming the code the package does not know."""
        check_calendar(country, subdivision)
        assert HOLIDAYS_VERSION is not None  # check_calendar imported the package
        return cls(country=country, subdivision=subdivision, holidays_version=HOLIDAYS_VERSION)


def check_calendar(country: str, subdivision: str | None = None) -> None:
    """Raise ``ValueError`` unless the ``holidays`` package knows ``country`` and, when
    given, its ``subdivision``."""
    import holidays

    # As Prophet looks a country up; list_supported_countries would import all of them.
    calendar_class = getattr(holidays, _COUNTRY_ALIASES.get(country, country), None)
    subdivisions = getattr(calendar_class, "subdivisions", None)
    if not isinstance(subdivisions, tuple) or calendar_class is holidays.HolidayBase:
        raise ValueError(f"the holidays package has no country {country!r}")
    if subdivision is not None and subdivision not in subdivisions:
        known = ", ".join(subdivisions) or "none"
        raise ValueError(
            f"country {country!r} has no subdivision {subdivision!r} in the holidays "
            f"package (known: {known})"
        )


def holiday_dates(
    country: str, subdivision: str | None, years: Iterable[int]
) -> tuple[tuple[date, str], ...]:
    """Every ``(date, name)`` of the calendar in ``years``, as Prophet's
    ``make_holidays_df(years, country, province=subdivision)`` lists them, sorted.

    Cached per (country, subdivision, years): the ``holidays`` package takes tens of
    milliseconds per country and year, and thousands of a fleet's models share a few
    calendars.
    """
    return _holiday_dates(country, subdivision, tuple(sorted(set(years))))


@functools.lru_cache(maxsize=256)
def _holiday_dates(
    country: str, subdivision: str | None, years: tuple[int, ...]
) -> tuple[tuple[date, str], ...]:
    import holidays

    check_calendar(country, subdivision)
    calendar_class = getattr(holidays, _COUNTRY_ALIASES.get(country, country))
    calendar = calendar_class(
        expand=False, language=HOLIDAY_LANGUAGE, subdiv=subdivision, years=list(years)
    )
    return tuple(sorted((day, name) for day in calendar for name in calendar.get_list(day)))


def calendar_years(data_start: date, data_end: date) -> range:
    """The years a ``holidays=`` frame must cover: the history's and every year a
    forecast from it may reach."""
    return range(data_start.year, data_end.year + _FORECAST_REACH_YEARS + 1)


def holidays_frame(calendar: HolidayCalendar, years: Iterable[int]) -> pd.DataFrame:
    """Prophet's holidays frame (``ds``, ``holiday``) of ``calendar`` in ``years``."""
    import pandas as pd

    rows = holiday_dates(calendar.country, calendar.subdivision, years)
    return pd.DataFrame(
        {
            "ds": pd.to_datetime([day for day, _ in rows]),
            "holiday": [name for _, name in rows],
        }
    )

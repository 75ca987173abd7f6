"""Which holiday calendar each customer's model uses.

Processing writes the run's ``calendars.csv`` (``customer_id,country,subdivision``) from
the metadata store into the ``calendars`` channel, which every instance receives whole;
a customer it does not list gets the ``default_holiday_country`` hyperparameter's
holidays, or none.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fleetcast_contracts.holiday_calendar import HolidayCalendar
from fleetcast_contracts.training import CALENDAR_COLUMNS, CALENDARS_FILE
from fleetcast_training.failures import JobFailure


class InvalidCalendarsError(JobFailure):
    """The run's calendars file cannot be used (the job fails); the message names the line."""


@dataclass(frozen=True)
class CustomerCalendars:
    by_customer: Mapping[str, HolidayCalendar] = field(default_factory=dict)
    default: HolidayCalendar | None = None

    def of(self, customer_id: str) -> HolidayCalendar | None:
        return self.by_customer.get(customer_id, self.default)

    @classmethod
    def load(cls, channel_dir: Path, default_country: str) -> CustomerCalendars:
        """The channel's calendars (none when the channel is absent: a job started before
        calendars existed) over ``default_country``'s.

        Raises :class:`InvalidCalendarsError` for a file processing could not have
        written: a wrong header, or a code the installed ``holidays`` does not know.
        """
        default = HolidayCalendar.of(default_country) if default_country else None
        path = channel_dir / CALENDARS_FILE
        if not path.is_file():
            return cls(default=default)
        calendars: dict[str, HolidayCalendar] = {}
        with path.open(newline="", encoding="utf-8") as lines:
            reader = csv.reader(lines)
            header = tuple(next(reader, ()))
            if header != CALENDAR_COLUMNS:
                raise InvalidCalendarsError(
                    f"{path}: header must be {','.join(CALENDAR_COLUMNS)}, found {','.join(header)!r}"
                )
            for line, row in enumerate(reader, start=2):
                if len(row) != len(CALENDAR_COLUMNS):
                    raise InvalidCalendarsError(f"{path} line {line}: expected 3 fields")
                customer_id, country, subdivision = row
                try:
                    calendars[customer_id] = HolidayCalendar.of(country, subdivision or None)
                except ValueError as error:
                    raise InvalidCalendarsError(f"{path} line {line}: {error}") from error
        return cls(by_customer=calendars, default=default)

"""The forecast horizons an invoke (and so the forecast API) may ask for, in the model's
own periods (days of a daily model, hours of an hourly one). Apart from
fleetcast_contracts.inference, whose pydantic models cost a third of a second to import,
so that `fleetcast --help` reads them for nothing.

Each model's longest forecast is its frequency's ``max_period``
(:class:`~fleetcast_contracts.frequency.Frequency`); ``MAX_PERIOD`` is the longest of any
model, what a request is checked against before its model is known.
"""

from __future__ import annotations

from fleetcast_contracts.frequency import LONGEST_PERIOD

MIN_PERIOD = 1
MAX_PERIOD = LONGEST_PERIOD
# The forecast API's horizon when a request names none.
DEFAULT_PERIOD = 7
# The longest forecast export a training run writes, in days (of any frequency).
MAX_EXPORT_DAYS = 365

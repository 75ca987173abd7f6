"""The forecast horizons an invoke (and so the forecast API) may ask for, in the model's
own periods. Apart from fleetcast_contracts.inference, whose pydantic models cost a third
of a second to import, so that `fleetcast --help` reads them for nothing."""

from __future__ import annotations

MIN_PERIOD = 1
MAX_PERIOD = 365
# The forecast API's horizon when a request names none.
DEFAULT_PERIOD = 7

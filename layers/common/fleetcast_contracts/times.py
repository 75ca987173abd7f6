"""Date-times as fleetcast's records and the forecast API's answers carry them: in UTC, with
their offset, so that every one is RFC 3339 (``2023-10-03T00:00:00Z``), which is what the
OpenAPI document's ``format: date-time`` promises a client.

Pure: pydantic only.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator


def as_utc(moment: datetime) -> datetime:
    """``moment`` in UTC. A naive one is taken to be UTC's already: fleetcast's times are
    (readings are totalled per UTC day or hour, and a history's timestamps, a backtest's
    origins among them, are those totals' labels)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


# A datetime field that is always aware and in UTC, whatever it was given (a record or an
# archive written before this type kept its origins naive: they read back in UTC too).
UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]

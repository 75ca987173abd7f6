"""The cost watch's configuration: one typed object read from the environment that
template.yaml (or the local stack) sets, validated when the handler starts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from fleetcast_common.settings import _FromEnvironment

WEEKDAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
_ADDRESS = re.compile(r"^[^@\s,<>]+@[^@\s,<>]+\.[^@\s,<>]+$")


class CostAnalysisSettings(_FromEnvironment):
    """What the analysis needs: enough for ``fleetcast cost-report --json``."""

    lookback_days: int = Field(default=90, alias="COST_LOOKBACK_DAYS", ge=28, le=365)
    relative_threshold: float = Field(default=0.5, alias="COST_RELATIVE_THRESHOLD", gt=0)
    absolute_threshold_usd: float = Field(default=5.0, alias="COST_ABSOLUTE_THRESHOLD_USD", ge=0)
    anomaly_monitor_arn: str | None = Field(default=None, alias="COST_ANOMALY_MONITOR_ARN")
    # Anomalies older than this are history: charted, never e-mailed as news.
    report_window_days: int = Field(default=7, alias="COST_REPORT_WINDOW_DAYS", ge=1, le=31)
    region: str = Field(default="us-east-1", alias="AWS_REGION")

    @field_validator("anomaly_monitor_arn", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return value or None


class CostReportSettings(CostAnalysisSettings):
    """Everything the scheduled function needs to send the report."""

    recipients: tuple[str, ...] = Field(alias="COST_REPORT_RECIPIENTS", min_length=1)
    sender: str = Field(alias="COST_REPORT_SENDER")
    digest_weekday: int = Field(default=0, alias="COST_DIGEST_WEEKDAY", ge=0, le=6)
    state_table: str = Field(alias="COST_STATE_TABLE", min_length=3)
    outbox_dir: Path | None = Field(default=None, alias="COST_OUTBOX_DIR")

    @field_validator("recipients", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("recipients")
    @classmethod
    def _addresses(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [address for address in value if not _ADDRESS.fullmatch(address)]
        if bad:
            raise ValueError(f"not e-mail addresses: {', '.join(bad)}")
        return value

    @field_validator("sender")
    @classmethod
    def _sender(cls, value: str) -> str:
        # "Cost watch <cost@example.com>" or a bare address.
        address = value.rsplit("<", 1)[-1].rstrip(">").strip()
        if not _ADDRESS.fullmatch(address):
            raise ValueError(f"not an e-mail address: {value}")
        return value

    @field_validator("digest_weekday", mode="before")
    @classmethod
    def _weekday(cls, value: Any) -> Any:
        """``MON``..``SUN`` (any case, full names too) or 0..6 with Monday 0."""
        if isinstance(value, str) and not value.strip().isdigit():
            short = value.strip()[:3].upper()
            if short not in WEEKDAYS:
                raise ValueError(f"not a weekday: {value!r} (use MON..SUN)")
            return WEEKDAYS.index(short)
        return value

    @field_validator("outbox_dir", mode="before")
    @classmethod
    def _empty_outbox(cls, value: Any) -> Any:
        return value or None

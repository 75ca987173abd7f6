"""The training job's hyperparameters: SageMaker passes strings, the job works with these."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fleetcast_contracts.families import DEFAULT_CANDIDATES, default_candidates
from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.holiday_calendar import check_calendar
from fleetcast_contracts.horizons import MAX_EXPORT_DAYS
from fleetcast_contracts.ids import is_valid_run_id
from fleetcast_contracts.training import (
    CANDIDATE_KINDS,
    HYPERPARAMETER_DEFAULTS,
    REQUIRED_HYPERPARAMETERS,
    SAGEMAKER_HYPERPARAMETER_PREFIX,
)

# The model families a customer's candidates may be drawn from, in the order they fit.
CANDIDATES = CANDIDATE_KINDS


class InvalidHyperparametersError(ValueError):
    """Hyperparameters the job cannot run with; the message names each problem."""


def _seasonality(value: object) -> object:
    """Prophet's ``*_seasonality`` argument: "auto", true, false or a Fourier order."""
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    if text in ("auto", "true", "false"):
        return {"auto": "auto", "true": True, "false": False}[text]
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise ValueError("must be 'auto', 'true', 'false' or a positive Fourier order")


def _candidates(value: object, frequency: Frequency) -> object:
    if not isinstance(value, str):
        return value
    if value.strip() == DEFAULT_CANDIDATES:
        return default_candidates(frequency)
    names = tuple(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
    unknown = sorted(set(names) - set(CANDIDATES))
    if unknown:
        raise ValueError(f"unknown {', '.join(unknown)}; known: {', '.join(CANDIDATES)}")
    if not names:
        raise ValueError(f"name at least one of {', '.join(CANDIDATES)}")
    return tuple(name for name in CANDIDATES if name in names)


Seasonality = Annotated[Literal["auto"] | bool | int, BeforeValidator(_seasonality)]


class Hyperparameters(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    holdout_days: int = Field(ge=1, le=366)
    min_rows: int = Field(ge=2)
    # "D" or "H" (the template's ModelFrequency); "h" too, as jobs before this type had it.
    frequency: Annotated[Frequency, BeforeValidator(Frequency.parse)]
    seasonality_mode: Literal["additive", "multiplicative"]
    yearly_seasonality: Seasonality
    weekly_seasonality: Seasonality
    daily_seasonality: Seasonality
    uncertainty_samples: int = Field(ge=0, le=100_000)
    # The model families a customer may be served (fleetcast_training.selection): a list,
    # or ``default``, the frequency's (families.default_candidates). Seasonal naive is
    # scored whether listed or not: it is the yardstick every model must meet.
    candidates: tuple[str, ...]
    # Rolling-origin windows of the backtest every candidate is scored on.
    backtest_windows: int = Field(ge=1, le=12)
    # 0 means one worker process per CPU of the instance.
    workers: int = Field(ge=0, le=1024)
    # Customers without metadata get this country's holidays; "" for none.
    default_holiday_country: str = ""
    # Days of forecast each trained customer gets in the run's export; 0: no export.
    forecast_export_days: int = Field(ge=0, le=MAX_EXPORT_DAYS)

    @model_validator(mode="after")
    def _known_run(self) -> Hyperparameters:
        if not is_valid_run_id(self.run_id):
            raise ValueError(f"run_id {self.run_id!r} is not a fleetcast run id")
        return self

    @field_validator("candidates", mode="before")
    @classmethod
    def _named_candidates(cls, value: object, info: ValidationInfo) -> object:
        # (``frequency`` is validated first: a field declared before this one)
        return _candidates(value, info.data.get("frequency", Frequency.DAILY))

    @field_validator("default_holiday_country")
    @classmethod
    def _known_country(cls, value: str) -> str:
        value = value.strip()
        if value:
            check_calendar(value)
        return value

    @property
    def required_rows(self) -> int:
        """``min_rows``, raised where needed to hold out ``holdout_days`` and keep a season
        before them for the seasonal-naive baseline (192 for a week of hourly data), so
        the daily default also works for hourly data."""
        return max(self.min_rows, self.holdout_rows + self.season_rows)

    @property
    def holdout_rows(self) -> int:
        return self.holdout_days * self.frequency.periods_per_day

    @property
    def backtest_periods(self) -> int:
        """Each backtest window's horizon: the export's (what the forecasts will be used
        for), or ``holdout_days`` when the export is off; customers too short for its
        windows are backtested on ``holdout_days`` instead."""
        return self.export_periods or self.holdout_rows

    @property
    def periods_per_day(self) -> int:
        return self.frequency.periods_per_day

    @property
    def export_periods(self) -> int:
        """Rows of each customer's exported forecast (24 a day for hourly models)."""
        return self.forecast_export_days * self.frequency.periods_per_day

    @property
    def season(self) -> timedelta:
        """What the seasonal-naive baseline repeats: a week of daily data, a day of hourly."""
        return self.season_rows * timedelta(seconds=self.frequency.period_seconds)

    @property
    def season_rows(self) -> int:
        return self.frequency.season_periods

    def worker_count(self, cpus: int) -> int:
        return self.workers or cpus

    @classmethod
    def parse(cls, raw: dict[str, str]) -> Hyperparameters:
        """Validate SageMaker's string hyperparameters, filling in the defaults.

        Raise :class:`InvalidHyperparametersError` naming every problem at once.
        """
        given = {k: v for k, v in raw.items() if not k.startswith(SAGEMAKER_HYPERPARAMETER_PREFIX)}
        known = set(HYPERPARAMETER_DEFAULTS) | set(REQUIRED_HYPERPARAMETERS)
        problems = [
            f"unknown hyperparameter {name!r} (known: {', '.join(sorted(known))})"
            for name in sorted(given.keys() - known)
        ]
        problems += [
            f"{name} is required" for name in REQUIRED_HYPERPARAMETERS if name not in given
        ]
        if not problems:
            try:
                return cls.model_validate({**HYPERPARAMETER_DEFAULTS, **given})
            except ValidationError as error:
                problems = [_describe(detail, given) for detail in error.errors()]
        raise InvalidHyperparametersError("invalid hyperparameters: " + "; ".join(problems))


def _describe(detail: object, given: dict[str, str]) -> str:
    assert isinstance(detail, dict)
    message = str(detail["msg"]).removeprefix("Value error, ")
    location = detail.get("loc") or ()
    if not location:
        return message
    name = str(location[0])
    value = given.get(name, HYPERPARAMETER_DEFAULTS.get(name))
    return f"{name}={value!r}: {message}"

"""The forecast API's domain: a customer's live model from the registry, its forecast from
the multi-model endpoint, and what can go wrong on the way.

Pure apart from the two adapters it is handed (:class:`~fleetcast_common.registry.ModelRegistry`,
or :class:`LiveModelCache` in front of it, and
:class:`~fleetcast_common.forecast_endpoint.ForecastEndpoint`); the handler turns the
errors below into HTTP responses, in one place.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import date
from typing import Any, Protocol

from pydantic import BaseModel, Field

from fleetcast_common.registry import LiveModel
from fleetcast_common.settings import _FromEnvironment
from fleetcast_contracts import layout
from fleetcast_contracts.families import FAMILIES
from fleetcast_contracts.frequency import Frequency, period_limits
from fleetcast_contracts.ids import (
    CUSTOMER_ID_PATTERN,
    InvalidCustomerIdError,
    is_valid_customer_id,
    is_valid_run_id,
)
from fleetcast_contracts.inference import (  # noqa: F401 - DEFAULT_PERIOD: the API's, from here
    DEFAULT_PERIOD,
    EndpointForecast,
    ForecastPoint,
)
from fleetcast_contracts.model_archive import Backtest
from fleetcast_contracts.quantiles import (
    FORECAST_FLOOR,
    MAX_QUANTILES,
    QUANTILE_ABOVE,
    QUANTILE_BELOW,
    QUANTILES_EXAMPLE,
    normalise_quantiles,
    quantile_key,
)
from fleetcast_contracts.times import UtcDatetime

# The horizons the API accepts are those the inference container serves: from MIN_PERIOD
# to the customer's model's frequency's max_period, in its own periods
# (fleetcast_contracts.horizons and .frequency, there so the CLI's --help reads them
# without this module).
QUANTILES_PARAMETER = "quantiles"
_DECIMAL = re.compile(r"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?")
CLIPPING_NOTE = (
    "Consumption is never negative: yhat, the interval's bounds and every quantile are "
    "clipped at 0 (by the inference container), and clipped_at_zero counts the values "
    "raised to 0."
)


def _empty(value: object) -> bool:
    return not value


class ForecastApiSettings(_FromEnvironment):
    registry_table: str = Field(alias="REGISTRY_TABLE", min_length=1)
    # Empty while the stack has no endpoint (template.yaml's HasEndpoint condition).
    endpoint_name: str = Field(
        alias="ENDPOINT_NAME", pattern=r"^$|^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
    )
    # How long a warm function may reuse a customer's live-model lookup (see
    # LiveModelCache); 0 reads the registry on every request.
    live_model_cache_seconds: float = Field(alias="LIVE_MODEL_CACHE_SECONDS", default=30.0, ge=0)


class NewerModel(BaseModel):
    """The customer's newest model, from a run after the live model's, that was not made
    live: the live model predates what that run was trained on."""

    run_id: str = Field(description="The training run newer than the live model's")
    trained_at: UtcDatetime
    data_end: date = Field(description="Last day of history the newer model was fitted on")
    status: str = Field(description="What registration made of it: rejected (quality gate)")
    reason: str = Field(description="Why it was not made live")
    message: str = Field(description="All of the above in one sentence, for people")

    @classmethod
    def of(cls, live: LiveModel) -> NewerModel | None:
        held = live.held_back
        if held is None:
            return None
        if held.data_end > live.data_end:
            what = f"the live model (run {live.run_id}, data to {live.data_end}) predates "
            what += f"the customer's latest data: run {held.run_id}'s model (data to "
        else:
            what = f"a model newer than the live one (run {live.run_id}) was trained: "
            what += f"run {held.run_id}'s model (also data to "
        return cls(
            run_id=held.run_id,
            trained_at=held.trained_at,
            data_end=held.data_end,
            status=held.status,
            reason=held.reason,
            message=f"{what}{held.data_end}) was {held.status}, not made live: {held.reason}",
        )


_NEWER_MODEL = (
    "Only when the customer's newest model was not made live (rejected by the quality "
    "gate): that model's run, data and why, so a caller knows the answer comes from an "
    "older model than its latest data"
)


_FREQUENCY = (
    "The model's frequency, the unit of its periods: D (each period a UTC day) or H (a UTC "
    "hour). Each customer's model has its own; a stack makes models of one"
)
_PERIOD_UNIT = "The unit of the model's periods, in words: day or hour"


class CustomerForecast(BaseModel):
    customer_id: str = Field(pattern=CUSTOMER_ID_PATTERN)
    model_version: int = Field(description="The customer's live model version (1, 2, ...)")
    run_id: str = Field(description="The training run that produced the model")
    trained_at: UtcDatetime
    data_end: date = Field(description="Last day of history the model was fitted on")
    frequency: Frequency = Field(description=_FREQUENCY)
    period_unit: str = Field(description=_PERIOD_UNIT, examples=["day", "hour"])
    period: int = Field(
        description="Periods forecast after the history's end, in the model's unit "
        "(period_unit): days of a daily model, hours of an hourly one"
    )
    forecast: list[ForecastPoint]
    quantiles: list[float] = Field(
        default_factory=list,
        exclude_if=_empty,
        description="Only when asked for: the quantiles each point carries, ascending",
    )
    clipped_at_zero: int = Field(
        default=0,
        ge=0,
        exclude_if=_empty,
        description=(
            "Only when the model forecast values below 0: how many of this answer's values "
            "(yhat, bounds, quantiles) were raised to 0, as consumption is never negative"
        ),
    )
    newer_model: NewerModel | None = Field(
        default=None, exclude_if=_empty, description=_NEWER_MODEL
    )


class HoldoutAccuracy(BaseModel):
    """How the model did out of sample, beside seasonal naive on the same days: on its
    rolling-origin backtest (``windows`` of ``holdout_days`` each)."""

    holdout_days: int = Field(description="Days forecast from each origin")
    windows: int = Field(description="Backtest windows scored")
    wape: float | None = Field(default=None, description="sum|F - A| / sum|A| of the model")
    naive_wape: float | None = Field(default=None, description="The same of seasonal naive")
    smape: float = Field(description="Symmetric MAPE of the model on those days, 0..2")
    mae: float = Field(description="Mean absolute error of the model on those days")
    naive_smape: float = Field(
        description="Symmetric MAPE of a seasonal-naive forecast (same weekday last week)"
    )
    naive_mae: float = Field(description="Mean absolute error of the seasonal-naive forecast")


class CustomerModel(BaseModel):
    """A customer's live model as the API shows it: which model, what it was fitted on and
    how well it did; not where the registry or the buckets keep it."""

    customer_id: str = Field(pattern=CUSTOMER_ID_PATTERN)
    model_version: int = Field(description="The customer's live model version (1, 2, ...)")
    run_id: str = Field(description="The training run that produced the model")
    target_model: str = Field(
        description="The TargetModel to name when invoking the multi-model endpoint directly"
    )
    trained_at: UtcDatetime
    live_since: UtcDatetime = Field(description="When this version became the live model")
    data_start: date = Field(description="First day of history the model was fitted on")
    data_end: date = Field(description="Last day of history the model was fitted on")
    rows: int = Field(description="Periods of history the model was fitted on")
    frequency: Frequency = Field(description=_FREQUENCY)
    period_unit: str = Field(description=_PERIOD_UNIT, examples=["day", "hour"])
    max_period: int = Field(
        description=f"The longest forecast the model serves, in its periods ({period_limits()})"
    )
    metrics: HoldoutAccuracy | None = Field(
        description="The backtest's errors beside seasonal naive's; null for a cold start "
        "(model_kind cold_start: too short a history to backtest)"
    )
    newer_model: NewerModel | None = Field(
        default=None, exclude_if=_empty, description=_NEWER_MODEL
    )
    model_kind: str = Field(
        description=f"The model family: {', '.join(family.kind for family in FAMILIES)}",
    )
    backtest: Backtest = Field(
        description="Every candidate family's backtest errors, the chosen one and the runner-up",
    )

    @classmethod
    def from_live(cls, live: LiveModel) -> CustomerModel:
        return cls(
            customer_id=live.customer_id,
            model_version=live.model_version,
            run_id=live.run_id,
            target_model=live.target_model,
            trained_at=live.trained_at,
            live_since=live.updated_at,
            data_start=live.data_start,
            data_end=live.data_end,
            rows=live.rows,
            frequency=live.frequency,
            period_unit=live.frequency.unit,
            max_period=live.frequency.max_period,
            metrics=None
            if live.metrics is None
            else HoldoutAccuracy.model_validate(live.metrics.model_dump()),
            newer_model=NewerModel.of(live),
            model_kind=live.model_kind,
            backtest=live.backtest,
        )


class ForecastError(Exception):
    """Something the caller is told about; the message says what to do."""


class InvalidRequestError(ForecastError):
    """A request the API cannot answer as asked (a parameter it does not know)."""


class UnknownCustomerError(ForecastError):
    def __init__(self, customer_id: str) -> None:
        super().__init__(
            f"customer {customer_id!r} has no live model: check the id; if its readings were "
            "uploaded, `fleetcast status` says why its training failed (a customer needs a "
            "whole day of readings for a cold start, 28 days by default for a model of its own)"
        )


class EndpointFailedError(ForecastError):
    """The endpoint answered, with an error that retrying will not fix."""


class EndpointUnavailableError(ForecastError):
    """The endpoint is not ready, busy or unreachable: worth retrying shortly."""

    def __init__(self, message: str, retry_after_seconds: int) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class NoEndpointError(ForecastError):
    """The stack was deployed without its endpoint (no inference image yet, or
    CreateEndpoint=false): retrying will not help until it is deployed with one."""

    def __init__(self) -> None:
        super().__init__(
            "this stack has no forecast endpoint yet: push the inference image "
            "(`make images`) and deploy again with InferenceImageUri set and "
            "CreateEndpoint=true (samconfig.toml's dev environment sets "
            "CreateEndpoint=false: an endpoint bills its instances by the hour); "
            "GET /customers/{customer_id}/model works meanwhile"
        )


class LiveModels(Protocol):
    """Where live models are looked up: the registry itself, or a cache in front of it."""

    def live(self, customer_id: str) -> LiveModel | None: ...


class ForecastsByModel(Protocol):
    """Where a model's forecast comes from: the multi-model endpoint
    (:class:`~fleetcast_common.forecast_endpoint.ForecastEndpoint`)."""

    def forecast(
        self, target_model: str, period: int, quantiles: tuple[float, ...] = ()
    ) -> EndpointForecast: ...


class LiveModelCache:
    """A warm function's short memory of live-model lookups.

    The registry read was most of a warm forecast request's work; a Lambda execution
    environment serves one request at a time and many in a row, so each keeps what it
    read for ``ttl_seconds``. What that means when a model is promoted:

    - for at most ``ttl_seconds`` a warm environment may still answer from the previous
      live model; the answer names that model (``model_version``, ``run_id``,
      ``trained_at`` all come from the one entry), so it is an older forecast, never a
      mixed one, and its archive is still in S3 (versions are never overwritten);
    - a customer without a live model is not remembered: one trained a moment ago is
      served at once;
    - :func:`customer_forecast` drops the entry and reads again when the endpoint cannot
      serve the model it names, so a stale entry never turns into an error.

    Bounded: the least recently used of ``max_entries`` goes first.
    """

    def __init__(
        self,
        registry: LiveModels,
        ttl_seconds: float,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._registry = registry
        self.ttl_seconds = ttl_seconds
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, LiveModel]] = OrderedDict()

    def live(self, customer_id: str) -> LiveModel | None:
        now = self._clock()
        cached = self._entries.get(customer_id)
        if cached is not None and now - cached[0] < self.ttl_seconds:
            self._entries.move_to_end(customer_id)
            return cached[1]
        model = self._registry.live(customer_id)
        if model is None or self.ttl_seconds <= 0:
            self._entries.pop(customer_id, None)
            return model
        self._entries[customer_id] = (now, model)
        self._entries.move_to_end(customer_id)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return model

    def forget(self, customer_id: str) -> bool:
        """Drop the customer's entry; whether there was one."""
        return self._entries.pop(customer_id, None) is not None


def parse_quantiles(text: str) -> tuple[float, ...]:
    """The ``quantiles`` query parameter: 1 to :data:`MAX_QUANTILES` comma-separated
    decimals in (0, 1), returned ascending without repeats. :data:`QUANTILES_SCHEMA` is
    how the OpenAPI document says so."""
    items = text.split(",")
    if len(items) > MAX_QUANTILES:
        raise InvalidRequestError(
            f"{QUANTILES_PARAMETER}: at most {MAX_QUANTILES} quantiles, not {len(items)}"
        )
    values = []
    for item in items:
        item = item.strip()
        if not _DECIMAL.fullmatch(item):
            raise InvalidRequestError(
                f"{QUANTILES_PARAMETER}: {item!r} is not a decimal number; send "
                f"comma-separated numbers between 0 and 1, e.g. "
                f"{QUANTILES_PARAMETER}={QUANTILES_EXAMPLE}"
            )
        values.append(float(item))
    try:
        return normalise_quantiles(values)
    except ValueError as error:
        raise InvalidRequestError(f"{QUANTILES_PARAMETER}: {error}") from None


# What parse_quantiles accepts, as an OpenAPI parameter says it: an array of numbers in
# (QUANTILE_ABOVE, QUANTILE_BELOW), sent comma-separated in one query parameter.
QUANTILES_SCHEMA: dict[str, Any] = {
    "style": "form",
    "explode": False,
    "schema": {
        "type": "array",
        "items": {
            "type": "number",
            "exclusiveMinimum": QUANTILE_ABOVE,
            "exclusiveMaximum": QUANTILE_BELOW,
        },
        "minItems": 1,
        "maxItems": MAX_QUANTILES,
        "examples": [[float(value) for value in QUANTILES_EXAMPLE.split(",")]],
    },
}


def live_model(customer_id: str, registry: LiveModels) -> LiveModel:
    # The handler validates the path parameter already; the domain does not rely on it.
    if not is_valid_customer_id(customer_id):
        raise InvalidRequestError(str(InvalidCustomerIdError(customer_id)))
    live = registry.live(customer_id)
    if live is None:
        raise UnknownCustomerError(customer_id)
    return live


def customer_model(customer_id: str, registry: LiveModels) -> CustomerModel:
    """The customer's live model, as the API shows it."""
    return CustomerModel.from_live(live_model(customer_id, registry))


def customer_forecast(
    customer_id: str,
    period: int,
    registry: LiveModels,
    endpoint: ForecastsByModel,
    quantiles: tuple[float, ...] = (),
) -> CustomerForecast:
    """The next ``period`` periods of the customer's live model, with what it was fitted
    on; with ``quantiles`` (ascending, without repeats), those quantiles at each point."""
    live = live_model(customer_id, registry)
    check_period(period, live)
    try:
        answer = _endpoint_forecast(customer_id, live, period, endpoint, quantiles)
    except EndpointFailedError:
        # A remembered lookup may name a model that has since been replaced: read the
        # registry again, and ask once more only if it names another model now.
        if not (isinstance(registry, LiveModelCache) and registry.forget(customer_id)):
            raise
        fresh = live_model(customer_id, registry)
        if fresh.run_id == live.run_id:
            raise
        live = fresh
        check_period(period, live)
        answer = _endpoint_forecast(customer_id, live, period, endpoint, quantiles)
    return CustomerForecast(
        customer_id=customer_id,
        model_version=live.model_version,
        run_id=live.run_id,
        trained_at=live.trained_at,
        data_end=live.data_end,
        frequency=live.frequency,
        period_unit=live.frequency.unit,
        period=period,
        forecast=answer.forecast,
        quantiles=list(quantiles),
        clipped_at_zero=answer.clipped_at_zero,
        newer_model=NewerModel.of(live),
    )


def check_period(period: int, live: LiveModel) -> None:
    """A period the customer's model serves: from 1 to its frequency's longest forecast,
    in its own unit (the inference container refuses the same)."""
    frequency = live.frequency
    if not 1 <= period <= frequency.max_period:
        raise InvalidRequestError(
            f"period must be a whole number of {frequency.units} from 1 to "
            f"{frequency.max_period} for customer {live.customer_id!r}, whose model is "
            f"{frequency.adjective} (a period is one {frequency.unit}), not {period}"
        )


def _endpoint_forecast(
    customer_id: str,
    live: LiveModel,
    period: int,
    endpoint: ForecastsByModel,
    quantiles: tuple[float, ...],
) -> EndpointForecast:
    # The TargetModel is rebuilt from the (allow-listed) customer id and the run id, never
    # taken from the registry as it is: a record naming any other object is refused.
    if (
        live.customer_id != customer_id
        or not is_valid_run_id(live.run_id)
        or live.target_model != layout.target_model(customer_id, live.run_id)
    ):
        raise EndpointFailedError(
            f"the registry's live model of {customer_id!r} names a TargetModel that is not "
            "this customer's; the registry needs fixing"
        )
    answer = endpoint.forecast(live.target_model, period, quantiles)
    # An answer about another customer means the published archive is not the one
    # registered.
    if answer.customer_id != customer_id or answer.model_version != live.run_id:
        # (Not saying whose model answered: that would tell one caller about another.)
        raise EndpointFailedError(
            f"the endpoint answered with a model other than the live model of {customer_id!r} "
            f"(run {live.run_id}): its published archive is not the one registered"
        )
    _check_answer(answer, quantiles)
    return answer


def _check_answer(answer: EndpointForecast, quantiles: tuple[float, ...]) -> None:
    """The answer has what was asked for, and nothing below the floor: a container that
    predates quantiles or clipping is reported, never passed on as if it were right."""
    expected = [quantile_key(quantile) for quantile in quantiles]
    for point in answer.forecast:
        if list(point.quantiles) != expected:
            raise EndpointFailedError(
                f"the forecast endpoint answered quantiles {list(point.quantiles)} where "
                f"{expected} were asked for: its inference image needs updating"
            )
        values = [point.yhat, point.yhat_lower, point.yhat_upper, *point.quantiles.values()]
        if any(value is not None and value < FORECAST_FLOOR for value in values):
            raise EndpointFailedError(
                f"the forecast endpoint answered a value below {FORECAST_FLOOR} on {point.ds}: "
                "its inference image needs updating"
            )

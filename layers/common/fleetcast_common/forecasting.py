"""The forecast API's domain: a customer's live model from the registry, its forecast from
the multi-model endpoint, and what can go wrong on the way.

Pure apart from the two adapters it is handed (:class:`~fleetcast_common.registry.ModelRegistry`
and :class:`~fleetcast_common.forecast_endpoint.ForecastEndpoint`); the handler turns the
errors below into HTTP responses, in one place.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from fleetcast_common.ids import CUSTOMER_ID_PATTERN
from fleetcast_common.registry import LiveModel, ModelRegistry
from fleetcast_common.settings import _FromEnvironment

if TYPE_CHECKING:
    from fleetcast_common.forecast_endpoint import ForecastEndpoint

# The horizons the inference container serves (fleetcast_inference.contract, which the
# layer does not ship; a unit test keeps the two equal).
MIN_PERIOD = 1
MAX_PERIOD = 365
DEFAULT_PERIOD = 7


class ForecastApiSettings(_FromEnvironment):
    registry_table: str = Field(alias="REGISTRY_TABLE", min_length=1)
    endpoint_name: str = Field(alias="ENDPOINT_NAME", pattern=r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")


class ForecastPoint(BaseModel):
    ds: str = Field(description="Date (YYYY-MM-DD) or date and time of the forecast period")
    yhat: float = Field(description="Prophet's point forecast")
    yhat_lower: float | None = Field(description="Lower bound of the 80 % interval")
    yhat_upper: float | None = Field(description="Upper bound of the 80 % interval")


class EndpointForecast(BaseModel):
    """What the inference container answers to ``{"period": N}``."""

    customer_id: str
    model_version: str = Field(description="The training run id of the model that answered")
    forecast: list[ForecastPoint]


class CustomerForecast(BaseModel):
    customer_id: str = Field(pattern=CUSTOMER_ID_PATTERN)
    model_version: int = Field(description="The customer's live model version (1, 2, ...)")
    run_id: str = Field(description="The training run that produced the model")
    trained_at: datetime
    data_end: date = Field(description="Last day of history the model was fitted on")
    period: int = Field(description="Periods forecast after data_end")
    forecast: list[ForecastPoint]


class ForecastError(Exception):
    """Something the caller is told about; the message says what to do."""


class InvalidRequestError(ForecastError):
    """A request the API cannot answer as asked (a parameter it does not know)."""


class UnknownCustomerError(ForecastError):
    def __init__(self, customer_id: str) -> None:
        super().__init__(
            f"customer {customer_id!r} has no live model: check the id, or train one by "
            "uploading its readings"
        )


class EndpointFailedError(ForecastError):
    """The endpoint answered, with an error that retrying will not fix."""


class EndpointUnavailableError(ForecastError):
    """The endpoint is not ready, busy or unreachable: worth retrying shortly."""

    def __init__(self, message: str, retry_after_seconds: int) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


def live_model(customer_id: str, registry: ModelRegistry) -> LiveModel:
    live = registry.live(customer_id)
    if live is None:
        raise UnknownCustomerError(customer_id)
    return live


def customer_forecast(
    customer_id: str, period: int, registry: ModelRegistry, endpoint: ForecastEndpoint
) -> CustomerForecast:
    """The next ``period`` periods of the customer's live model, with what it was fitted on."""
    live = live_model(customer_id, registry)
    answer = endpoint.forecast(live.target_model, period)
    # The TargetModel comes from the registry; an answer about another customer means the
    # published archive is not the one registered.
    if answer.customer_id != customer_id or answer.model_version != live.run_id:
        # (Not saying whose model answered: that would tell one caller about another.)
        raise EndpointFailedError(
            f"the endpoint answered with a model other than the live model of {customer_id!r} "
            f"(run {live.run_id}): its published archive is not the one registered"
        )
    return CustomerForecast(
        customer_id=customer_id,
        model_version=live.model_version,
        run_id=live.run_id,
        trained_at=live.trained_at,
        data_end=live.data_end,
        period=period,
        forecast=answer.forecast,
    )

"""The SageMaker multi-model endpoint container contract, as fleetcast uses it.

Shared by the inference container, the local stack that hosts it, the forecast API and
the CLI. SageMaker starts the image with ``serve``, talks to it on port 8080 and puts
every model it asks the container to load under ``/opt/ml/models/<model_name>/model``;
the local stack points ``FLEETCAST_OPT_ML`` at a scratch folder instead and picks the
port with ``SAGEMAKER_BIND_TO_PORT``.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

# The horizons an invoke may ask for, kept where the container and the API import them.
from fleetcast_contracts.horizons import DEFAULT_PERIOD, MAX_PERIOD, MIN_PERIOD  # noqa: F401

# SageMaker's load request names ``/opt/ml/models/<model_name>/model``; a url outside
# this folder is refused, so a load request cannot make the container read other files.
MODELS_DIR = "/opt/ml/models"

PORT_ENV = "SAGEMAKER_BIND_TO_PORT"
DEFAULT_PORT = 8080
BIND_HOST_ENV = "FLEETCAST_BIND_HOST"
DEFAULT_BIND_HOST = "0.0.0.0"  # noqa: S104 - SageMaker reaches the container from outside it
MULTI_MODEL_ENV = "SAGEMAKER_MULTI_MODEL"
MULTI_MODEL_LABEL = "com.amazonaws.sagemaker.capabilities.multi-models"

# Memory the loaded models (and the cached answers beside them) may use, in MiB; a
# load that would pass it is answered 507 so the platform unloads idle models first.
# Unset: DEFAULT_BUDGET_FRACTION of the container's memory limit.
MEMORY_BUDGET_ENV = "FLEETCAST_MEMORY_BUDGET_MB"
DEFAULT_BUDGET_FRACTION = 0.7
LOG_LEVEL_ENV = "FLEETCAST_LOG_LEVEL"

PING_PATH = "/ping"
MODELS_PATH = "/models"
INVOKE_SUFFIX = "/invoke"
# Single-model style route; the model is the one the header names.
INVOCATIONS_PATH = "/invocations"
# The InvokeEndpoint TargetModel, passed through by SageMaker (for logging: the path's
# model_name is the key the container loaded the model under).
TARGET_MODEL_HEADER = "X-Amzn-SageMaker-Target-Model"

# GET /models pagination: query parameters and response field.
LIST_LIMIT_PARAM = "limit"
LIST_TOKEN_PARAM = "next_page_token"  # noqa: S105 - a parameter name, not a secret
LIST_TOKEN_FIELD = "nextPageToken"  # noqa: S105 - a field name, not a secret
DEFAULT_LIST_LIMIT = 100
MAX_LIST_LIMIT = 1000


# Every error the container answers is a JSON object with these two fields.
ERROR_CODE_FIELD = "error"
ERROR_MESSAGE_FIELD = "message"


def error_body(code: str, message: str) -> dict[str, str]:
    """The JSON error body the container answers with."""
    return {ERROR_CODE_FIELD: code, ERROR_MESSAGE_FIELD: message}


def error_body_code(body: bytes) -> str | None:
    """The error code of a container's JSON error body, else None (not JSON, or no code)."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    code = document.get(ERROR_CODE_FIELD) if isinstance(document, dict) else None
    return str(code) if code is not None else None


class InvokeRequest(BaseModel):
    """What InvokeEndpoint's body asks a model for: ``{"period": N}``, and
    ``"quantiles": [...]`` only when some are asked for (the body without them is the one
    the container always took). The forecast API writes it (:meth:`body`); the container
    reads it with messages that say what to send instead (``protocol.parse_invoke_body``)."""

    model_config = ConfigDict(frozen=True)

    period: int = Field(ge=MIN_PERIOD, le=MAX_PERIOD)
    # Ascending, without repeats; empty when none were asked for.
    quantiles: tuple[float, ...] = ()

    def body(self) -> str:
        """The body, as the forecast API has always sent it (``json.dumps``'s spacing)."""
        return json.dumps(self.model_dump(mode="json", exclude_defaults=True))


def _empty(value: object) -> bool:
    return not value


class ForecastPoint(BaseModel):
    # A NaN or an infinity is refused, not written as JSON no client reads.
    model_config = ConfigDict(allow_inf_nan=False)

    ds: str = Field(
        description=(
            "The forecast period: its date (YYYY-MM-DD) for a daily model, its start in UTC "
            "(RFC 3339, e.g. 2024-09-01T13:00:00Z) for an hourly one"
        ),
        json_schema_extra={"anyOf": [{"format": "date"}, {"format": "date-time"}]},
    )
    yhat: float = Field(description="The model's point forecast, at least 0")
    yhat_lower: float | None = Field(description="Lower bound of the 80 % interval, at least 0")
    yhat_upper: float | None = Field(description="Upper bound of the 80 % interval, at least 0")
    # Absent unless asked for: an answer without quantiles is what it was before them.
    quantiles: dict[str, float | None] = Field(
        default_factory=dict,
        exclude_if=_empty,
        description=(
            "Only when quantiles were asked for: each quantile (its shortest decimal, e.g. "
            '"0.1") to its value, from the same 1000 seeded uncertainty samples as the '
            "interval, at least 0; null like the bounds for a model fitted without samples"
        ),
        examples=[{"0.1": 512.4, "0.5": 601.9, "0.9": 688.0}],
    )


class EndpointForecast(BaseModel):
    """What the inference container answers to an :class:`InvokeRequest`: written by the
    container (``protocol.render_forecast``), read by the forecast API."""

    customer_id: str
    model_version: str = Field(description="The training run id of the model that answered")
    forecast: list[ForecastPoint]
    # Absent when no value was raised to 0.
    clipped_at_zero: int = Field(default=0, ge=0, exclude_if=_empty)

    def body(self) -> bytes:
        return self.model_dump_json().encode()

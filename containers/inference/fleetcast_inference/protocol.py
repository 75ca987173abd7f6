"""The wire formats: request bodies and query strings in, JSON documents out.

Every parser raises :class:`BadRequestError` with a message that says what to send
instead; nothing here touches the registry.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

import numpy as np

from fleetcast_contracts.frequency import Frequency, period_limits
from fleetcast_contracts.inference import (
    DEFAULT_LIST_LIMIT,
    LIST_LIMIT_PARAM,
    LIST_TOKEN_FIELD,
    LIST_TOKEN_PARAM,
    MAX_LIST_LIMIT,
    MAX_PERIOD,
    MIN_PERIOD,
    EndpointForecast,
    ForecastPoint,
    InvokeRequest,
    error_body,
)
from fleetcast_contracts.quantiles import normalise_quantiles, quantile_key
from fleetcast_forecasters.forecast import Forecast
from fleetcast_inference.errors import BadRequestError, InferenceError
from fleetcast_inference.registry import LoadedModelStatus, ServedModel

# The request's field names, as the contract declares them.
PERIOD_FIELD, QUANTILES_FIELD = tuple(InvokeRequest.model_fields)
_EXAMPLE = f'{{"{PERIOD_FIELD}": 7}}'
_QUANTILES_EXAMPLE = f'{{"{PERIOD_FIELD}": 7, "{QUANTILES_FIELD}": [0.1, 0.5, 0.9]}}'
_MAX_NAME_LENGTH = 1024


@dataclass(frozen=True)
class LoadRequest:
    model_name: str
    url: str


@dataclass(frozen=True)
class ListRequest:
    after: str | None
    limit: int


def parse_invoke_body(body: bytes) -> InvokeRequest:
    """The period and quantiles asked for. Also accepts the public AWS sample's body, a
    JSON string that itself holds the JSON object."""
    document = _json_document(
        body, f"send {_EXAMPLE} with a period from {MIN_PERIOD} to {MAX_PERIOD} ({period_limits()})"
    )
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except json.JSONDecodeError as error:
            raise BadRequestError(
                f"the body is a JSON string that does not hold JSON ({error.msg}); send {_EXAMPLE}"
            ) from None
    if not isinstance(document, dict):
        raise BadRequestError(
            f"the body must be a JSON object like {_EXAMPLE}, not {_kind(document)}"
        )
    unknown = sorted(set(document) - {PERIOD_FIELD, QUANTILES_FIELD})
    if unknown:
        raise BadRequestError(
            f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"the body has {PERIOD_FIELD!r} and optionally {QUANTILES_FIELD!r}"
        )
    if PERIOD_FIELD not in document:
        raise BadRequestError(f"the body lacks {PERIOD_FIELD!r}; send {_EXAMPLE}")
    period = document[PERIOD_FIELD]
    if isinstance(period, bool) or not isinstance(period, int):
        raise BadRequestError(f"{PERIOD_FIELD!r} must be an integer, not {_kind(period)}")
    if not MIN_PERIOD <= period <= MAX_PERIOD:
        raise BadRequestError(
            f"{PERIOD_FIELD!r} must be from {MIN_PERIOD} to {MAX_PERIOD} ({period_limits()}), "
            f"not {period}"
        )
    if QUANTILES_FIELD not in document:
        return InvokeRequest(period=period)
    return InvokeRequest(period=period, quantiles=_quantiles(document[QUANTILES_FIELD]))


def check_period(period: int, model: ServedModel) -> None:
    """A period the model's frequency serves (the forecast API refuses the same ones)."""
    frequency = Frequency.parse(model.frequency)
    if period > frequency.max_period:
        raise BadRequestError(
            f"{PERIOD_FIELD!r} must be from {MIN_PERIOD} to {frequency.max_period} for "
            f"{model.name!r}, {_article(frequency.adjective)} model ({frequency.units}), "
            f"not {period}"
        )


def _article(word: str) -> str:
    return f"an {word}" if word.startswith(("a", "e", "i", "o", "u", "hour")) else f"a {word}"


def _quantiles(value: object) -> tuple[float, ...]:
    """The quantiles of an invoke body: a non-empty array of numbers in (0, 1); sorted,
    without repeats."""
    if not isinstance(value, list) or not value:
        raise BadRequestError(
            f"{QUANTILES_FIELD!r} must be a non-empty array of numbers between 0 and 1, not "
            f"{'an empty array' if value == [] else _kind(value)}; send {_QUANTILES_EXAMPLE}"
        )
    for position, quantile in enumerate(value):
        if isinstance(quantile, bool) or not isinstance(quantile, int | float):
            raise BadRequestError(
                f"{QUANTILES_FIELD!r}[{position}] must be a number, not {_kind(quantile)}"
            )
        if not 0 < quantile < 1:
            raise BadRequestError(
                f"{QUANTILES_FIELD!r}[{position}] must be between 0 and 1 (exclusive), "
                f"not {quantile!r}"
            )
    try:
        return normalise_quantiles(value)
    except ValueError as error:
        raise BadRequestError(f"{QUANTILES_FIELD!r}: {error}") from None


def parse_load_body(body: bytes) -> LoadRequest:
    example = '{"model_name": "<name>", "url": "/opt/ml/models/<name>/model"}'
    document = _json_document(body, f"send {example}")
    if not isinstance(document, dict):
        raise BadRequestError(
            f"the body must be a JSON object like {example}, not {_kind(document)}"
        )
    name = document.get("model_name")
    url = document.get("url")
    if not isinstance(name, str) or not name:
        raise BadRequestError(f"'model_name' must be a non-empty string; send {example}")
    if len(name) > _MAX_NAME_LENGTH or not name.isprintable():
        raise BadRequestError(
            f"'model_name' must be at most {_MAX_NAME_LENGTH} printable characters"
        )
    if not isinstance(url, str) or not url:
        raise BadRequestError(f"'url' must be a non-empty string; send {example}")
    return LoadRequest(name, url)


def parse_list_query(query: str) -> ListRequest:
    try:
        params = parse_qs(query, keep_blank_values=True, strict_parsing=False)
    except ValueError as error:
        raise BadRequestError(f"unreadable query string: {error}") from None
    limit = DEFAULT_LIST_LIMIT
    if LIST_LIMIT_PARAM in params:
        text = params[LIST_LIMIT_PARAM][-1]
        if not text.isdigit() or not 1 <= int(text) <= MAX_LIST_LIMIT:
            raise BadRequestError(
                f"{LIST_LIMIT_PARAM} must be a whole number from 1 to {MAX_LIST_LIMIT}, not {text!r}"
            )
        limit = int(text)
    token = params.get(LIST_TOKEN_PARAM, [""])[-1]
    return ListRequest(after=decode_page_token(token) if token else None, limit=limit)


def encode_page_token(after: str) -> str:
    return base64.urlsafe_b64encode(after.encode()).decode().rstrip("=")


def decode_page_token(token: str) -> str:
    try:
        return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, ValueError):
        raise BadRequestError(
            f"{LIST_TOKEN_PARAM} {token!r} is not a token this container gave out"
        ) from None


def render_forecast(model: ServedModel, forecast: Forecast, clipped: int = 0) -> bytes:
    """The answer (:class:`EndpointForecast`): one point per period, with ``quantiles``
    only when some were asked for and ``clipped_at_zero`` (how many values were raised
    to 0) only when any were."""
    # Days as plain dates; times with their offset (RFC 3339): a history's times are UTC's.
    if model.forecaster.daily_dates:
        dates = np.datetime_as_string(forecast.dates, unit="D").tolist()
    else:
        dates = np.datetime_as_string(forecast.dates, unit="s", timezone="UTC").tolist()
    yhat = forecast.yhat.tolist()
    lower = forecast.yhat_lower.tolist() if forecast.yhat_lower is not None else [None] * len(yhat)
    upper = forecast.yhat_upper.tolist() if forecast.yhat_upper is not None else [None] * len(yhat)
    per_period: list[dict[str, float | None]] = [{}] * len(yhat)
    if forecast.quantiles:
        keys = [quantile_key(quantile) for quantile in forecast.quantiles]
        values = forecast.quantile_values
        rows = values.T.tolist() if values is not None else [[None] * len(keys)] * len(yhat)
        per_period = [dict(zip(keys, row, strict=True)) for row in rows]
    points = [
        ForecastPoint(ds=ds, yhat=y, yhat_lower=lo, yhat_upper=hi, quantiles=q)
        for ds, y, lo, hi, q in zip(dates, yhat, lower, upper, per_period, strict=True)
    ]
    return EndpointForecast(
        customer_id=model.customer_id,
        model_version=model.model_version,
        forecast=points,
        clipped_at_zero=clipped,
    ).body()


def render_model_list(models: list[ServedModel], after: str | None) -> bytes:
    document: dict[str, Any] = {
        "models": [{"modelName": model.name, "modelUrl": model.url} for model in models]
    }
    # Only when another page follows: SageMaker asks again while the field is present.
    if after is not None:
        document[LIST_TOKEN_FIELD] = encode_page_token(after)
    return _encode(document)


def render_model_status(status: LoadedModelStatus) -> bytes:
    model = status.model
    return _encode(
        {
            "modelName": model.name,
            "modelUrl": model.url,
            "customerId": model.customer_id,
            "modelVersion": model.model_version,
            "modelKind": model.model_kind,
            "frequency": model.frequency,
            "dataStart": model.data_start,
            "dataEnd": model.data_end,
            "memoryBytes": model.memory_bytes,
            "loadedAt": _timestamp(status.loaded_at),
            "lastInvokedAt": _timestamp(status.last_used_at),
            "invocations": status.invocations,
            "cachedAnswers": status.cached_answers,
        }
    )


def render_loaded(model: ServedModel) -> bytes:
    return _encode(
        {
            "modelName": model.name,
            "modelUrl": model.url,
            "customerId": model.customer_id,
            "modelVersion": model.model_version,
            "memoryBytes": model.memory_bytes,
        }
    )


def render_unloaded(model: ServedModel) -> bytes:
    return _encode({"modelName": model.name, "status": "unloaded"})


def render_error(error: InferenceError) -> bytes:
    return _encode(error_body(error.code, str(error)))


def render_ping() -> bytes:
    return b'{"status":"healthy"}'


def _json_document(body: bytes, hint: str) -> object:
    if not body.strip():
        raise BadRequestError(f"the body is empty; {hint}")
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        reason = error.msg if isinstance(error, json.JSONDecodeError) else "not UTF-8"
        raise BadRequestError(f"the body is not JSON ({reason}); {hint}") from None


def _kind(value: object) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if value is None:
        return "null"
    return "an array" if isinstance(value, list) else "an object"


def _timestamp(epoch_seconds: float | None) -> str | None:
    if epoch_seconds is None:
        return None
    return datetime.fromtimestamp(epoch_seconds, UTC).isoformat(timespec="milliseconds")


def _encode(document: object) -> bytes:
    return json.dumps(document, separators=(",", ":"), allow_nan=False).encode()

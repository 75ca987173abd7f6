"""Routing of the multi-model endpoint API, and the one place errors become responses.

:meth:`InferenceApp.dispatch` takes a parsed HTTP request and returns the response; the
socket side lives in :mod:`fleetcast_inference.server`, so tests call ``dispatch``
directly.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

from fleetcast_contracts.holiday_calendar import HOLIDAYS_VERSION
from fleetcast_contracts.inference import (
    INVOCATIONS_PATH,
    INVOKE_SUFFIX,
    MODELS_DIR,
    MODELS_PATH,
    PING_PATH,
    TARGET_MODEL_HEADER,
)
from fleetcast_contracts.quantiles import FORECAST_FLOOR
from fleetcast_forecasters.families import compile_archive
from fleetcast_forecasters.forecast import UnsupportedModelError as UnsupportedModel
from fleetcast_forecasters.forecast import forecast_seed
from fleetcast_inference import protocol
from fleetcast_inference.artifact import read_model_artifact
from fleetcast_inference.errors import (
    BadRequestError,
    InferenceError,
    InvalidArtifactError,
    MethodNotAllowedError,
    ModelNotLoadedError,
    RouteNotFoundError,
    UnsupportedModelError,
)
from fleetcast_inference.memory import retained_bytes
from fleetcast_inference.registry import MODEL_ENTRY_OVERHEAD_BYTES, LoadedModels, ServedModel
from fleetcast_inference.settings import InferenceSettings, model_path

logger = logging.getLogger(__name__)

_MODEL_PREFIX = MODELS_PATH + "/"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str = ""
    # Names in lower case.
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"


class InferenceApp:
    def __init__(self, settings: InferenceSettings, registry: LoadedModels | None = None) -> None:
        self.settings = settings
        self.registry = registry or LoadedModels(settings.memory_budget_bytes)

    def dispatch(self, request: Request) -> Response:
        try:
            return self._route(request)
        except InferenceError as error:
            if error.status >= 500 and error.status != 507:
                logger.error("%s %s failed: %s", request.method, request.path, error)
            return Response(error.status, protocol.render_error(error))
        except Exception:
            logger.exception("%s %s failed", request.method, request.path)
            failure = InferenceError("unexpected error; the container log has the details")
            return Response(failure.status, protocol.render_error(failure))

    def _route(self, request: Request) -> Response:
        method, path = request.method, request.path
        if path == PING_PATH:
            _allow(method, "GET")
            return Response(200, protocol.render_ping())
        if path == MODELS_PATH:
            _allow(method, "GET", "POST")
            return self.list_models(request) if method == "GET" else self.load_model(request)
        if path == INVOCATIONS_PATH:
            _allow(method, "POST")
            target_model = request.header(TARGET_MODEL_HEADER)
            if not target_model:
                raise BadRequestError(f"{INVOCATIONS_PATH} needs the {TARGET_MODEL_HEADER} header")
            return self.invoke(target_model, request)
        if path.startswith(_MODEL_PREFIX) and len(path) > len(_MODEL_PREFIX):
            rest = path[len(_MODEL_PREFIX) :]
            if rest.endswith(INVOKE_SUFFIX) and len(rest) > len(INVOKE_SUFFIX):
                _allow(method, "POST")
                return self.invoke(unquote(rest[: -len(INVOKE_SUFFIX)]), request)
            _allow(method, "GET", "DELETE")
            name = unquote(rest)
            return self.describe_model(name) if method == "GET" else self.unload_model(name)
        raise RouteNotFoundError(f"no route for {method} {path}")

    def load_model(self, request: Request) -> Response:
        load = protocol.parse_load_body(request.body)
        path = model_path(load.url, self.settings)
        if path is None:
            roots = {MODELS_DIR, str(self.settings.models_root)}
            raise BadRequestError(
                f"url {load.url!r} must be an absolute path under {' or '.join(sorted(roots))}"
            )

        def build() -> ServedModel:
            return build_served_model(load.model_name, load.url, path)

        model = self.registry.load(load.model_name, build)
        usage = self.registry.usage()
        logger.info(
            "loaded %s (customer %s, version %s): %d bytes; models %d, %d of %d bytes used",
            model.name,
            model.customer_id,
            model.model_version,
            model.memory_bytes,
            usage.models,
            usage.model_bytes + usage.cache_bytes,
            usage.budget_bytes,
        )
        return Response(200, protocol.render_loaded(model))

    def list_models(self, request: Request) -> Response:
        listing = protocol.parse_list_query(request.query)
        models, after = self.registry.page(listing.after, listing.limit)
        return Response(200, protocol.render_model_list(models, after))

    def describe_model(self, name: str) -> Response:
        return Response(200, protocol.render_model_status(self.registry.status(name)))

    def unload_model(self, name: str) -> Response:
        model = self.registry.unload(name)
        logger.info("unloaded %s", name)
        return Response(200, protocol.render_unloaded(model))

    def invoke(self, name: str, request: Request) -> Response:
        invoke = protocol.parse_invoke_body(request.body)

        def compute(model: ServedModel) -> bytes:
            protocol.check_period(invoke.period, model)
            # The seed leaves the period and the quantiles out: a day's interval is the
            # same whatever period is asked for, with or without quantiles.
            seed = forecast_seed(model.model_version)
            forecast = model.forecaster.forecast(invoke.period, seed, invoke.quantiles)
            clipped_forecast, clipped = forecast.clipped_at(FORECAST_FLOOR)
            return protocol.render_forecast(model, clipped_forecast, clipped)

        try:
            # One cached answer per period and quantile set: the default path is unchanged.
            key = (invoke.period, invoke.quantiles)
            return Response(200, self.registry.answer(name, key, compute))
        except ModelNotLoadedError:
            target_model = request.header(TARGET_MODEL_HEADER)
            if target_model and target_model != name:
                raise ModelNotLoadedError(
                    f"model {name!r} (TargetModel {target_model!r}) is not loaded"
                ) from None
            raise


def build_served_model(name: str, url: str, path: Path) -> ServedModel:
    """Read and compile the artifact at ``path`` (its family is its metadata's
    ``model_kind``); measure what the result holds."""
    model_json, metadata = read_model_artifact(path)
    try:
        forecaster = compile_archive(model_json, metadata.model_kind, metadata.frequency)
    except UnsupportedModel as error:
        raise UnsupportedModelError(str(error)) from None
    except ValueError as error:
        raise InvalidArtifactError(str(error)) from None
    calendar = metadata.holiday_calendar
    if calendar is not None and calendar.holidays_version != HOLIDAYS_VERSION:
        # Country holidays are regenerated here for the forecast's years: another release
        # of the package may date or name a holiday differently than training saw it.
        logger.warning(
            "model %s (customer %s) was fitted with holidays %s; this container has %s",
            name,
            metadata.customer_id,
            calendar.holidays_version,
            HOLIDAYS_VERSION,
        )
    model = ServedModel(
        name=name,
        url=url,
        customer_id=metadata.customer_id,
        model_version=metadata.run_id,
        model_kind=metadata.model_kind,
        frequency=metadata.frequency,
        data_start=metadata.data_start.isoformat(),
        data_end=metadata.data_end.isoformat(),
        forecaster=forecaster,
    )
    return dataclasses.replace(
        model, memory_bytes=retained_bytes(model) + MODEL_ENTRY_OVERHEAD_BYTES
    )


def _allow(method: str, *allowed: str) -> None:
    if method not in allowed:
        raise MethodNotAllowedError(f"{method} is not allowed here; use {' or '.join(allowed)}")

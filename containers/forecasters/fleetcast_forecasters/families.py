"""Which family compiles an archive's model: its metadata's ``model_kind``.

The endpoint (:mod:`fleetcast_inference.app`) and the training job's forecast export
(:mod:`fleetcast_training.export`) both call :func:`compile_archive`, so every family is
served and exported by the same path, with the same seed, zero floor and caching. A new
family is one module with a ``FAMILY`` (kind and ``compile``) and its line in the family
catalogue (:mod:`fleetcast_contracts.families`).
"""

from __future__ import annotations

import functools
import importlib
import json
from typing import Any, Protocol

import numpy as np

from fleetcast_contracts.families import FAMILIES
from fleetcast_forecasters.forecast import Forecaster, default_horizon, pandas_alias
from fleetcast_forecasters.gaussian import calibrated

# model_kind -> the module whose FAMILY compiles it (the family catalogue,
# fleetcast_contracts.families), imported on first use: an endpoint serving only Prophet
# models never imports the others, and the reverse.
_MODULES = {entry.kind: entry.module for entry in FAMILIES}


class ServingFamily(Protocol):
    """The serving half of a model family: a fitted model, as its archive's ``model.json``
    holds it (the text, or the parsed object the training job has in hand), into a
    :class:`Forecaster` of ``horizon`` periods after the model's history."""

    kind: str

    def compile(
        self,
        model: str | dict[str, Any],
        frequency: str,
        horizon: int,
        *,
        one_period: bool = True,
        last_history: np.datetime64 | None = None,
    ) -> Forecaster: ...


def known_kinds() -> tuple[str, ...]:
    return tuple(_MODULES)


@functools.cache
def family(kind: str) -> ServingFamily:
    """The family of ``kind``; ``ValueError`` for a kind this code does not know (an
    archive from a newer release, say)."""
    module = _MODULES.get(kind)
    if module is None:
        raise ValueError(f"unknown model_kind {kind!r} (known: {', '.join(sorted(_MODULES))})")
    found: ServingFamily = importlib.import_module(module).FAMILY
    return found


def compile_archive(
    model: str | dict[str, Any],
    model_kind: str,
    frequency: str,
    horizon: int | None = None,
    *,
    one_period: bool = True,
    last_history: np.datetime64 | None = None,
) -> Forecaster:
    """Compile a model of ``model_kind``. ``one_period=False`` may skip what only a
    one-period forecast needs (the export asks for its whole horizon); ``last_history``,
    the model's last history time when the caller knows it, may save parsing it. Raises
    :class:`~fleetcast_forecasters.forecast.UnsupportedModelError` for a model a
    period alone cannot forecast and ``ValueError`` for anything that is not a fitted model
    of that kind. ``frequency`` is a pandas alias (``D``, ``h``) or a model frequency's
    code; ``horizon`` None: the longest forecast of that frequency (its ``max_period``)."""
    if horizon is None:
        horizon = default_horizon(frequency)
    if isinstance(model, str):
        try:
            model = json.loads(model)
        except json.JSONDecodeError as error:
            raise ValueError(f"model.json is not JSON: {error}") from None
        if not isinstance(model, dict):
            raise ValueError("model.json is not a fitted model (not an object)")
    forecaster = family(model_kind).compile(
        model, pandas_alias(frequency), horizon, one_period=one_period, last_history=last_history
    )
    # (the interval the model's backtest calibrated, whatever the family simulates)
    return calibrated(forecaster, model)

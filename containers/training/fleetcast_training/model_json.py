"""A fitted model's ``model.json``: the JSON ``prophet.serialize.model_to_json`` writes.

``model_to_json`` is ``json.dumps(model_to_dict(model))``. Training writes the same JSON
value with orjson: the same keys in the same order, every number the same float (both
print a float's shortest round-trip repr), only without the spaces after ``,`` and ``:``.
``model_from_json`` and the endpoint read it as they read Prophet's text. For a two-year
daily model json.dumps takes about 1.2 ms, most of it printing the fitted parameters'
floats (``params["trend"]`` has one per day); orjson about a tenth of that.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson


def encode_model(model: dict[str, Any]) -> bytes:
    """``model_to_dict``'s ``model`` as JSON (UTF-8). orjson would print a NaN or an
    infinity as ``null`` where json.dumps prints ``NaN``/``Infinity``, which Prophet
    reads back: a model holding one is written by json.dumps."""
    if not _all_finite(model):
        return json.dumps(model).encode()
    return orjson.dumps(model)


def _all_finite(value: Any) -> bool:
    """No NaN or infinity among the numbers of ``value`` (dicts, lists, scalars; strings,
    such as the history's own JSON, are text to both encoders)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_all_finite(item) for item in value.values())
    if isinstance(value, list | tuple):
        try:
            # One C-level sum: finite exactly when every term is, but for terms near the
            # largest float, whose sum overflows (json.dumps then writes them, correctly).
            return math.isfinite(sum(value))
        except TypeError:  # not only numbers: lists, strings, None
            return all(_all_finite(item) for item in value)
    return True

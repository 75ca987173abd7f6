"""The rules a forecast's quantiles and values follow, for the API and the inference
container alike (the container image ships this layer).

Pure: no AWS, no third-party imports.
"""

from __future__ import annotations

from collections.abc import Iterable

# Quantiles one forecast may carry (Amazon Forecast's ForecastTypes allow as many).
MAX_QUANTILES = 20
# A quantile is strictly between these two.
QUANTILE_ABOVE = 0.0
QUANTILE_BELOW = 1.0
# Forecasts are of consumption: no value the container answers is below this.
FORECAST_FLOOR = 0.0
# How a list of quantiles is written in a request (the API's and the CLI's).
QUANTILES_EXAMPLE = "0.1,0.5,0.9"


def normalise_quantiles(quantiles: Iterable[float]) -> tuple[float, ...]:
    """Ascending, without repeats; ``ValueError`` naming the problem for an empty set,
    a value outside (0, 1) or more than :data:`MAX_QUANTILES` different values."""
    values = [float(quantile) for quantile in quantiles]
    if not values:
        raise ValueError("give at least one quantile")
    for quantile in values:
        if not QUANTILE_ABOVE < quantile < QUANTILE_BELOW:
            raise ValueError(
                f"{quantile!r} is not between {QUANTILE_ABOVE:g} and {QUANTILE_BELOW:g} (exclusive)"
            )
    normalised = tuple(sorted(set(values)))
    if len(normalised) > MAX_QUANTILES:
        raise ValueError(f"at most {MAX_QUANTILES} different quantiles, not {len(normalised)}")
    return normalised


def quantile_key(quantile: float) -> str:
    """How a forecast names a quantile's value: the shortest decimal of the float
    (``0.1``, ``0.25``), so ``0.10`` and ``0.1`` ask for the same one."""
    return repr(float(quantile))

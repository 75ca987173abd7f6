"""The combination hedged toward seasonal naive: half seasonal naive's forecast, half the
combination's (each of the combination's members a share of the other half).

It is a candidate only where the combination is (training's selection forms it from the
same backtests), and it can be served only where the combination is not: when the
combination's backtest error is worse than seasonal naive's beyond the quality gate's
tolerance, the customer gets the candidate of least backtest error, and this is one of
them. A backtest of a few windows that puts naive ahead of the combination is weak
evidence for either one alone; halfway between them is the hedge (on ``make accuracy``'s
real meter data it was served to 3 of 220 customers, each of them better than seasonal
naive and than its former fallback on the held-back month: docs/model-families.md).

``model.json``: a combination's (:mod:`fleetcast_forecasters.combination`), of kind
``naive_blend``, its members weighted: seasonal naive 1/2, each other member
``1 / (2 * n)``; its deviation the root mean square of its own backtest errors.
"""

from __future__ import annotations

from fleetcast_contracts.families import NAIVE_BLEND
from fleetcast_forecasters.combination import Combination

KIND = NAIVE_BLEND
# Seasonal naive's share of the point forecast.
NAIVE_WEIGHT = 0.5

FAMILY = Combination(KIND)

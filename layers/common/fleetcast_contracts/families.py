"""The model families: one entry a family, and everything else derived from it.

The serving registry (``fleetcast_forecasters.families``), the training job's fits
(which family is fitted how), the combination's members, the level-shift rule's
followers, the export's per-family columns, the hyperparameter ``candidates`` and the
stack parameter ModelCandidates (template.yaml, held to this list by a test) all read
this tuple, and so do the default candidates of each model frequency (ModelCandidates'
``default``). Each family's kind is written here once, under a name every other module uses.
A new family is its module (a ``FAMILY`` with ``kind`` and ``compile``, and for a
candidate its training half) and, here, its kind's name and its line in FAMILIES.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from fleetcast_contracts.frequency import Frequency


class Fit(StrEnum):
    """How the training job fits a candidate family."""

    # A batch of customers at once, as arrays (fleetcast_forecasters.candidates).
    BATCH = "batch"
    # One customer after another (Prophet: fleetcast_training.prophet_candidate).
    EACH = "each"
    # Learnt across the fleet: every customer of the instance's shard at once, before the
    # batches (fleetcast_training.fleet).
    FLEET = "fleet"
    # Not fitted: made of other families' fitted models (a combination).
    MADE_OF_MEMBERS = "members"


@dataclass(frozen=True)
class Family:
    kind: str
    # The module whose FAMILY compiles the family's archived model (and, for a batch or
    # fleet fit, fits it: its FAMILY is then also a CandidateFamily).
    module: str
    fit: Fit
    # May be named in ModelCandidates, scored on the backtest and served alone.
    candidate: bool = True
    # Its weight in the combination's weighted mean, where it is a candidate and fitted (0:
    # not a member). Decided on make accuracy's replayed backtests (docs/model-families.md).
    combination_weight: float = 0.0
    # Its weight in an hourly model's combination, where that differs (None: the same).
    hourly_combination_weight: float | None = None
    # Follows a level shift at the end of the history from its first day (its fit weighs
    # the latest periods most: fleetcast_training.level_shift).
    follows_level_shift: bool = False
    # The model frequencies whose default candidates (ModelCandidates=default) it is one
    # of; named in ModelCandidates, a candidate is fitted for a model of any frequency.
    default_for: frozenset[Frequency] = frozenset(Frequency)

    @property
    def combined(self) -> bool:
        """A member of the combination."""
        return self.combination_weight > 0

    def weight(self, frequency: Frequency) -> float:
        """Its weight in the combination of a model of ``frequency``."""
        if frequency is Frequency.HOURLY and self.hourly_combination_weight is not None:
            return self.hourly_combination_weight
        return self.combination_weight


# Each family's kind: the ``model_kind`` of its archives and its name in ModelCandidates.
SEASONAL_NAIVE = "seasonal_naive"
SEASONAL_MEDIAN = "seasonal_median"
ETS = "ets"
THETA = "theta"
PROPHET = "prophet"
FLEET = "fleet"
COLD_START = "cold_start"
COMBINATION = "combination"
NAIVE_BLEND = "naive_blend"

FAMILIES: tuple[Family, ...] = (
    Family(SEASONAL_NAIVE, "fleetcast_forecasters.seasonal_naive", Fit.BATCH),
    Family(
        SEASONAL_MEDIAN, "fleetcast_forecasters.seasonal_median", Fit.BATCH, combination_weight=1
    ),
    Family(
        ETS, "fleetcast_forecasters.ets", Fit.BATCH, combination_weight=1, follows_level_shift=True
    ),
    Family(
        THETA,
        "fleetcast_forecasters.theta",
        Fit.BATCH,
        combination_weight=1,
        follows_level_shift=True,
    ),
    # Not a default candidate of hourly models: on make accuracy's hourly sets, leaving it
    # out moved no median or mean WAPE by more than chance (1-2%, as often down as up) and
    # took a fifth of an hourly model's training CPU (docs/model-families.md).
    Family(
        PROPHET,
        "fleetcast_forecasters.prophet_family",
        Fit.EACH,
        combination_weight=1,
        default_for=frozenset({Frequency.DAILY}),
    ),
    # A member like the others in a daily combination, and four times as heavy as the four
    # others together in an hourly one (the hourly trees are the best single member on every
    # set; 4, 8, 16, 32 measured on make accuracy's sets: docs/model-families.md).
    Family(
        FLEET,
        "fleetcast_forecasters.fleet",
        Fit.FLEET,
        combination_weight=1,
        hourly_combination_weight=16,
    ),
    # The fleet's forecast of a customer too short for a model of its own (fewer fit
    # periods than training's required rows): served without a backtest.
    Family(COLD_START, "fleetcast_forecasters.cold_start", Fit.FLEET, candidate=False),
    Family(COMBINATION, "fleetcast_forecasters.combination", Fit.MADE_OF_MEMBERS, candidate=False),
    Family(NAIVE_BLEND, "fleetcast_forecasters.naive_blend", Fit.MADE_OF_MEMBERS, candidate=False),
)

BY_KIND = {family.kind: family for family in FAMILIES}
# The families training may score and serve (hyperparameter ``candidates``, the stack
# parameter ModelCandidates), in the order they fit.
CANDIDATE_KINDS = tuple(family.kind for family in FAMILIES if family.candidate)
# ModelCandidates' (and the hyperparameter ``candidates``') value for the default
# candidates of the model's frequency (:func:`default_candidates`).
DEFAULT_CANDIDATES = "default"


def default_candidates(frequency: Frequency) -> tuple[str, ...]:
    """The candidates of a model of ``frequency`` when ModelCandidates is ``default``."""
    return tuple(kind for kind in CANDIDATE_KINDS if frequency in BY_KIND[kind].default_for)


# The combination's members (where they are candidates and fitted), each with its weight in
# the combination's weighted mean, for a model of each frequency.
COMBINATION_WEIGHTS = {
    frequency: {family.kind: family.weight(frequency) for family in FAMILIES if family.combined}
    for frequency in Frequency
}
# The combination's members that follow a level shift from its first day.
FOLLOWING_KINDS = tuple(family.kind for family in FAMILIES if family.follows_level_shift)
# Every kind a customer's backtest scores: the candidates and the combinations of them (a
# cold start is never backtested).
SCORED_KINDS = tuple(
    family.kind for family in FAMILIES if family.candidate or family.fit is Fit.MADE_OF_MEMBERS
)


def kinds_fitted(fit: Fit) -> tuple[str, ...]:
    return tuple(family.kind for family in FAMILIES if family.fit is fit and family.candidate)

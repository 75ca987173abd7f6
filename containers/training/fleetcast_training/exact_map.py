"""The exact MAP fit of Prophet's model, in-process, for linear growth with every
component additive.

Prophet's Stan program (``prophet.stan``) then has parameters ``w = (k, m, delta[S],
beta[K])`` and ``sigma`` and, up to a constant, the negative log posterior

    RSS(w) / (2 sigma^2) + T log sigma + (k^2 + m^2) / 50 + ||delta||_1 / tau
        + 2 sigma^2 + 1/2 sum_j (beta_j / sigmas_j)^2

with ``RSS = ||y - Z w||^2`` and ``Z = [t, 1, max(t - t_change, 0), X * s_a]``. For a
fixed sigma it is a least-squares problem with an L1 penalty on ``delta`` alone, solved
exactly by an active-set (feature-sign) method on ``Z'Z`` and ``Z'y``; for a fixed ``w``
the best sigma is closed form, ``sigma^2 = (-T + sqrt(T^2 + 16 RSS)) / 8``. The fit
alternates the two until sigma stops moving, then checks the optimality conditions (the
KKT conditions of the L1 problem and the sigma stationarity) to :data:`KKT_TOLERANCE`.

Why not CmdStan: its L-BFGS stops early at the kink of the Laplace prior (all changepoint
rates end slightly non-zero, and a 1e-9 change of its start moves forecasts by percents),
and starting a process per fit costs far more than the solve (~1 ms here, 30-50 ms there).

Everything that depends on the design alone (``Z``, ``Z'Z``) is kept in a small cache
keyed by the exact Stan data it came from, so customers on the same date grid share it.

The solver reads Prophet's generic Stan data (``X``, ``s_a``, ``s_m``, ``sigmas``,
``tau``, ``t_change``, ``trend_indicator``), never named seasonalities: holidays and extra
regressors are just more additive columns.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float64]
Matrix = npt.NDArray[np.float64]

# The largest KKT / sigma-stationarity violation accepted, relative to the size of the
# gradient terms it balances (see :func:`optimality_violation`).
KKT_TOLERANCE = 1e-8
# Prophet's priors: k, m ~ normal(0, 5); sigma_obs ~ half-normal(0, 0.5).
_TREND_PRECISION = 1 / 25
_MAX_OUTER_STEPS = 200
# The sigma search stops when sigma^2 moves by less than this, relative. The log posterior
# is flat in sigma at the optimum, so it is off by the square of that; w, exact for the
# sigma^2 it was solved at, meets the check to about this too (1e-12 took 13% more steps
# on two years of daily data, for changes of ~1e-10 in the parameters).
_VARIANCE_TOLERANCE = 1e-10
# ...or less than this when its steps stopped shrinking.
_STALLED_TOLERANCE = 1e-9
# Below this share of y'y the residual sum of squares is computed from the residuals:
# from Z'Z and Z'y it would lose too many digits to cancellation.
_GRAM_RSS_SHARE = 1e-6
# Below this sigma_obs (noise under 1e-5 of the series' largest value: a near-constant
# series, say) the rounding error of the data term, ~1e-16 * T / sigma^2, approaches the
# size of the priors' gradients, so neither the solve nor its check can resolve them.
NEAR_EXACT_SIGMA = 1e-5
_MAX_ACTIVE_SET_STEPS = 500
_DESIGN_CACHE_SIZE = 8
LINEAR_GROWTH = 0
_GROWTH_NAMES = {1: "logistic", 2: "flat"}


class FallbackReason(enum.StrEnum):
    """Why a fit went to CmdStan instead of the exact in-process solver."""

    MULTIPLICATIVE = "multiplicative components"
    NONLINEAR_GROWTH = "logistic or flat growth"
    OPTIMALITY_CHECK = "optimality check failed"
    CMDSTAN_OPTIONS = "CmdStan options given"
    NEAR_EXACT_FIT = "near-exact fit"
    NUMERICAL = "numerical failure"


class NotSolvedExactly(Exception):
    def __init__(self, reason: FallbackReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass
class Design:
    """What a fit needs from the Stan data apart from ``y``; shared by every series on
    the same time grid with the same features."""

    # The Stan data's X: the latest of equal ones :func:`design` was given, whose memory
    # the next customer's most likely shares (a shape template's table, not the first
    # fit's Prophet-built X), so it needs no comparison.
    features: Matrix
    z: Matrix  # columns: k, m, delta[S], beta[K]
    gram: Matrix  # Z'Z
    prior_precision: Vector  # 1/25, 1/25, 0 * S, 1/sigmas^2
    prior_matrix: Matrix  # the same, on the diagonal
    changepoints: int  # S
    hinge: Matrix  # max(t - t_change, 0), as Z's delta columns

    @property
    def penalized(self) -> slice:
        return slice(2, 2 + self.changepoints)


@dataclass(frozen=True)
class MapSolution:
    k: float
    m: float
    delta: Vector
    beta: Vector
    sigma_obs: float
    trend: Vector  # empty when :func:`solve` was not asked for it
    log_posterior: float  # CmdStan's ``lp__`` (constants dropped, no Jacobian)
    violation: float
    outer_steps: int

    def prophet_params(self) -> OrderedDict[str, Vector]:
        """The dict Prophet's ``CmdStanPyBackend.fit`` returns, in CmdStan's column order,
        each value shaped (1, n)."""
        values = {
            "lp__": np.array([self.log_posterior]),
            "k": np.array([self.k]),
            "m": np.array([self.m]),
            "delta": self.delta,
            "sigma_obs": np.array([self.sigma_obs]),
            "beta": self.beta,
            "trend": self.trend,
        }
        return OrderedDict(
            (name, np.asarray(value, dtype=np.float64).reshape(1, -1))
            for name, value in values.items()
        )


_designs: OrderedDict[bytes, Design] = OrderedDict()


def _as_vector(value: Any) -> Vector:
    return np.asarray(value, dtype=np.float64).reshape(-1)


def supported(data: dict[str, Any]) -> None:
    """Raise :class:`NotSolvedExactly` unless the model is linear and all additive."""
    indicator = int(data["trend_indicator"])
    if indicator != LINEAR_GROWTH:
        raise NotSolvedExactly(
            FallbackReason.NONLINEAR_GROWTH, f"{_GROWTH_NAMES.get(indicator, indicator)} growth"
        )
    s_m = _as_vector(data["s_m"])
    if s_m.size and np.any(s_m != 0):
        raise NotSolvedExactly(
            FallbackReason.MULTIPLICATIVE, f"{int(np.count_nonzero(s_m))} multiplicative column(s)"
        )


def design(data: dict[str, Any]) -> Design:
    """The cached :class:`Design` for this Stan data's ``t``, ``t_change``, ``X``, ``s_a``
    and ``sigmas``, built on first use."""
    t = _as_vector(data["t"])
    t_change = _as_vector(data["t_change"])
    features = np.ascontiguousarray(np.asarray(data["X"], dtype=np.float64))
    s_a = _as_vector(data["s_a"])
    sigmas = _as_vector(data["sigmas"])
    if features.ndim != 2 or features.shape[0] != t.size:
        raise NotSolvedExactly(
            FallbackReason.NUMERICAL, f"X has shape {features.shape}, expected ({t.size}, K)"
        )
    # Keyed by the small arrays; X (150 kB for two years of daily rows) is compared with
    # the cached design's instead: hashing it costs more than the solve's own steps.
    key = b"|".join(
        (
            repr((t.size, t_change.size, features.shape)).encode(),
            t.tobytes(),
            t_change.tobytes(),
            s_a.tobytes(),
            sigmas.tobytes(),
        )
    )
    cached = _designs.get(key)
    if cached is not None and _same_memory(cached.features, features):
        _designs.move_to_end(key)
        return cached
    if cached is not None and np.array_equal(cached.features, features):
        # (a comparison of two years of hourly rows costs a fifth of their solve)
        cached.features = features
        _designs.move_to_end(key)
        return cached
    # Z filled column block by column block: no temporary per block, no copy to join them
    # (a third of the design's cost for two years of daily rows).
    changepoints = t_change.size
    z = np.empty((t.size, 2 + changepoints + features.shape[1]))
    z[:, 0] = t
    z[:, 1] = 1.0
    hinge = z[:, 2 : 2 + changepoints]
    np.subtract(t[:, None], t_change[None, :], out=hinge)
    np.maximum(hinge, 0.0, out=hinge)
    np.multiply(features, s_a[None, :], out=z[:, 2 + changepoints :])
    with np.errstate(divide="ignore"):
        beta_precision = 1.0 / sigmas**2
    prior_precision = np.concatenate(
        [[_TREND_PRECISION, _TREND_PRECISION], np.zeros(t_change.size), beta_precision]
    )
    built = Design(
        features=features,
        z=z,
        gram=z.T @ z,
        prior_precision=prior_precision,
        prior_matrix=np.diag(prior_precision),
        changepoints=t_change.size,
        hinge=hinge,
    )
    _designs[key] = built
    if len(_designs) > _DESIGN_CACHE_SIZE:
        _designs.popitem(last=False)
    return built


def _same_memory(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> bool:
    """``a`` and ``b`` are the same numbers in the same memory (views of one shape's
    feature table): equal without comparing them. (The comparison could not tell an
    array written in place after its design was cached either: the cache holds it.)"""
    return (
        a.__array_interface__["data"] == b.__array_interface__["data"]
        and a.shape == b.shape
        and a.strides == b.strides
        and a.dtype == b.dtype
    )


def negative_log_posterior(
    d: Design, y: Vector, w: Vector, sigma: float, tau: float, fitted: Vector | None = None
) -> float:
    """``fitted``: ``Z w``, when the caller has it."""
    residual = y - (d.z @ w if fitted is None else fitted)
    return (
        float(residual @ residual) / (2 * sigma**2)
        + y.size * np.log(sigma)
        + 0.5 * float(d.prior_precision @ (w * w))
        + float(np.abs(w[d.penalized]).sum()) / tau
        + 2 * sigma**2
    )


def solve(data: dict[str, Any], start_variance: float = 1.0, trend: bool = True) -> MapSolution:
    """The exact MAP estimate; raises :class:`NotSolvedExactly` for a model it does not
    solve or when the final optimality check fails. ``start_variance`` is where the
    search for sigma_obs^2 starts (Prophet's CmdStan run starts at sigma_obs = 1): a
    guess near the answer saves steps, the answer is the same. Without ``trend`` the
    solution has no fitted trend along the rows: a backtest's fit never reads it, and it
    is a pass over the design (a tenth of an hourly backtest's solve)."""
    supported(data)
    d = design(data)
    y = _as_vector(data["y"])
    tau = float(data["tau"])
    if not (np.isfinite(y).all() and tau > 0 and np.isfinite(d.gram).all()):
        raise NotSolvedExactly(FallbackReason.NUMERICAL, "non-finite data or tau <= 0")
    if not np.isfinite(d.prior_precision).all():
        raise NotSolvedExactly(FallbackReason.NUMERICAL, "a zero prior scale in sigmas")
    zty = d.z.T @ y
    penalized = np.zeros(d.gram.shape[0], dtype=bool)
    penalized[d.penalized] = True
    w, active, variance, converged, steps = _sigma_search(d, y, zty, tau, penalized, start_variance)
    # Final w for the final sigma, then the check. Converged, w is exact for a sigma^2
    # within the tolerance of the final one, and sigma is taken as the best one for w
    # (from its residuals): solving the L1 problem again would move the answer by about
    # the tolerance and cost a fifth of the fit.
    if not converged:
        hessian = d.gram + variance * d.prior_matrix
        w, active = _l1_least_squares(hessian, zty, variance / tau, penalized, w, active)
    fitted = d.z @ w
    if converged:
        residual = y - fitted
        variance = _best_variance(float(residual @ residual), y.size)
    sigma = float(np.sqrt(variance))
    if sigma < NEAR_EXACT_SIGMA:
        raise NotSolvedExactly(
            FallbackReason.NEAR_EXACT_FIT, f"sigma_obs {sigma:.3g} < {NEAR_EXACT_SIGMA:g}"
        )
    violation = optimality_violation(d, y, zty, w, sigma, tau, fitted)
    if not violation <= KKT_TOLERANCE:
        raise NotSolvedExactly(
            FallbackReason.OPTIMALITY_CHECK,
            f"violation {violation:.3g} > {KKT_TOLERANCE:g} after {steps} steps",
        )
    delta = w[d.penalized]
    return MapSolution(
        k=float(w[0]),
        m=float(w[1]),
        delta=delta.copy(),
        beta=w[2 + d.changepoints :].copy(),
        sigma_obs=sigma,
        trend=w[0] * d.z[:, 0] + w[1] + d.hinge @ delta if trend else np.empty(0),
        log_posterior=-negative_log_posterior(d, y, w, sigma, tau, fitted),
        violation=violation,
        outer_steps=steps,
    )


def _sigma_search(
    d: Design,
    y: Vector,
    zty: Vector,
    tau: float,
    penalized: npt.NDArray[np.bool_],
    start_variance: float,
) -> tuple[Vector, npt.NDArray[np.bool_], float, bool, int]:
    """w, its active set, sigma^2, whether the search converged, and its steps.

    Alternating the two exact steps is a fixed-point iteration on sigma^2,
    s <- best_variance(w(s)); it converges linearly, sometimes slowly (a level shift the
    trend has to absorb). Secant steps on best_variance(w(s)) - s find the same fixed
    point in a few steps; the plain step stands in when a secant step is unusable."""
    yty = float(y @ y)
    variance = start_variance if np.isfinite(start_variance) and start_variance > 0 else 1.0
    w = np.zeros(d.gram.shape[0])
    active = np.zeros_like(penalized)
    previous: tuple[float, float] | None = None
    steps = 0
    converged = False
    while True:
        steps += 1
        hessian = d.gram + variance * d.prior_matrix
        w, active = _l1_least_squares(hessian, zty, variance / tau, penalized, w, active)
        updated = _best_variance(_rss(d, y, yty, zty, w), y.size)
        gap = updated - variance
        stalled = previous is not None and abs(gap) >= abs(previous[1])
        converged = abs(gap) <= _VARIANCE_TOLERANCE * variance
        if (
            converged
            or (stalled and abs(gap) <= _STALLED_TOLERANCE * variance)
            or steps >= _MAX_OUTER_STEPS
        ):
            variance = updated
            break
        proposal = updated
        if previous is not None and previous[1] != gap:
            secant = variance - gap * (variance - previous[0]) / (gap - previous[1])
            if np.isfinite(secant) and 0.5 * min(variance, updated) < secant < 2 * max(
                variance, updated
            ):
                proposal = secant
        previous = (variance, gap)
        variance = proposal
    return w, active, variance, converged, steps


def _rss(d: Design, y: Vector, yty: float, zty: Vector, w: Vector) -> float:
    """``||y - Z w||^2`` as ``y'y - 2 w'Z'y + w'Z'Z w``: no pass over the rows (for a
    year of hourly data the product Z w was most of a sigma step); from the residuals
    when that would lose digits (a near-exact fit)."""
    rss = yty - 2.0 * float(w @ zty) + float(w @ (d.gram @ w))
    if rss > _GRAM_RSS_SHARE * yty:
        return rss
    residual = y - d.z @ w
    return float(residual @ residual)


def _best_variance(rss: float, count: int) -> float:
    """The sigma^2 that maximises the posterior for a residual sum of squares ``rss`` over
    ``count`` rows: ``(-T + sqrt(T^2 + 16 RSS)) / 8``, written without its cancellation
    for small RSS."""
    variance = 2 * rss / (count + np.sqrt(count * count + 16 * rss))
    if not variance > 0:
        raise NotSolvedExactly(FallbackReason.NUMERICAL, "the residual sum of squares is 0")
    return float(variance)


def optimality_violation(
    d: Design,
    y: Vector,
    zty: Vector,
    w: Vector,
    sigma: float,
    tau: float,
    fitted: Vector | None = None,
) -> float:
    """The largest violation of the optimality conditions at ``(w, sigma)``, each relative
    to the size of the terms it balances:

    - KKT of the L1 problem, with ``g`` the gradient of the smooth part: ``g_i = 0`` for
      k, m and beta; ``g_i = -sign(delta_i) / tau`` for a non-zero changepoint rate;
      ``|g_i| <= 1 / tau`` for a zero one;
    - sigma stationarity: ``-RSS / sigma^3 + T / sigma + 4 sigma = 0``.

    ``fitted``: ``Z w``, when the caller has it.
    """
    variance = sigma * sigma
    if fitted is None:
        fitted = d.z @ w
    prior = d.prior_precision * w
    gradient = (d.gram @ w - zty) / variance + prior
    # The size of the sums behind each gradient entry (Cauchy-Schwarz), not of their
    # difference: a column nearly orthogonal to y (a weekly term of a flat series) has a
    # tiny gradient made of large, cancelling products.
    column_norms = np.sqrt(np.diag(d.gram))
    data_size = column_norms * (np.linalg.norm(y) + np.linalg.norm(fitted)) / variance
    scale = data_size + np.abs(prior) + 1.0 / tau
    penalty = np.zeros_like(w)
    rates = w[d.penalized]
    threshold = 1.0 / tau
    excess = np.zeros_like(w)
    penalty[d.penalized] = np.sign(rates) * threshold
    stationarity = np.abs(gradient + penalty)
    zero = np.zeros_like(w, dtype=bool)
    zero[d.penalized] = rates == 0
    excess[zero] = np.maximum(np.abs(gradient[zero]) - threshold, 0.0)
    stationarity[zero] = excess[zero]
    kkt = float((stationarity / scale).max(initial=0.0))

    residual = y - fitted
    rss = float(residual @ residual)
    terms = np.array([rss / sigma**3, y.size / sigma, 4 * sigma])
    sigma_violation = abs(-terms[0] + terms[1] + terms[2]) / terms.sum()
    return max(kkt, sigma_violation)


def _l1_least_squares(
    hessian: Matrix,
    linear: Vector,
    penalty: float,
    penalized: npt.NDArray[np.bool_],
    start: Vector,
    start_active: npt.NDArray[np.bool_],
) -> tuple[Vector, npt.NDArray[np.bool_]]:
    """argmin ``1/2 w'Hw - linear'w + penalty * ||w[penalized]||_1``, exactly, by the
    feature-sign search (Lee, Battle, Raina and Ng, 2007), warm-started from ``start``
    (consistent with ``start_active``: zero outside it)."""
    w = start.copy()
    active = start_active.copy()
    signs = np.where(active, np.sign(w), 0.0)
    unpenalized = ~penalized

    def objective(point: Vector) -> float:
        return float(
            0.5 * point @ hessian @ point
            - linear @ point
            + penalty * np.abs(point[penalized]).sum()
        )

    for _ in range(_MAX_ACTIVE_SET_STEPS):
        # Optimality on the active set, with the signs fixed, by line search.
        for _ in range(_MAX_ACTIVE_SET_STEPS):
            # (index arrays and take: np.ix_ costs as much as the solve at this size)
            free = np.flatnonzero(unpenalized | active)
            candidate = np.zeros_like(w)
            try:
                candidate[free] = np.linalg.solve(
                    hessian.take(free, 0).take(free, 1), linear[free] - penalty * signs[free]
                )
            except np.linalg.LinAlgError as error:
                raise NotSolvedExactly(FallbackReason.NUMERICAL, str(error)) from error
            flipped = active & (np.sign(candidate) != signs)
            if not flipped.any():
                w = candidate
                break
            # Points where a coefficient crosses zero on the way from w to candidate: the
            # objective is quadratic between them, so the best of them (or the candidate)
            # is the best point on the segment.
            moving = np.flatnonzero(flipped & (w != 0))
            crossings = w[moving] / (w[moving] - candidate[moving])
            best_point, best_value, best_share = candidate, objective(candidate), 1.0
            for share in crossings:
                point = w + share * (candidate - w)
                value = objective(point)
                if value < best_value:
                    best_point, best_value, best_share = point, value, share
            best_point = best_point.copy()
            # The coefficients that reach zero there leave the active set.
            best_point[moving[crossings <= best_share]] = 0.0
            w = best_point
            active = penalized & (w != 0)
            signs = np.where(active, np.sign(w), 0.0)
        else:
            raise NotSolvedExactly(FallbackReason.NUMERICAL, "the active set did not settle")
        active = penalized & (w != 0)
        signs = np.where(active, np.sign(w), 0.0)
        gradient = hessian @ w - linear
        excess = np.where(penalized & ~active, np.abs(gradient) - penalty, -np.inf)
        entering = int(np.argmax(excess))
        if excess[entering] <= 1e-13 * (penalty + float(np.abs(linear).max(initial=0.0))):
            return w, active
        active[entering] = True
        signs[entering] = -np.sign(gradient[entering])
    raise NotSolvedExactly(FallbackReason.NUMERICAL, "the active set did not settle")

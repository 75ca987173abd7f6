"""Customers of one model shape: Prophet's preprocessing once, then only each customer's own
arithmetic.

For a plain history (``ds``, ``y``), Prophet's ``preprocess`` does little that depends on
the customer:

- the time index ``t`` and the changepoint grid come from the customer's dates alone
  (Prophet's ``setup_dataframe`` and ``set_changepoints``, a few numpy lines);
- every row of the feature matrix (Fourier terms, holiday indicators) depends on that
  row's time alone, given the seasonalities and the holiday calendar of its years;
- the component columns, prior scales, seasonalities and every setting are the same for
  every customer with the same seasonality orders and calendar;
- ``y`` gives ``y_scale`` ('absmax') and ``y_scaled``.

Yet it spends several times the exact solve in pandas. :class:`ShapeTemplate` keeps what
one Prophet fit of a shape built (its ``model_to_dict``, its Stan data and a table of
feature rows by time, grown by every Prophet fit of the shape), and fits each further
customer whose times the table holds with numpy: its Stan data, the exact in-process solve
(:func:`fleetcast_training.exact_map.solve`, with its optimality check), and the model
dict ``model_to_dict`` would return after ``Prophet.fit`` on that customer's history. The
JSON fields are printed by the encoder pandas' ``to_json`` uses, so they are the same text.

Nothing here is taken on trust: :meth:`ShapeTemplate.of` refits its own customer this way
and keeps the template only if the model dict equals Prophet's exactly (so a Prophet
version that serialises differently turns the shortcut off rather than changing models);
``tests/unit/test_training_grid.py`` compares the JSON byte for byte with Prophet's on
varied series, gaps included. Anything else (a constant series, a time the table lacks,
a model the solver does not solve) goes through Prophet.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from pandas.io.json import ujson_dumps

from fleetcast_training.exact_map import MapSolution, NotSolvedExactly, solve

if TYPE_CHECKING:
    from prophet import Prophet

Vector = npt.NDArray[np.float64]
ShapeKey = tuple[Any, ...]
Stamps = npt.NDArray[np.datetime64]
# Prophet's feature rows (seasonalities, holidays) at the given times, as the fitted
# model that made the template builds them.
FeaturesAt = Callable[[Stamps], npt.NDArray[np.float64]]

# The history frame Prophet keeps for a plain series (fleetcast_training.prophet_model).
_HISTORY_COLUMNS = ["ds", "y", "floor", "t", "y_scaled"]
# The model dict's fields that depend on the customer (its dates or values).
_CUSTOMER_FIELDS = (
    "n_changepoints",
    "y_scale",
    "changepoints",
    "history_dates",
    "start",
    "t_scale",
    "history",
    "changepoints_t",
    "params",
)
SHAPES_KEPT = 16
# History starts and spans whose t text a table keeps (customers mostly share a few).
_SPANS_KEPT = 8
# Beyond this many times (20 years hourly) a shape's table stops growing.
_TABLE_TIMES = 175_000


def values_json(values: Vector) -> list[str]:
    """Each value as ``DataFrame.to_json`` prints it: pandas' own encoder, called as
    ``to_json`` calls it (10 decimals), without building a Series first."""
    text: str = ujson_dumps(np.asarray(values, dtype=np.float64), double_precision=10)
    return text[1:-1].split(",") if values.size else []


def _dates_json(stamps: npt.NDArray[np.datetime64]) -> list[str]:
    """Each time as ``Series.to_json(date_format='iso')`` prints it, quotes included."""
    text: str = pd.Series(stamps).to_json(orient="values", date_format="iso")
    return text[1:-1].split(",") if stamps.size else []


def _series_json(index: npt.NDArray[np.int64], dates: list[str]) -> str:
    """``Series(name='ds').to_json(orient='split', date_format='iso')``."""
    return (
        '{"name":"ds","index":['
        + ",".join(map(str, index.tolist()))
        + '],"data":['
        + ",".join(dates)
        + "]}"
    )


def _rows_of(
    table: npt.NDArray[np.int64], times: npt.NDArray[np.int64]
) -> npt.NDArray[np.intp] | None:
    """Each of the sorted ``times``' row in the sorted ``table``, or None when one is not
    in it."""
    rows = np.searchsorted(table, times)
    if rows.size and (rows[-1] >= table.size or not np.array_equal(table[rows], times)):
        return None
    return rows


@dataclass
class _TimeTable:
    """Sorted times (int64, in the history's unit) with their feature rows and ISO text."""

    times: npt.NDArray[np.int64]
    features: npt.NDArray[np.float64]
    dates: npt.NDArray[np.object_]
    unit: str
    # Each row's text in a history's JSON around its y and y_scaled, made on first use:
    # the part before y (the same for every customer), and the part between them (with t,
    # the same for every customer whose history starts and spans alike).
    _heads: npt.NDArray[np.object_] | None = field(default=None, repr=False)
    _middles: dict[tuple[Any, Any], npt.NDArray[np.object_]] = field(
        default_factory=dict, repr=False
    )

    def rows(self, times: npt.NDArray[np.int64]) -> npt.NDArray[np.intp] | None:
        """Each time's row, or None when one is not in the table."""
        return _rows_of(self.times, times)

    def features_at(self, rows: npt.NDArray[np.intp]) -> npt.NDArray[np.float64]:
        """The feature rows of ``rows`` (ascending): for a run of consecutive rows (a
        customer without gaps) a view of the table, which customers of the same times
        then share, so the solver's design cache knows them without comparing values
        (:func:`fleetcast_training.exact_map.design`); else a copy."""
        if rows.size and int(rows[-1]) - int(rows[0]) == rows.size - 1:
            return self.features[int(rows[0]) : int(rows[-1]) + 1]
        return self.features[rows]

    def row_text(
        self, start: np.datetime64, span: np.timedelta64
    ) -> tuple[npt.NDArray[np.object_], npt.NDArray[np.object_]]:
        """Per row, ``'},{"ds":<date>,"y":'`` and ``',"floor":0.0,"t":<t>,"y_scaled":'``
        of a history that starts at ``start`` and spans ``span`` (t as Prophet's
        setup_dataframe computes it, element by element the same numbers)."""
        if self._heads is None:
            self._heads = np.array([f'}},{{"ds":{date},"y":' for date in self.dates], dtype=object)
        middles = self._middles.get((start, span))
        if middles is None:
            stamps = self.times.view(f"datetime64[{self.unit}]")
            t = np.asarray((stamps - start) / span, dtype=np.float64)
            middles = np.array(
                [f',"floor":0.0,"t":{text},"y_scaled":' for text in values_json(t)], dtype=object
            )
            if len(self._middles) >= _SPANS_KEPT:
                self._middles.clear()
            self._middles[(start, span)] = middles
        return self._heads, middles

    def add(self, times: npt.NDArray[np.int64], features: npt.NDArray[np.float64]) -> None:
        """Add a fitted customer's rows (the times it had that the table lacked)."""
        new = ~np.isin(times, self.times, assume_unique=True)
        if not new.any() or self.times.size + int(new.sum()) > _TABLE_TIMES:
            return
        merged = np.concatenate([self.times, times[new]])
        order = np.argsort(merged, kind="stable")
        stamps = times[new].view(f"datetime64[{self.unit}]")
        self.times = merged[order]
        self.features = np.concatenate([self.features, features[new]])[order]
        self.dates = np.concatenate([self.dates, np.array(_dates_json(stamps), dtype=object)])[
            order
        ]
        self._heads, self._middles = None, {}


@dataclass
class ShapeTemplate:
    """What customers of one shape (seasonality orders, calendar, years, settings) share."""

    model: dict[str, Any]  # model_to_dict's output less the customer's fields
    field_order: tuple[str, ...]  # model_to_dict's, which json.dumps keeps
    stan_data: dict[str, Any]  # Prophet's Stan data less the customer's fields
    history_head: str  # the history JSON up to its first row
    n_changepoints: int  # the setting, before Prophet lowers it for a short history
    changepoint_range: float
    table: _TimeTable

    @classmethod
    def of(
        cls,
        model: dict[str, Any],
        history: pd.DataFrame,
        stan_data: dict[str, Any],
        n_changepoints: int,
        features_at: FeaturesAt | None = None,
    ) -> ShapeTemplate | None:
        """The template of Prophet's fitted ``model`` (``model_to_dict``), with its history
        frame and the Stan data it was fitted on (``n_changepoints``: the model's setting);
        None unless refitting its own customer with it gives Prophet's dict exactly.

        With ``features_at`` its table holds every time of the shape's years on the
        customer's step (:func:`_year_grid`), so other customers' gaps and later starts
        need no Prophet fit of their own; kept only if its rows at the customer's times
        are exactly the ones Prophet fitted."""
        stamps = history["ds"].to_numpy()
        if (
            list(history.columns) != _HISTORY_COLUMNS
            or not history.index.equals(pd.RangeIndex(len(history)))
            or stamps.dtype.kind != "M"
            or model.get("mcmc_samples") != 0
            or len(stan_data["y"]) != len(history)
        ):
            return None
        unit = np.datetime_data(stamps.dtype)[0]
        head, separator, _ = (
            history.iloc[:0].to_json(orient="table", index=False).partition('"data":[')
        )
        if not separator:
            return None
        features = np.asarray(stan_data["X"], dtype=np.float64)
        table = _TimeTable(
            times=stamps.view(np.int64).copy(),
            features=np.array(features, order="C"),
            dates=np.array(_dates_json(stamps), dtype=object),
            unit=unit,
        )
        if features_at is not None:
            table = _grown_to_years(table, stamps, features, features_at)
        template = cls(
            model={name: value for name, value in model.items() if name not in _CUSTOMER_FIELDS},
            field_order=tuple(model),
            stan_data={name: stan_data[name] for name in ("K", "tau", "trend_indicator", "sigmas")}
            | {
                "s_a": np.asarray(stan_data["s_a"], dtype=np.float64),
                "s_m": np.asarray(stan_data["s_m"], dtype=np.float64),
            },
            history_head=head + separator,
            n_changepoints=n_changepoints,
            changepoint_range=float(model["changepoint_range"]),
            table=table,
        )
        try:
            refitted = template.fit(stamps, history["y"].to_numpy(dtype=np.float64))
        except NotSolvedExactly:
            return None
        if refitted is None or json.dumps(refitted[0]) != json.dumps(model):
            return None
        return template

    def fit(
        self, stamps: npt.NDArray[np.datetime64], values: Vector, kept_rows: int | None = None
    ) -> tuple[dict[str, Any], dict[str, Any], MapSolution] | None:
        """The model dict ``model_to_dict`` gives after ``Prophet.fit`` on this history
        (sorted unique ``stamps``, finite ``values``), its Stan data and the exact solution;
        None for a history this template cannot fit (a time its table lacks, a constant
        series). Raises :class:`NotSolvedExactly` when the in-process solver does not solve
        the model. With ``kept_rows`` the dict's history is only its last that many rows,
        as :func:`kept_history` cuts Prophet's."""
        if (
            values.size < 2
            or values.min() == values.max()
            or np.datetime_data(stamps.dtype)[0] != self.table.unit
        ):
            return None
        times = stamps.view(np.int64)
        rows = self.table.rows(times)
        if rows is None:
            return None
        count = times.size
        # Prophet's setup_dataframe (as fleetcast_training.prophet_model builds it).
        start, span = stamps[0], stamps[-1] - stamps[0]
        t = np.asarray((stamps - start) / span, dtype=np.float64)
        y_scale = float(np.abs(values).max()) or 1.0
        y_scaled = values / y_scale
        # Prophet's set_changepoints.
        n_changepoints = self.n_changepoints
        rows_in_range = int(np.floor(count * self.changepoint_range))
        if n_changepoints + 1 > rows_in_range:
            n_changepoints = rows_in_range - 1
        if n_changepoints <= 0:
            return None  # Prophet's dummy changepoint and its k adjustment: not this path
        changepoint_rows = (
            np.linspace(0, rows_in_range - 1, n_changepoints + 1).round().astype(int)[1:]
        )
        t_change = np.sort(t[changepoint_rows])
        stan_data = {
            "T": count,
            "S": t_change.size,
            "K": self.stan_data["K"],
            "tau": self.stan_data["tau"],
            "trend_indicator": self.stan_data["trend_indicator"],
            "y": y_scaled,
            "t": t,
            "cap": np.zeros(count),
            "t_change": t_change,
            "X": self.table.features_at(rows),
            "sigmas": self.stan_data["sigmas"],
            "s_a": self.stan_data["s_a"],
            "s_m": self.stan_data["s_m"],
        }
        solution = solve(stan_data)
        dates = self.table.dates[rows]
        kept = count if kept_rows is None else max(1, min(kept_rows, count))
        params = solution.prophet_params()
        params["trend"] = params["trend"][:, count - kept :]
        model = dict(self.model)
        model |= {
            "n_changepoints": n_changepoints,
            "y_scale": y_scale,
            "changepoints": _series_json(changepoint_rows, dates[changepoint_rows].tolist()),
            "history_dates": _series_json(np.arange(kept), dates[count - kept :].tolist()),
            "start": pd.Timestamp(start).timestamp(),
            "t_scale": pd.Timedelta(span).total_seconds(),
            "history": self._history_json(
                rows[count - kept :], start, span, values[count - kept :], y_scaled[count - kept :]
            ),
            "changepoints_t": t_change.tolist(),
            "params": {name: value.tolist() for name, value in params.items()},
        }
        # Keep model_to_dict's key order, so json.dumps writes Prophet's text.
        ordered = {name: model[name] for name in self.field_order}
        return ordered, stan_data, solution

    def _history_json(
        self,
        rows: npt.NDArray[np.intp],
        start: np.datetime64,
        span: np.timedelta64,
        values: Vector,
        scaled: Vector,
    ) -> str:
        """The history frame's ``to_json(orient="table", index=False)``: per row its
        table text around the customer's own y and y_scaled, joined once."""
        heads, middles = self.table.row_text(start, span)
        parts: list[str] = [""] * (4 * rows.size)
        parts[0::4] = heads[rows].tolist()
        parts[1::4] = values_json(values)
        parts[2::4] = middles[rows].tolist()
        parts[3::4] = values_json(scaled)
        parts[0] = parts[0].removeprefix("},")  # the first row follows the head directly
        return self.history_head + "".join(parts) + "}]}"


def kept_history(model: Prophet, fitted: dict[str, Any], rows: int) -> dict[str, Any]:
    """``fitted`` (``model_to_dict(model)``) with only the last ``rows`` of the history
    (its frame, its dates and the fitted trend along it): what ``model_to_dict`` writes
    for the model once its ``history``, ``history_dates`` and ``params["trend"]`` are
    cut so. Nothing ``predict`` computes for times after the history reads them but the
    rows' mean step (the trend's uncertainty for a one-row future)."""
    history, dates = model.history, model.history_dates
    if history is None or dates is None or rows >= len(history):
        return fitted
    rows = max(1, rows)
    dates = dates.iloc[-rows:].reset_index(drop=True)
    trend = np.asarray(model.params["trend"])[..., -rows:]
    return fitted | {
        "history_dates": dates.to_json(orient="split", date_format="iso"),
        "history": history.iloc[-rows:].to_json(orient="table", index=False),
        "params": fitted["params"] | {"trend": trend.tolist()},
    }


def _year_grid(stamps: Stamps) -> Stamps | None:
    """Every time on ``stamps``' shortest step, in phase with them, from the start of
    their first calendar year to the end of their last; None when there are more than
    the table keeps."""
    steps = np.diff(stamps)
    if not steps.size:
        return None
    step = steps.min()
    first = stamps[0].astype("datetime64[Y]").astype(stamps.dtype)
    end = (stamps[-1].astype("datetime64[Y]") + 1).astype(stamps.dtype)
    start = stamps[0] - ((stamps[0] - first) // step) * step
    if (end - start) // step > _TABLE_TIMES:
        return None
    return np.arange(start, end, step)


def _grown_to_years(
    table: _TimeTable, stamps: Stamps, features: Vector, features_at: FeaturesAt
) -> _TimeTable:
    """``table`` (one customer's rows) grown to :func:`_year_grid`, or as it is when the
    grid's rows at the customer's own times are not exactly Prophet's."""
    grid = _year_grid(stamps)
    if grid is None:
        return table
    rows = _rows_of(grid.view(np.int64), stamps.view(np.int64))
    if rows is None:
        return table
    grown = np.asarray(features_at(grid), dtype=np.float64)
    if grown.shape != (grid.size, features.shape[1]) or not np.array_equal(grown[rows], features):
        return table
    return _TimeTable(
        times=grid.view(np.int64).copy(),
        features=np.ascontiguousarray(grown),
        dates=np.array(_dates_json(grid), dtype=object),
        unit=table.unit,
    )


class ShapeTemplates:
    """A worker's templates of its latest few shapes, by :func:`shape_key`."""

    def __init__(self, kept: int = SHAPES_KEPT) -> None:
        self._kept = kept
        self._templates: OrderedDict[ShapeKey, ShapeTemplate | None] = OrderedDict()

    def get(self, key: ShapeKey) -> ShapeTemplate | None:
        template = self._templates.get(key)
        if key in self._templates:
            self._templates.move_to_end(key)
        return template

    def known(self, key: ShapeKey) -> bool:
        return key in self._templates

    def remember(self, key: ShapeKey, template: ShapeTemplate | None) -> None:
        """``None`` records a shape whose template could not reproduce Prophet's fit."""
        self._templates[key] = template
        if len(self._templates) > self._kept:
            self._templates.popitem(last=False)


def shape_key(stamps: npt.NDArray[np.datetime64], *model_inputs: Any) -> ShapeKey:
    """What makes two customers' preprocessing the same but for their own dates and values:
    the dates' unit and calendar years (holiday features are built per year) and every
    other input of the model (seasonality orders, calendar). ``stamps`` are sorted."""
    return (str(stamps.dtype), _years(stamps), *model_inputs)


def _years(stamps: npt.NDArray[np.datetime64]) -> tuple[int, ...]:
    """The calendar years of the sorted ``stamps``, from where each year's first time would
    be: converting every time to its year cost a thirtieth of an hourly customer's fits."""
    if not stamps.size:
        return ()
    years = np.arange(stamps[0].astype("datetime64[Y]"), stamps[-1].astype("datetime64[Y]") + 1)
    bounds = np.searchsorted(stamps, np.append(years, years[-1] + 1).astype(stamps.dtype))
    held = years[np.diff(bounds) > 0]
    return tuple((held.astype(np.int64) + 1970).tolist())

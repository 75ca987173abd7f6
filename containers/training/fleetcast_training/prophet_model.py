"""Prophet, with per-fit work that customers share done once per worker process.

- Every ``fit`` and ``predict`` builds the component matrix (which feature column belongs
  to which seasonality, and to the additive or multiplicative total) with a pandas
  cross-tabulation: about 7 ms, the same answer for every customer with the same
  seasonalities.
- Every fit computes the Fourier terms of each seasonality for its dates, the largest part
  of Prophet's preprocessing. Each row's terms depend on that row's time alone (Prophet's
  ``fourier_series`` is elementwise), so one table over every time the worker has seen
  serves every customer: customers whose days have different gaps take their rows from
  it, and only times new to the worker are computed (by Prophet, on the table's times).
- ``setup_dataframe`` (sort, scale y, the time index t) runs a dozen pandas column
  operations; for a plain history (``ds`` and ``y``, linear or flat growth, 'absmax'
  scaling, no extra regressors or conditions) the same frame is built from numpy arrays.
- Holidays: ``add_country_holidays`` lists every name the country has over 50 years to
  validate them (~110 ms), each fit builds the country's holidays for its years with the
  ``holidays`` package (~55 ms) and then their indicator columns row by row (~75 ms): four
  times the rest of a fit, and the same answers for every customer with the same calendar
  and dates.

:class:`FleetcastProphet` keeps each answer and hands out copies. Each depends only on
the inputs in its cache key, so fits, fitted parameters and the serialised model are
those of ``Prophet`` itself.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any, Self

import numpy as np
import pandas as pd
from prophet import Prophet
from prophet.make_holidays import get_holiday_names

_ComponentKey = tuple[Any, ...]
_components: dict[_ComponentKey, tuple[pd.DataFrame, dict[Any, list[str]]]] = {}
# A few seasonalities (period, order, name) x time resolutions; each table holds the
# times seen so far, sorted, and their Fourier terms.
_FEATURE_TABLES_MAX = 32
# Beyond this many times (20 years hourly) a table restarts from the customer at hand.
_FEATURE_TABLE_TIMES = 175_000
_feature_tables: OrderedDict[tuple[str, float, int, str], tuple[np.ndarray, pd.DataFrame]] = (
    OrderedDict()
)

_HOLIDAY_CACHE_SIZE = 32
_holiday_frames: OrderedDict[tuple[Any, ...], pd.DataFrame] = OrderedDict()
_holiday_features: OrderedDict[tuple[Any, ...], tuple[pd.DataFrame, list[float], list[str]]] = (
    OrderedDict()
)


@functools.lru_cache(maxsize=64)
def _country_holiday_names(country: str) -> tuple[str, ...]:
    return tuple(get_holiday_names(country))


def _frame_key(frame: pd.DataFrame | None) -> tuple[Any, ...] | None:
    if frame is None:
        return None
    # A few dozen rows: their values are a cheaper key than a hash of the frame.
    return (tuple(frame.columns), tuple(frame.itertuples(index=False, name=None)))


def _remember(cache: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    cache[key] = value
    if len(cache) > _HOLIDAY_CACHE_SIZE:
        cache.popitem(last=False)


class FleetcastProphet(Prophet):
    def add_country_holidays(self, country_name: str) -> Self:
        if self.history is not None or self.country_holidays is not None:
            return super().add_country_holidays(country_name)  # raises, or warns
        for name in _country_holiday_names(country_name):
            self.validate_column_name(name, check_holidays=False)
        self.country_holidays = country_name
        return self

    def construct_holiday_dataframe(self, dates: pd.Series) -> pd.DataFrame:
        """Prophet's, which depends on the years of ``dates`` only, kept per calendar."""
        names = self.train_holiday_names
        key = (
            self.country_holidays,
            tuple(sorted({int(year) for year in dates.dt.year.unique()})),
            _frame_key(self.holidays),
            None if names is None else tuple(names),
        )
        cached = _holiday_frames.get(key)
        if cached is None:
            cached = super().construct_holiday_dataframe(dates)
            _remember(_holiday_frames, key, cached.copy())
        else:
            _holiday_frames.move_to_end(key)
        return cached.copy()

    def make_holiday_features(
        self, dates: pd.Series, holidays: pd.DataFrame
    ) -> tuple[pd.DataFrame, list[float], list[str]]:
        """Prophet's, kept per (dates, holidays frame, prior scale); like Prophet's it
        records the holiday names of the first call as ``train_holiday_names``."""
        if dates.dt.tz is not None or dates.isna().any():
            return super().make_holiday_features(dates, holidays)
        key = (
            str(dates.dtype),
            dates.to_numpy().view(np.int64).tobytes(),
            _frame_key(holidays),
            float(self.holidays_prior_scale),
        )
        cached = _holiday_features.get(key)
        if cached is None:
            features, scales, names = super().make_holiday_features(dates, holidays)
            _remember(_holiday_features, key, (features.copy(), list(scales), list(names)))
            return features, scales, names
        _holiday_features.move_to_end(key)
        features, scales, names = cached
        if self.train_holiday_names is None:
            self.train_holiday_names = pd.Series(names)
        return features.copy(), list(scales), list(names)

    @classmethod
    def make_seasonality_features(
        cls, dates: pd.Series, period: float, series_order: int, prefix: str
    ) -> pd.DataFrame:
        if dates.dt.tz is not None or dates.isna().any():
            return super().make_seasonality_features(dates, period, series_order, prefix)
        key = (str(dates.dtype), float(period), int(series_order), prefix)
        stamps = dates.to_numpy()
        times = stamps.view(np.int64)
        known, table = _feature_tables.get(key, (np.empty(0, dtype=np.int64), None))
        rows = np.searchsorted(known, times)
        if table is None or not (
            np.all(rows < known.size)
            and np.array_equal(known[np.minimum(rows, known.size - 1)], times)
        ):
            known = np.union1d(known, times)
            if known.size > _FEATURE_TABLE_TIMES:
                known = np.unique(times)
            seen = pd.Series(known.view(stamps.dtype))
            table = super().make_seasonality_features(seen, period, series_order, prefix)
            _feature_tables[key] = (known, table)
            if len(_feature_tables) > _FEATURE_TABLES_MAX:
                _feature_tables.popitem(last=False)
            rows = np.searchsorted(known, times)
        _feature_tables.move_to_end(key)
        features = table.iloc[rows]
        features.index = dates.index
        return features

    def setup_dataframe(self, df: pd.DataFrame, initialize_scales: bool = False) -> pd.DataFrame:
        if not self._plain_history(df) or not (initialize_scales or self.start is not None):
            return super().setup_dataframe(df, initialize_scales)
        stamps = df["ds"].to_numpy()
        values = df["y"].to_numpy()
        order = np.argsort(stamps, kind="mergesort")
        stamps, values = stamps[order], values[order]
        if initialize_scales:
            self.y_min = 0.0
            self.y_scale = float(np.abs(values).max()) or 1.0
            self.start = pd.Timestamp(stamps[0])
            self.t_scale = pd.Timedelta(stamps[-1] - stamps[0])
        assert self.start is not None and self.t_scale is not None
        unit = np.datetime_data(stamps.dtype)[0]
        start = np.datetime64(self.start.as_unit(unit))
        span = np.timedelta64(self.t_scale.as_unit(unit))
        return pd.DataFrame(
            {
                "ds": stamps,
                "y": values,
                "floor": 0.0,
                "t": (stamps - start) / span,
                "y_scaled": values / self.y_scale,
            }
        )

    def _plain_history(self, df: pd.DataFrame) -> bool:
        """A frame of ``ds`` (naive datetimes, none missing) and finite float ``y``, for a
        model whose ``setup_dataframe`` does nothing but sort, scale and index time."""
        return (
            list(df.columns) == ["ds", "y"]
            and self.growth in ("linear", "flat")
            and self.scaling == "absmax"
            and not self.logistic_floor
            and not self.extra_regressors
            and all(props["condition_name"] is None for props in self.seasonalities.values())
            and isinstance(df["ds"].dtype, np.dtype)  # not a timezone-aware dtype
            and df["ds"].dtype.kind == "M"
            and df["y"].dtype == np.float64
            and not df["ds"].isna().any()
            and bool(np.isfinite(df["y"].to_numpy()).all())
            and len(df) > 0
        )

    def regressor_column_matrix(
        self, seasonal_features: pd.DataFrame, modes: dict[Any, list[str]]
    ) -> tuple[pd.DataFrame, dict[Any, list[str]]]:
        key = self._component_key(seasonal_features, modes)
        cached = _components.get(key)
        if cached is None:
            component_cols, modes = super().regressor_column_matrix(seasonal_features, modes)
            _components[key] = (component_cols.copy(), {m: list(n) for m, n in modes.items()})
            return component_cols, modes
        component_cols, updated_modes = cached
        # Prophet updates ``modes`` in place and returns it: do the same.
        for mode, names in updated_modes.items():
            modes[mode][:] = names
        return component_cols.copy(), modes

    def _component_key(
        self, seasonal_features: pd.DataFrame, modes: dict[Any, list[str]]
    ) -> _ComponentKey:
        """Everything ``Prophet.regressor_column_matrix`` reads."""
        trained = self.train_component_cols
        holidays = self.train_holiday_names
        return (
            tuple(seasonal_features.columns),
            tuple((mode, tuple(names)) for mode, names in sorted(modes.items())),
            self.holidays_mode,
            tuple(sorted((name, props["mode"]) for name, props in self.extra_regressors.items())),
            None if holidays is None else tuple(holidays.unique()),
            None
            if trained is None
            else (tuple(trained.columns), tuple(trained.index), trained.to_numpy().tobytes()),
        )

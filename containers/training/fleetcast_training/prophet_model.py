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

:class:`FleetcastProphet` keeps each answer and hands out copies. Each depends only on
the inputs in its cache key, so fits, fitted parameters and the serialised model are
those of ``Prophet`` itself.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import pandas as pd
from prophet import Prophet

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


class FleetcastProphet(Prophet):
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

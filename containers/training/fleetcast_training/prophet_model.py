"""Prophet, with per-fit work that customers share done once per worker process.

- Every ``fit`` and ``predict`` builds the component matrix (which feature column belongs
  to which seasonality, and to the additive or multiplicative total) with a pandas
  cross-tabulation: about 7 ms, the same answer for every customer with the same
  seasonalities.
- Every fit computes the Fourier terms of each seasonality for its dates: the same for
  every customer on the same date grid, the largest part of Prophet's preprocessing.

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
_FEATURE_CACHE_SIZE = 32  # a few date grids (history, holdout window) x seasonalities
_features: OrderedDict[tuple[bytes, float, int, str], pd.DataFrame] = OrderedDict()


class FleetcastProphet(Prophet):
    @classmethod
    def make_seasonality_features(
        cls, dates: pd.Series, period: float, series_order: int, prefix: str
    ) -> pd.DataFrame:
        if dates.dt.tz is not None:
            return super().make_seasonality_features(dates, period, series_order, prefix)
        key = (
            dates.to_numpy(dtype="datetime64[ns]").view(np.int64).tobytes(),
            float(period),
            int(series_order),
            prefix,
        )
        cached = _features.get(key)
        if cached is None:
            cached = super().make_seasonality_features(dates, period, series_order, prefix)
            _features[key] = cached
            if len(_features) > _FEATURE_CACHE_SIZE:
                _features.popitem(last=False)
        else:
            _features.move_to_end(key)
        return cached.copy()

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

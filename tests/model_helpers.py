"""How training chose a model, for tests that write archives or registry records by hand:
what every archive training writes carries (``model_kind`` and its ``backtest``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fleetcast_contracts.families import PROPHET
from fleetcast_contracts.model_archive import Backtest, CandidateScore


def chosen(kind: str = PROPHET) -> dict[str, Any]:
    """``model_kind`` and ``backtest`` of a model of ``kind`` chosen on a 2-window backtest
    over seasonal naive."""
    scores = [
        CandidateScore(model_kind=kind, wape=0.1, mae=1.0, smape=0.1, rmse=1.2),
        CandidateScore(model_kind="seasonal_naive", wape=0.2, mae=2.0, smape=0.2, rmse=2.4),
    ]
    return {
        "model_kind": kind,
        "backtest": Backtest(
            horizon=7,
            windows=2,
            origins=[datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 8, tzinfo=UTC)],
            chosen=kind,
            runner_up="seasonal_naive",
            why="the least backtest error",
            candidates=scores,
        ),
    }

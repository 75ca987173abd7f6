"""What API Gateway keeps for a REST API stage: its usage plan (throttle and quota) and its
API keys, read from moto's API Gateway.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

KEY_REFRESH_SECONDS = 2.0


class TokenBucket:
    """API Gateway's throttle: ``rate`` requests per second, bursts up to ``burst``."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._updated = clock()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.rate)
            self._updated = now
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False


@dataclass
class UsagePlan:
    """A usage plan's limits, applied per API key."""

    rate: float | None
    burst: int | None
    quota: int | None
    quota_period: str = "DAY"
    _buckets: dict[str, TokenBucket] = field(default_factory=dict)
    _used: dict[tuple[str, str], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, key_id: str) -> str | None:
        """None when the request may go on, else API Gateway's 429 message."""
        with self._lock:
            if self.rate is not None and self.burst is not None:
                bucket = self._buckets.setdefault(key_id, TokenBucket(self.rate, self.burst))
                if not bucket.take():
                    return "Too Many Requests"
            if self.quota is not None:
                window = (key_id, _quota_window(self.quota_period))
                if self._used.get(window, 0) >= self.quota:
                    return "Limit Exceeded"
                self._used[window] = self._used.get(window, 0) + 1
        return None


def _quota_window(period: str) -> str:
    now = datetime.now(UTC)
    if period == "WEEK":
        return now.strftime("%G-W%V")
    if period == "MONTH":
        return now.strftime("%Y-%m")
    return now.strftime("%Y-%m-%d")


class ApiKeys:
    """The API keys of the usage plans on this API's stage, read from moto's API Gateway
    (refreshed every few seconds, so a key disabled there stops working here)."""

    def __init__(self, apigateway: Any, api_id: str, stage: str) -> None:
        self._apigateway = apigateway
        self._api_id = api_id
        self._stage = stage
        self._by_value: dict[str, str] = {}
        self._refreshed = 0.0
        self._lock = threading.Lock()

    def key_id(self, value: str | None) -> str | None:
        """The id of the enabled key with this value, else None."""
        if not value:
            return None
        with self._lock:
            stale = time.monotonic() - self._refreshed > KEY_REFRESH_SECONDS
            if stale:
                self._refresh()
            return self._by_value.get(value)

    def _refresh(self) -> None:
        keys: dict[str, str] = {}
        for plan in self._apigateway.get_usage_plans().get("items", []):
            stages = plan.get("apiStages", [])
            if not any(
                s.get("apiId") == self._api_id and s.get("stage") == self._stage for s in stages
            ):
                continue
            for plan_key in self._apigateway.get_usage_plan_keys(usagePlanId=plan["id"]).get(
                "items", []
            ):
                key = self._apigateway.get_api_key(apiKey=plan_key["id"], includeValue=True)
                if key.get("enabled"):
                    keys[key["value"]] = key["id"]
        self._by_value = keys
        self._refreshed = time.monotonic()

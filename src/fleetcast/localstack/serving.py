"""Serving on the local stack: the multi-model endpoint runtime and the forecast API.

(Placeholder until the serving work lands: it serves nothing yet.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetcast.localstack.stack import LocalStack


class LocalServing:
    def __init__(self, stack: LocalStack) -> None:
        self._stack = stack

    def start(self) -> dict[str, str]:
        """Start serving; return extra ``fleetcast env`` variables (API URL and key)."""
        return {}

    def stop(self) -> None:
        pass

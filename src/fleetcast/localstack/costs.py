"""Cost watch on the local stack: billing history in Cost Explorer, SES, the outbox.

(Placeholder until the cost-watch integration lands.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetcast.localstack.stack import LocalStack


class LocalCosts:
    def __init__(self, stack: LocalStack) -> None:
        self._stack = stack

    def start(self) -> dict[str, str]:
        """Prepare cost watch; return extra ``fleetcast env`` variables."""
        return {}

    def stop(self) -> None:
        pass

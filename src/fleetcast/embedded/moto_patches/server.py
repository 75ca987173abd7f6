"""moto's WSGI dispatcher, remembering its answer for each host name. Written for moto
5.2.5 (see :mod:`fleetcast.embedded.moto_patches`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app


class MotoDispatcher(DomainDispatcherApplication):
    """moto's WSGI dispatcher, remembering which backend serves each host name.

    moto finds the backend anew for every request, under one lock: it lists the folders
    of its package and tries every service's URL patterns. On the local stack that was
    over half of the time of each AWS request, and it serialised them all; the answer
    for a host name never changes.
    """

    def __init__(self, create_app: Callable[..., Any] = create_backend_app) -> None:
        super().__init__(create_app)
        self._backends: dict[str | None, Any] = {}

    def get_backend_for_host(self, host: str | None) -> Any:
        if host not in self._backends:
            self._backends[host] = super().get_backend_for_host(host)
        return self._backends[host]

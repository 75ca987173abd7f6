"""What an emulated service may use of the local stack, and nothing more.

The services that start after the AWS gateway (endpoint hosting and the API gateway in
:mod:`~fleetcast.embedded.serving`, cost data in :mod:`~fleetcast.embedded.costs`)
receive this instead of the whole :class:`~fleetcast.embedded.stack.EmbeddedStack`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetcast.embedded.gateway import WsgiApp
from fleetcast.embedded.lambdas import LocalFunction
from fleetcast.embedded.template import LocalTemplate


@dataclass(frozen=True)
class ServiceContext:
    template: LocalTemplate
    # The checkout: containers/ and events/ are read from it.
    root: Path
    state_dir: Path
    # Where the AWS APIs answer (moto behind the gateway).
    endpoint_url: str
    # A client of the stack's AWS APIs, per service name.
    client: Callable[[str], Any]
    # A client that calls as a role of the template (role ARN, service name).
    client_as: Callable[[str, str], Any]
    # Take the AWS API requests ``matches`` accepts before moto does (Gateway.add_route).
    add_route: Callable[[Callable[[dict[str, Any]], bool], WsgiApp], None]
    # The template's functions by logical id, running.
    functions: Mapping[str, LocalFunction]
    # Tell the user something at start (a port that was taken, say).
    notify: Callable[[str], None]
    # The stack itself was asked for any free port (tests, `fleetcast demo`).
    ephemeral_ports: bool

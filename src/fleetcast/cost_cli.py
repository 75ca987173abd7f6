"""``fleetcast cost-report``: the cost-watch side of the CLI (placeholder)."""

from __future__ import annotations

from typing import Any


def add_cost_commands(commands: Any) -> None:
    """Register cost subcommands on the ``fleetcast`` parser's subparsers."""
    del commands

"""``fleetcast forecast``: the serving side of the CLI (placeholder until serving lands)."""

from __future__ import annotations

import argparse
from typing import Any


def add_serving_commands(commands: Any) -> None:
    """Register serving subcommands on the ``fleetcast`` parser's subparsers."""
    del commands


__all__ = ["add_serving_commands", "argparse"]

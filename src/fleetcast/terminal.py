"""The CLI's consoles and the error it prints without a traceback, shared by cli.py and
the command modules it adds (cost_cli.py), so neither imports the other's module."""

from __future__ import annotations

from rich.console import Console

console = Console()
err = Console(stderr=True)


class UsageError(Exception):
    """A mistake the user can fix; printed without a traceback."""

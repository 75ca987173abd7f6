"""The CLI's consoles, the error it prints without a traceback, and how text that comes
from data (S3 keys, customer and run ids, failure reasons) is shown on them, shared by
cli.py and the command modules it adds (cost_cli.py), so neither imports the other's
module."""

from __future__ import annotations

import logging
import re

from rich.console import Console
from rich.markup import escape as escape_markup

console = Console()
err = Console(stderr=True)

# C0 and C1 controls (ESC starts a terminal's escape sequences, and C1's CSI and OSC do
# alone), DEL, and the bidirectional overrides that show text in another order than it is.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


class UsageError(Exception):
    """A mistake the user can fix; printed without a traceback."""


def _escaped(found: re.Match[str]) -> str:
    character = found.group()
    if character in _NAMED:
        return _NAMED[character]
    code = ord(character)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_controls(text: object, keep_newlines: bool = False) -> str:
    """``text`` with each control character written out (``\\x1b``, ``\\n``), so that
    data shown on a terminal (or in the HTML report) cannot move the cursor, recolour
    the screen, set the window's title or hide what follows: an uploader chooses S3 keys
    and so what ``fleetcast status`` prints. ``keep_newlines``: newlines and tabs stay
    (a log line's traceback)."""
    if keep_newlines:
        return "\n".join(
            _CONTROLS.sub(lambda found: "\t" if found.group() == "\t" else _escaped(found), line)
            for line in str(text).split("\n")
        )
    return _CONTROLS.sub(_escaped, str(text))


def shown(text: object) -> str:
    """Data-derived ``text`` as a rich console prints it: controls escaped
    (:func:`escape_controls`) and rich's markup too (a key may hold ``[red]``)."""
    return escape_markup(escape_controls(text))


class ControlsEscaped(logging.Formatter):
    """Log lines on the terminal with controls escaped (a function's error may quote a
    record's data); newlines stay, as tracebacks need them."""

    def format(self, record: logging.LogRecord) -> str:
        return escape_controls(super().format(record), keep_newlines=True)

"""The CLI's consoles, the error it prints without a traceback, how it prints a table whole,
and how text that comes from data (S3 keys, customer and run ids, failure reasons) is shown
on them; shared by cli.py and the command modules it adds (cost_cli.py), so neither imports
the other's module."""

from __future__ import annotations

import argparse
import importlib
import logging
import re
from collections.abc import Callable

from rich.console import Console, RenderableType
from rich.markup import escape as escape_markup
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

# A width no table reaches: measured at it, a table says how wide it needs to be.
UNBOUNDED = 100_000

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


def fits(out: Console, table: Table) -> bool:
    """Whether ``table`` fits ``out``'s width with every cell of a ``no_wrap`` column (ids,
    paths, amounts) whole on its line and no word of another column folded.

    Sets each ``no_wrap`` column's ``min_width`` to its widest cell, so that a table that
    fits keeps those cells whole (rich would otherwise shrink and cut them)."""
    unbounded = out.options.update_width(UNBOUNDED)
    for column in table.columns:
        if column.no_wrap:
            cells = [column.header, *column.cells] if table.show_header else list(column.cells)
            column.min_width = max(
                (Measurement.get(out, unbounded, cell).maximum for cell in cells), default=0
            )
    return Measurement.get(out, unbounded, table).minimum <= out.width


def print_table(out: Console, table: Table) -> None:
    """``table`` when it fits the width whole, else one block per row, a ``column: value``
    line per cell, never wrapped or cut: piped to a file, ``cat`` or ``grep``, or in a
    narrow terminal, an id or an S3 path stays whole on its line, to copy.

    A table without a header (a list of label and value) becomes ``label: value`` lines."""
    if fits(out, table):
        out.print(table)
        return
    if table.title:
        out.print(table.title, style="bold", soft_wrap=True)
    columns = [[_text(cell) for cell in column.cells] for column in table.columns]
    headers = [str(column.header) for column in table.columns]
    for row in zip(*columns, strict=True):
        if table.show_header:
            cells = list(zip(headers, row, strict=True))
        else:
            # The first cell names the rest.
            cells = [(row[0].plain, Text(" ").join(row[1:]))]
        for number, (header, cell) in enumerate(cells):
            # A block's first line unindented, the rest under it.
            indent = "  " if number and table.show_header else ""
            first, *more = cell.split("\n")
            out.print(Text.assemble(f"{indent}{header}: ", first), soft_wrap=True)
            for line in more:
                out.print(Text.assemble(f"{indent}  ", line), soft_wrap=True)
        if table.show_header:
            out.print()


def _text(cell: RenderableType) -> Text:
    """A cell as text: a string's markup (colours) rendered, a Text as it is."""
    return cell if isinstance(cell, Text) else Text.from_markup(str(cell))


def command(target: str) -> Callable[[argparse.Namespace], int]:
    """A command's function by its ``module:function`` name, imported when the command
    runs: ``fleetcast --help`` and every other command never import its module (boto3,
    pyarrow, the local stack)."""
    module_name, _, function_name = target.partition(":")

    def run(args: argparse.Namespace) -> int:
        function = getattr(importlib.import_module(module_name), function_name)
        result: int = function(args)
        return result

    return run


_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain(docstring: str | None) -> str:
    """A docstring as --help shows it: Sphinx roles and double backticks become the plain
    text they mark (``:func:`name``` -> ``name``; a literal in single backticks, as the
    options' help writes a command)."""
    return _LITERAL.sub(r"`\1`", _ROLE.sub(r"\1", docstring or ""))

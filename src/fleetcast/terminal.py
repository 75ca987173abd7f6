"""The CLI's consoles, the error it prints without a traceback, and how it prints a table
whole; shared by cli.py and the command modules it adds (cost_cli.py), so neither imports
the other's module."""

from __future__ import annotations

import argparse
import importlib
import re
from collections.abc import Callable

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

# A width no table reaches: measured at it, a table says how wide it needs to be.
UNBOUNDED = 100_000

console = Console()
err = Console(stderr=True)


class UsageError(Exception):
    """A mistake the user can fix; printed without a traceback."""


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

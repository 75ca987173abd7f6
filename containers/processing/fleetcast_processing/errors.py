"""The one error that fails a processing job on purpose."""

from __future__ import annotations


class UnusableInputError(Exception):
    """The upload (or a stored history file) cannot be processed at all.

    The message is written for the person who uploaded the file: it becomes the job's
    ExitMessage (SageMaker's FailureReason for it is generic), so it says what is wrong
    and, where it can, how to fix it.
    """


def visible(text: str) -> str:
    """``text`` for a message, with characters that print as nothing (a byte order mark,
    control characters, zero-width spaces) written as escapes: "columns found:
    'customer_id'" is no help when the name is really '\\ufeffcustomer_id'."""
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in text
    )

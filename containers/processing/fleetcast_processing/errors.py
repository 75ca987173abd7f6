"""The one error that fails a processing job on purpose."""

from __future__ import annotations


class UnusableInputError(Exception):
    """The upload (or a stored history file) cannot be processed at all.

    The message is written for the person who uploaded the file: it becomes the job's
    FailureReason, so it says what is wrong and, where it can, how to fix it.
    """

"""Mistakes in what a caller asked for, as distinct from bugs.

Code raises :class:`UsageError` with one line that says what was wrong and how to fix it
(a bad flag value, a missing file, a model directory that is not one). The CLI's one error
reporter (``quarry.cli.main``) prints it and exits 2; anything else that escapes a command
is an internal error (exit 1, traceback only with ``--debug``). It subclasses ``ValueError``
so library callers that already catch ``ValueError`` keep working.
"""

from __future__ import annotations


class UsageError(ValueError):
    """A mistake in the caller's input or configuration; the message says how to fix it."""

"""Errors of the validator (the whole tree: runtime/errors.py), and the exit status each means.

0 clean; 1 a discrepancy (not an error: the audit's result); 2 ``InputError``, bad input such as
a cluster out of reach, an unknown topic or an empty range; 3 ``IncompleteError`` (and any other
``ValidatorError``), the audit could not finish, so it has no verdict.
"""

from __future__ import annotations

from runtime.errors import ExactlyError

EXIT_CLEAN = 0
EXIT_DISCREPANCY = 1
EXIT_BAD_INPUT = 2
EXIT_INCOMPLETE = 3


class ValidatorError(ExactlyError):
    """Root of every error the validator raises; ``str()`` is one line for the user."""

    exit_status = EXIT_INCOMPLETE


class InputError(ValidatorError):
    """What the user asked to check cannot be checked as asked."""

    exit_status = EXIT_BAD_INPUT


class IncompleteError(ValidatorError):
    """The audit started but could not finish, so it has no verdict."""

    exit_status = EXIT_INCOMPLETE


class MergeJarError(ValidatorError):
    """The merge plan's jar cannot be built here (no JDK, no Kafka client to compile against):
    the join plan checks every topic instead, with a warning (validator/merge_jar.py)."""

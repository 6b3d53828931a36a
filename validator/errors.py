"""Errors of the validator, and the exit status each one means.

ValidatorError          root of every error the validator raises
├── InputError          bad input: a cluster out of reach, an unknown topic, an empty range
│                       (exit 2)
└── IncompleteError     the audit could not finish (Spark failed, a read failed): no verdict
                        (exit 3)

A discrepancy is not an error: it is the audit's result, and exit status 1.
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

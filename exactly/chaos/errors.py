"""The chaos run's one error: the run itself failed (not a verdict); say what and exit 2."""

from __future__ import annotations

from runtime.errors import ExactlyError


class ChaosError(ExactlyError):
    """A failure of the chaos run itself (bad options, a cluster that would not start, a role
    that stopped on its configuration): the message names the problem."""

"""The demo's one error: something named went wrong, say what and exit 1."""

from __future__ import annotations

from runtime.errors import ExactlyError


class DemoError(ExactlyError):
    """A failure of the demo itself (not a verdict): the message names the problem."""

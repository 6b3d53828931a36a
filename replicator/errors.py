"""Errors of stage 1 (the whole tree: runtime/errors.py).

A topic stage 1 cannot create or read raises runtime's ``TopicSetupError``, re-exported here.
"""

from __future__ import annotations

from runtime.errors import ExactlyError, TopicSetupError


class ReplicatorError(ExactlyError):
    """Root of stage 1's own errors."""


class StagingMismatchError(ReplicatorError):
    """The staging topic's partition count differs from the lane mapping recorded for it."""


__all__ = ["ReplicatorError", "StagingMismatchError", "TopicSetupError"]

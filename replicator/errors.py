"""Errors of stage 1.

ReplicatorError
├── StagingMismatchError   the staging topic is not what was recorded at its creation
└── TopicSetupError        a staging or destination topic could not be created or read
"""

from __future__ import annotations


class ReplicatorError(Exception):
    """Root of every error stage 1 raises."""


class StagingMismatchError(ReplicatorError):
    """The staging topic's partition count differs from the lane mapping recorded for it."""


class TopicSetupError(ReplicatorError):
    """Creating or describing a topic failed."""

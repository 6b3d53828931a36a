"""Errors of offset sync (the whole tree: runtime/errors.py).

A cycle that raises one fails as a whole: nothing is committed on the target, the next cycle
retries (after a few failures, the clients are made anew).
"""

from __future__ import annotations

from runtime.errors import ExactlyError


class OffsetSyncError(ExactlyError):
    """Root of every error offset sync raises."""


class ReadTimeoutError(OffsetSyncError):
    """Partitions of a translation read were not read to their end within the time allowed."""


class NoOffsetsError(OffsetSyncError):
    """Every selected group's offset fetch failed in one cycle."""

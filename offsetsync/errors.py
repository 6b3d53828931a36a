"""Errors of offset sync (the whole tree: runtime/errors.py).

A cycle that raises one ends there: what its earlier steps committed on the target stands,
nothing more is committed, and the next cycle retries (after a few failures, the clients are
made anew).
"""

from __future__ import annotations

from runtime.errors import ExactlyError


class OffsetSyncError(ExactlyError):
    """Root of every error offset sync raises."""


class ReadTimeoutError(OffsetSyncError):
    """Partitions of a translation read were not read to their end within the time allowed."""


class NoOffsetsError(OffsetSyncError):
    """Not one group's offset fetch was answered in a cycle's first step (offsetsync/loop.py):
    the client is taken for broken."""


class StaleLeadershipError(OffsetSyncError):
    """Partitions answered that this client's idea of their leader is out of date: raised once
    every step of the cycle has run (the other partitions synced), so that failed cycles in a
    row make the clients anew (offsetsync/loop.py)."""

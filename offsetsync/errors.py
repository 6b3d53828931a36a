"""Errors of offset sync.

OffsetSyncError
└── ReadTimeoutError     a cycle's reads did not reach their end in time (a broker away): the cycle
                    fails, nothing is committed on the target, the next cycle tries again
"""

from __future__ import annotations


class OffsetSyncError(Exception):
    """Root of every error offset sync raises."""


class ReadTimeoutError(OffsetSyncError):
    """Partitions of a translation read were not read to their end within the time allowed."""

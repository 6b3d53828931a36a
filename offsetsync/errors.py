"""Errors of offset sync.

OffsetSyncError
├── ReadTimeoutError  a cycle's reads did not reach their end in time (a broker away): the
│                     cycle fails, nothing is committed on the target, the next one retries
└── NoOffsetsError    not one selected group's offsets could be fetched from the source: the
                      cycle fails (after a few, the clients are made anew)
"""

from __future__ import annotations


class OffsetSyncError(Exception):
    """Root of every error offset sync raises."""


class ReadTimeoutError(OffsetSyncError):
    """Partitions of a translation read were not read to their end within the time allowed."""


class NoOffsetsError(OffsetSyncError):
    """Every selected group's offset fetch failed in one cycle."""

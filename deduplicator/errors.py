"""Errors of stage 2.

DeduplicatorError
└── StateStoreError   the local RocksDB copy of the dedup state cannot be opened, read or written
"""

from __future__ import annotations


class DeduplicatorError(Exception):
    """Root of every error stage 2 raises."""


class StateStoreError(DeduplicatorError):
    """The local state store is unusable or was asked to do something impossible.

    An unusable store is only a lost cache: delete its directory and restore it from the
    changelog topic from the beginning (DESIGN.md §3).
    """

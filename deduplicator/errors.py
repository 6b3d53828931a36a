"""Errors of stage 2 (the whole tree: runtime/errors.py)."""

from __future__ import annotations

from confluent_kafka import KafkaError

from runtime.errors import ExactlyError


class DeduplicatorError(ExactlyError):
    """Root of every error stage 2 raises."""


class StateStoreError(DeduplicatorError):
    """The local state store is unusable or was asked to do something impossible.

    An unusable store is only a lost cache: delete its directory and restore it from the
    changelog topic from the beginning (docs/design.md §3).
    """


class StateStoreLockedError(StateStoreError):
    """Another open store holds the directory's lock: a client in this process, or another
    process that owned the partition before and still runs (frozen, or sharing STATE_DIR).
    Not a corrupt store: deleting it would leave that other RocksDB writing files into the
    directory of the new one (docs/design.md §3)."""


class TransactionFailedError(DeduplicatorError):
    """The open transaction cannot commit (records unacknowledged, a retriable error past its
    deadline): abort, rewind to the committed offsets and go on. Nothing of it becomes visible."""


class RestoreTimeoutError(DeduplicatorError):
    """Restoring state did not finish within the deadline of the rebalance callback.

    Fatal for the process, never for the data: restore writes RocksDB in batches that carry their
    changelog offset, so the restarted process resumes where this one stopped.
    """


class ProducerFailedError(DeduplicatorError):
    """The transactional producer failed for good with an error a new producer of the same
    transactional.id mends (runtime.producer_mendable): the loop replaces it and rewinds."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__(error.str())
        self.error = error

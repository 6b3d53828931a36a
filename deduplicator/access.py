"""Stage 2's ACL diagnosis: what it needs granted on the target, and a failed transaction told
as the refusal it is, naming the ACL to grant (runtime.raise_if_refused, docs/security.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException, Producer

from deduplicator.errors import DeduplicatorError, TransactionFailedError
from runtime import grants, kafka_error_of, raise_if_refused, refused_for_good
from runtime.grants import (
    CHANGELOG,
    DEDUPLICATOR_GROUP,
    DESTINATION_TOPIC,
    STAGING,
    TRANSACTIONAL_ID_PREFIX,
)
from runtime.names import FlowNames

Wanted = Mapping[str, tuple[str, str]]

# Delivery errors of records purged because their transaction failed (librdkafka purges the
# queue when a transaction enters its abortable state): the cause is the transaction's error.
_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
# commit_transaction answers at once when a record failed; the bound is for the unexpected.
_ASK_TRANSACTION_ERROR_S = 10.0


def needs(
    names: FlowNames,
    transactional_id: str,
    written: Iterable[str],
    changelog: str,
    *,
    writing: bool = True,
) -> dict[str, tuple[str, str]]:
    """What stage 2 needs granted for the transaction's writes (``writing``: to the destination
    topics ``written`` and the ``changelog``) or for the staging reads (``refusal``'s
    ``wanted``), as runtime/grants.py's table grants it."""
    topics: dict[str, str | Iterable[str]] = (
        {DESTINATION_TOPIC: written, CHANGELOG: changelog} if writing else {STAGING: names.staging}
    )
    known = {
        TRANSACTIONAL_ID_PREFIX: transactional_id,
        DEDUPLICATOR_GROUP: names.deduplicator_group,
        **topics,
    }
    return grants.needs("deduplicator", grants.TARGET, known)


def raise_unacknowledged(producer: Producer, failures: list[KafkaError], wanted: Wanted) -> None:
    """The open transaction of ``producer`` was not acknowledged (delivery ``failures``, none if
    the flush timed out): raise why, as the refusal it is if it is one (``wanted``: ``needs``),
    else TransactionFailedError."""
    for failure in failures:  # no abort and retry mends a missing ACL
        raise_if_refused(failure, "target", wanted)
    for failure in failures:
        # A changelog record refused for good (only the changelog's records have a delivery
        # callback): the same transaction again would meet it again, without end.
        if refused_for_good(failure):
            raise DeduplicatorError(
                f"the target refuses a changelog record for good: {failure.str()}"
            )
    if failures and all(failure.code() in _PURGED for failure in failures):
        _raise_if_the_transaction_was_refused(producer, wanted)
    reasons = [failure.str() for failure in failures[:3]]
    raise TransactionFailedError(f"transaction records not acknowledged: {reasons}")


def _raise_if_the_transaction_was_refused(producer: Producer, wanted: Wanted) -> None:
    """Records purged with their transaction hide why it failed: a destination this role
    may not write fails the transaction when its partition is added, and abort after abort
    would follow; a record a broker refused for good, likewise. librdkafka gives the
    transaction's own error to the next transactional call, so ask commit_transaction: once
    a record of the transaction failed delivery it commits nothing (it answers "abort
    required" before sending a request), so invariant 5 holds. The caller aborts as after any
    failed transaction, on that error."""
    try:
        producer.commit_transaction(_ASK_TRANSACTION_ERROR_S)
    except KafkaException as exc:
        raise_if_refused(exc, "target", wanted)
        if kafka_error_of(exc).txn_requires_abort():
            # The transaction's own error (a record the broker refused for good, say): the
            # caller aborts on it, or stops what it names (deduplicator/stops.py).
            raise
        return
    # Not librdkafka's behaviour; if it ever were, stage 2's state would lag its output: stop,
    # and the successor restores from the changelog (as for an unknown commit outcome).
    raise DeduplicatorError("a transaction whose records were purged was committed")

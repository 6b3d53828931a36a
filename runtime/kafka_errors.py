"""The one place where a confluent_kafka error becomes retriable, abortable or fatal.

Rules, first match wins:

1. ``fatal()``, a fencing code, an authorization code or a certificate refused
   (``certificate_refusal``): FATAL (``FencedError`` when fenced; ``refusal`` makes a
   ``NotAuthorizedError`` of an authorization code, where the caller knows the resource).
2. ``txn_requires_abort()``: ABORTABLE.
3. ``retriable()``: RETRIABLE.
4. a code in ``_TRANSIENT_CODES``: RETRIABLE.
5. anything else, ``_FATAL_CODES`` included: FATAL. We never retry what we do not understand.
"""

from __future__ import annotations

import enum
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from runtime.errors import (
    AbortableKafkaError,
    FatalKafkaError,
    FencedError,
    KafkaClientError,
    NotAuthorizedError,
    RetriableKafkaError,
)

T = TypeVar("T")


class ErrorClass(enum.Enum):
    RETRIABLE = "retriable"
    ABORTABLE = "abortable"
    FATAL = "fatal"


# Another instance owns our identity now. Going on would break exactly-once (two writers for one
# transactional.id or one static member): stop this client, never retry.
_FENCING_CODES = frozenset(
    {
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError._FENCED,
        KafkaError.FENCED_INSTANCE_ID,
    }
)

# Not flagged retriable by librdkafka in every path, but transient in practice: a broker
# restarting or electing leaders, a coordinator moving or loading its log (docs/design.md §9:
# the first init_transactions() after a start answers "coordinator load in progress"), a
# transaction of our previous incarnation still completing. Waiting and calling again is the cure.
_TRANSIENT_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._WAIT_COORD,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,  # Kafka now calls it NOT_LEADER_OR_FOLLOWER
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.CONCURRENT_TRANSACTIONS,
        # A broker restarted or leadership moved: our metadata's leader epoch is stale (or the
        # broker's is); librdkafka refreshes it, and the same request then succeeds.
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        # A new leader asked for a watermark before its high watermark caught up ("Leader high
        # watermark is not caught up"; seen on three nodes right after a restart).
        KafkaError.OFFSET_NOT_AVAILABLE,
        # The admin client's ListOffsets while no broker leads the partition yet (a restart):
        # "Failed to query partition leaders: No leaders found".
        KafkaError._NOENT,
        # The broker a call was waiting on left the client's metadata (it restarted and came
        # back): "Broker handle destroyed without termination". The same call on the broker's
        # new handle succeeds (exactly chaos found a deduplicator exiting on it).
        KafkaError._DESTROY_BROKER,
        # What Kafka's Java client retries and librdkafka's older calls (watermarks,
        # offsets_for_times, committed, admin futures) hand back unflagged: a replica or log
        # directory failing over, a partition reassigned, writes below min.insync.replicas, a
        # controller moving, a quota throttling us, offsets a transaction has not ended yet.
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.KAFKA_STORAGE_ERROR,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.THROTTLING_QUOTA_EXCEEDED,
        KafkaError.NOT_CONTROLLER,
        KafkaError.UNSTABLE_OFFSET_COMMIT,
    }
)

# Fatal although librdkafka may not flag them so. Documentation of intent: rule 5 makes them
# fatal anyway, and a test keeps them out of _TRANSIENT_CODES.
_FATAL_CODES = frozenset(
    {
        # Credentials and ACLs do not heal by retrying; an operator must act, and a crash
        # (restart with backoff) is visible where a retry loop is not. The authorization codes
        # are fatal by rule 1 (_AUTHORIZATION_CODES), even inside a transaction.
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        # The broker lacks what exactly-once needs (transactions, headers, a protocol version).
        KafkaError._UNSUPPORTED_FEATURE,
        KafkaError.UNSUPPORTED_VERSION,
        KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        # docs/design.md §9 (librdkafka #4849): the producer's transaction state is broken; close
        # the producer and make a new one with the same transactional.id.
        KafkaError.INVALID_TXN_STATE,
    }
)

_ERROR_TYPES: dict[ErrorClass, type[KafkaClientError]] = {
    ErrorClass.RETRIABLE: RetriableKafkaError,
    ErrorClass.ABORTABLE: AbortableKafkaError,
    ErrorClass.FATAL: FatalKafkaError,
}


# A missing ACL. Inside a transaction librdkafka flags it abortable (AddPartitionsToTxn): an
# abort and a retry would meet it again forever, so it is fatal before rule 2.
_AUTHORIZATION_CODES = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "TOPIC",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "GROUP",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TRANSACTIONAL_ID",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "CLUSTER",
}


class CertificateRefusal(enum.Enum):
    """Which side's certificate a TLS handshake refused."""

    CLIENT = "client"  # the broker refused ours (or that we sent none)
    BROKER = "broker"  # we could not verify the broker's


# How a refused certificate reaches error_cb and librdkafka's log (its FAIL line, which
# runtime/broker_reach.py counts), and only them: the call itself fails as a "Broker transport
# failure" (_TRANSPORT, transient), which start-up would retry for minutes. The broker refuses
# ours with a TLS alert (RFC 8446 §6.2): a CA it does not trust was "ssl/tls alert certificate
# unknown: SSL alert number 46" from Kafka 4.3.1 (tests/security/test_authentication.py), TLS
# 1.2's OpenSSL words it "sslv3 alert bad certificate", and no certificate at all is
# "certificate required". Ours refusing the broker's is OpenSSL's "certificate verify failed"
# (_SSL). No retry mends either.
_CLIENT_CERTIFICATE_REFUSED = re.compile(
    r"alert (?:bad certificate|unsupported certificate|certificate revoked|certificate expired"
    r"|certificate unknown|unknown ca|certificate required)"
)
_BROKER_CERTIFICATE_UNVERIFIED = re.compile(r"certificate verify failed")
_HANDSHAKE_CODES = frozenset({KafkaError._TRANSPORT, KafkaError._SSL})


def certificate_refusal(error: KafkaError) -> CertificateRefusal | None:
    """Whether ``error`` (an ``error_cb``'s) is a TLS handshake that refused a certificate, and
    whose."""
    if error.code() not in _HANDSHAKE_CODES:
        return None
    return certificate_refused_in(error.str())


def certificate_refused_in(text: str) -> CertificateRefusal | None:
    """Whose certificate librdkafka's ``text`` (an error's, or a line of its log) says a TLS
    handshake refused, if it says so."""
    if _CLIENT_CERTIFICATE_REFUSED.search(text):
        return CertificateRefusal.CLIENT
    if _BROKER_CERTIFICATE_UNVERIFIED.search(text):
        return CertificateRefusal.BROKER
    return None


def _fenced(error: KafkaError) -> bool:
    """Whether another instance owns our identity. Not so for a transaction's offsets refused
    with FENCED_INSTANCE_ID: they carried the member id our own consumer had before it rejoined
    (its session timed out while the target was below min.insync.replicas, three-node tests),
    and librdkafka, like Kafka's Java TransactionManager, makes it the transaction's abortable
    error. A live twin would fence our consumer's own heartbeat and our producer too."""
    if error.code() == KafkaError.FENCED_INSTANCE_ID:
        return error.fatal() or not error.txn_requires_abort()
    return error.code() in _FENCING_CODES


# How librdkafka words FENCED_INSTANCE_ID inside a consumer's _FATAL error (its fatal errors keep
# the original code only in their text).
_STATIC_MEMBER_FENCED = KafkaError(KafkaError.FENCED_INSTANCE_ID).str()


def member_fenced(error: KafkaError) -> bool:
    """Whether the group coordinator fenced our consumer's static member id: the consumer's own
    _FATAL error, or a transaction's offsets refused for that member (abortable). After a
    coordinator moved or timed out, the fencing member is most often the consumer's own later
    join (confluent-kafka-go #494; three-node tests, with two target nodes down): a consumer
    made anew, with the same group.instance.id, joins again."""
    if error.code() == KafkaError.FENCED_INSTANCE_ID:
        return not _fenced(error)
    return error.code() == KafkaError._FATAL and _STATIC_MEMBER_FENCED in error.str()


def classify(error: KafkaError) -> ErrorClass:
    """What to do about ``error``: call again, abort the transaction, or give up on the client."""
    if (
        error.fatal()
        or _fenced(error)
        or error.code() in _AUTHORIZATION_CODES
        or certificate_refusal(error) is not None
    ):
        return ErrorClass.FATAL
    if error.txn_requires_abort():
        return ErrorClass.ABORTABLE
    if error.retriable() or error.code() in _TRANSIENT_CODES:
        return ErrorClass.RETRIABLE
    return ErrorClass.FATAL


# Fatal codes a new producer does not mend: the credentials, ACLs and broker features above stay
# what they were. INVALID_TXN_STATE is the exception its own comment names.
_UNMENDED_BY_A_NEW_PRODUCER = (_FATAL_CODES - {KafkaError.INVALID_TXN_STATE}) | {KafkaError._FATAL}


class PartitionAnswer(enum.Enum):
    """What one partition's error in a per-partition answer (ListOffsets, a fetch) says of it."""

    ABSENT = "absent"  # the partition or topic is not there
    NO_LEADER = "no_leader"  # there, without a leader to answer for it: ask again later
    # Its leader is not where this client thinks, or not of the epoch it knows: passing in an
    # election; for good after a broker restart on a client that never learns the new
    # leadership ("Leader epoch is older than broker epoch" for every partition): a new client
    # mends it.
    STALE_LEADER = "stale_leader"
    OTHER = "other"  # classify() says the rest


_ABSENT_CODES = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION})
_NO_LEADER_CODES = frozenset(
    {
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.KAFKA_STORAGE_ERROR,
        KafkaError.OFFSET_NOT_AVAILABLE,
    }
)
_STALE_LEADER_CODES = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.FENCED_LEADER_EPOCH,
    }
)


def partition_answer(error: KafkaError) -> PartitionAnswer:
    """What ``error``, answered for one partition, says of that partition."""
    code = error.code()
    if code in _ABSENT_CODES:
        return PartitionAnswer.ABSENT
    if code in _NO_LEADER_CODES:
        return PartitionAnswer.NO_LEADER
    if code in _STALE_LEADER_CODES:
        return PartitionAnswer.STALE_LEADER
    return PartitionAnswer.OTHER


# A broker refused a transaction's records for good: their size, timestamp or form against the
# topic's configuration (max.message.bytes, message.timestamp.*.max.ms, a compacted topic's null
# key, a batch larger than a segment). librdkafka makes each the transaction's abortable error
# (rdkafka_request.c), and an abort and a retry send the same records into the same refusal.
_RECORDS_REFUSED_CODES = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_TIMESTAMP,
        KafkaError.RECORD_LIST_TOO_LARGE,
    }
)
# How librdkafka words that error: "ProduceRequest for <topic> [<partition>] with 1 message(s)
# failed: Broker: Message size too large (broker 1 PID{...}, base seq 0): current transaction
# must be aborted".
_PRODUCE_REQUEST_FOR = re.compile(r"ProduceRequest for (?P<topic>\S+) \[(?P<partition>\d+)\] ")


def refused_for_good(error: KafkaError) -> bool:
    """Whether ``error`` (a delivery report's, or a transaction's) is a broker refusing records
    for their size, timestamp or form: no retry of the same records mends it."""
    return error.code() in _RECORDS_REFUSED_CODES


def records_refused(error: KafkaError) -> tuple[str, int] | None:
    """The topic partition whose records a broker refused for good, when ``error`` (a
    transaction's abortable error) says so; None for anything an abort and a retry may mend."""
    if not refused_for_good(error) or not error.txn_requires_abort():
        return None
    named = _PRODUCE_REQUEST_FOR.search(error.str())
    if named is None:
        return None
    return named["topic"], int(named["partition"])


def producer_mendable(error: KafkaError) -> bool:
    """Whether ``error`` is a transactional producer's fatal error that a new producer of the
    same ``transactional.id`` mends: librdkafka gave up the instance over its own state, not
    because another instance owns the id, an ACL is missing or the broker lacks a feature. Seen:
    OUT_OF_ORDER_SEQUENCE_NUMBER, "sequence desynchronization with broker" after a partition's
    leadership moved back in a rolling restart of the target (librdkafka 2.16;
    confluent-kafka-go #830). The new producer's init_transactions fences the broken one and
    ends its transaction. A bare _FATAL names no cause (a consumer's fatal error reads so), so
    it is not mendable here."""
    return (
        error.fatal()
        and not _fenced(error)
        and error.code() not in _AUTHORIZATION_CODES
        and error.code() not in _UNMENDED_BY_A_NEW_PRODUCER
    )


def to_client_error(error: KafkaError, operation: str | None = None) -> KafkaClientError:
    """The exception of ours for ``error`` (also for errors met in callbacks and messages)."""
    if _fenced(error):
        return FencedError(error, operation)
    return _ERROR_TYPES[classify(error)](error, operation)


def refusal(
    error: KafkaError, cluster: str, wanted: Mapping[str, tuple[str, str]]
) -> NotAuthorizedError | None:
    """A ``NotAuthorizedError`` when ``error`` is a refused authorization, else None.

    ``wanted`` maps each resource type the call used (TOPIC, GROUP, TRANSACTIONAL_ID) to the
    operation it needs and the resource's name, so the error names the ACL to grant.
    """
    resource = _AUTHORIZATION_CODES.get(error.code())
    if resource is None:
        return None
    operation, name = wanted.get(resource, ("an operation", "(not named by the broker)"))
    return NotAuthorizedError(
        error, cluster=cluster, operation=operation, resource=resource, name=name
    )


def raise_if_refused(
    failure: KafkaError | KafkaException, cluster: str, wanted: Mapping[str, tuple[str, str]]
) -> None:
    """Raise ``refusal``'s ``NotAuthorizedError`` (from ``failure``, if an exception) when
    ``failure`` is a refused authorization; return otherwise."""
    cause = failure if isinstance(failure, KafkaException) else None
    error = failure if cause is None else kafka_error_of(cause)
    denied = refusal(error, cluster, wanted)
    if denied is not None:
        raise denied from cause


@contextmanager
def translate_kafka_errors(operation: str) -> Iterator[None]:
    """Translate a ``KafkaException`` raised inside the block into a ``KafkaClientError``.

    ``operation`` names the call for the message (``"commit_transaction"``); the original
    exception is the ``__cause__``.
    """
    try:
        yield
    except KafkaException as exc:
        raise to_client_error(kafka_error_of(exc), operation) from exc


def kafka_error_of(exc: KafkaException) -> KafkaError:
    """The ``KafkaError`` a ``KafkaException`` carries: the one place our code unpacks one.

    A ``KafkaException`` built from a plain message carries none; it becomes ``UNKNOWN``
    (classified FATAL), never an ``AttributeError`` in the caller.
    """
    if exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return KafkaError(KafkaError.UNKNOWN, str(exc))


def call_retrying(
    call: Callable[[], T],
    *,
    deadline_s: float,
    backoff_s: float = 0.5,
    on_retry: Callable[[KafkaError], None] = lambda error: None,
) -> T:
    """``call()`` again while it raises a RETRIABLE ``KafkaException`` ("coordinator load in
    progress" after a broker start, a coordinator moving), for up to ``deadline_s``; then, and
    for any other error at once, the exception propagates unchanged."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = kafka_error_of(exc)
            if classify(error) is not ErrorClass.RETRIABLE or time.monotonic() > deadline:
                raise
            on_retry(error)
            time.sleep(backoff_s)

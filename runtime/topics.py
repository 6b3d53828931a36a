"""Creating the product's own topics: idempotent across instances, and ready when it returns;
and the admin calls every role makes of topics (answers awaited, topic ids)."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient, ClusterMetadata, NewTopic

from runtime.clients import RoleAdminClient
from runtime.errors import NotAuthorizedError, TopicSetupError
from runtime.kafka_errors import (
    ErrorClass,
    call_retrying,
    classify,
    kafka_error_of,
    raise_if_refused,
)
from runtime.logs import get_logger

log = get_logger(__name__)

T = TypeVar("T")

_TIMEOUT_S = 30.0
_ATTEMPT_S = 10.0  # one start-up metadata request; STARTUP_PATIENCE_S bounds them all
# The first start-up metadata request's wait, doubled at each retry up to _ATTEMPT_S: a refusal
# of the credentials is learnt only between attempts (librdkafka fails the request as a
# transport failure, or not at all), and a wrong password or certificate took every role 10 s
# to name; a cluster slow to answer is still given the longer waits after the first few.
_FIRST_ATTEMPT_S = 1.0
_CREDENTIALS_CHECK_S = 1.0  # how often a watched admin call looks for a refusal (admin_result)
# A role starting while a broker restarts (a crash, a rolling upgrade) waits it out: transport
# failures and leader elections are retried this long before start-up fails (exactly chaos
# found the deduplicator exiting on "Broker transport failure" instead).
STARTUP_PATIENCE_S = 120.0
# How long a topic that exists (created, or listed, a moment ago) may still be unknown to the
# broker a client asks: each broker learns a new topic from the metadata log on its own time.
NEW_TOPIC_PATIENCE_S = 30.0
# What a broker (or the client's own metadata from it) answers about a topic it has not learnt
# yet. On three nodes, a new consumer's first watermark read of a topic whose every partition had
# a leader in the admin client's metadata (await_leaders) failed so 3 times in 40, and 4 in 60
# when its own metadata showed the leaders too (the leader itself answering
# UNKNOWN_TOPIC_OR_PART); read again, 60 in 60 succeeded within 0.7 s (issue 31).
_NOT_YET_KNOWN = frozenset(
    {KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART}
)


def admin_result(
    future: concurrent.futures.Future[T],
    timeout_s: float = _TIMEOUT_S,
    admin: AdminClient | None = None,
) -> T:
    """``future.result(timeout_s)`` of an admin call, an answer that outlives ``timeout_s``
    raised as the KafkaException (_TIMED_OUT, retriable) it is: the future's own
    ``concurrent.futures.TimeoutError`` is no KafkaException, and stage 1 exited 1 on one when a
    source broker died under its topic discovery (issue 31).

    Given the ``admin`` that made the call, a refusal of its credentials or certificate is
    raised within a second of librdkafka's report (``check_credentials``) instead of after the
    whole wait: the call itself would fail only as a transport failure, or not at all."""
    watch = admin if isinstance(admin, RoleAdminClient) else None
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        slice_s = min(_CREDENTIALS_CHECK_S, left) if watch is not None else left
        try:
            return future.result(timeout=max(0.0, slice_s))
        except concurrent.futures.TimeoutError as exc:  # a broker frozen, dead or unreachable
            if watch is not None and time.monotonic() < deadline:
                watch.check_credentials()
                continue
            timed_out = KafkaError(KafkaError._TIMED_OUT, f"no answer in {timeout_s:.0f} s")
            raise KafkaException(timed_out) from exc


def topic_id_bytes(uuid: object) -> bytes:
    """Kafka's topic Uuid as the 16 raw bytes the envelope carries (their hex is what stage 1
    records in the flow's meta topic)."""
    most = uuid.get_most_significant_bits() & 0xFFFFFFFFFFFFFFFF  # type: ignore[attr-defined]
    least = uuid.get_least_significant_bits() & 0xFFFFFFFFFFFFFFFF  # type: ignore[attr-defined]
    return bytes(most.to_bytes(8, "big") + least.to_bytes(8, "big"))


def call_once_known(
    call: Callable[[], T], topic: str, patience_s: float = NEW_TOPIC_PATIENCE_S
) -> T:
    """``call()``, a request about ``topic``, which exists: again while the broker asked does
    not know it yet, for up to ``patience_s``; then a TopicSetupError naming the topic. Any
    other error propagates unchanged (``call_retrying`` around this waits out a restart).

    ensure_topic's wait for leaders cannot spare a reader this: it sees one broker's metadata,
    and the reader's client asks another (a fresh three-node target stopped stage 1 at start-up
    with "reading <meta topic>: Failed to get watermark offsets: Local: Unknown partition")."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = kafka_error_of(exc)
            if error.code() not in _NOT_YET_KNOWN:
                raise
            if time.monotonic() > deadline:
                raise TopicSetupError(
                    f"topic {topic} still unknown to the cluster after {patience_s:.0f} s: "
                    f"{error.str()}"
                ) from exc
            time.sleep(0.1)


def ensure_topic(admin: AdminClient, topic: NewTopic) -> None:
    """Create `topic` unless it exists, then wait until every partition has a leader."""

    def create() -> None:
        try:
            admin_result(admin.create_topics([topic])[topic.topic], admin=admin)
        except KafkaException as exc:
            # Another instance of the flow may have created it a moment ago: that is success.
            if kafka_error_of(exc).code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    try:
        call_retrying(
            create, deadline_s=STARTUP_PATIENCE_S, backoff_s=1.0, on_retry=waiting_on(admin)
        )
    except KafkaException as exc:
        error = kafka_error_of(exc)
        # Asked at every start, existing or not: the broker says "already exists" only to a
        # principal allowed to create it (docs/security.md). Every topic we create is on the
        # target cluster.
        raise_if_refused(exc, "target", {"TOPIC": ("CREATE", topic.topic)})
        raise TopicSetupError(
            f"could not create topic {topic.topic}: {error.name()}: {error.str()}"
        ) from exc
    await_leaders(admin, topic.topic, STARTUP_PATIENCE_S)


def create_together(admin: AdminClient, topics: list[NewTopic]) -> set[str]:
    """Create ``topics`` in one request and wait for their leaders together: the names that
    exist (made now, or by another instance a moment ago) with a leader for every partition.
    Nothing is retried: a topic left out is the caller's to make alone with ensure_topic (its
    retries, its refusal named). Hundreds of new topics then cost a few round trips, not a few
    per topic (issue 34: 100 topics took stage 1 69 s to set up one at a time)."""
    if not topics:
        return set()
    made = set()
    for name, future in admin.create_topics(topics).items():
        try:
            admin_result(future)
        except KafkaException as exc:
            if kafka_error_of(exc).code() != KafkaError.TOPIC_ALREADY_EXISTS:
                continue
        made.add(name)
    return _with_leaders(admin, made, STARTUP_PATIENCE_S)


def _with_leaders(admin: AdminClient, names: set[str], timeout_s: float) -> set[str]:
    """Those of ``names`` whose every partition has a leader within ``timeout_s`` (await_leaders
    for many topics, one metadata request per look)."""
    ready: set[str] = set()
    deadline = time.monotonic() + timeout_s
    while ready != names and time.monotonic() < deadline:
        try:
            found = admin.list_topics(timeout=_ATTEMPT_S).topics
        except KafkaException as exc:
            error = kafka_error_of(exc)
            if classify(error) is not ErrorClass.RETRIABLE:
                raise
            log_waiting(error)  # a broker restarting: the deadline bounds the wait
            found = {}
        ready |= {
            name
            for name in names - ready
            if (topic := found.get(name)) is not None
            and topic.error is None
            and topic.partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        }
        if ready != names:
            time.sleep(0.1)
    return ready


def require_operations(
    admin: AdminClient, cluster: str, topic: str, operations: tuple[str, ...]
) -> None:
    """Stop with a ``NotAuthorizedError`` naming the first of ``operations`` (Kafka ACL
    operation names: WRITE, READ) the cluster does not allow this client's principal on
    ``topic``. Checked at start-up for a refusal that would show later only as something else:
    a gapless producer reports a refused write as a gap (_GAPLESS_GUARANTEE), not as the ACL."""

    def describe() -> list[AclOperation] | None:
        collection = TopicCollection([topic])
        futures = admin.describe_topics(collection, include_authorized_operations=True)
        operations: list[AclOperation] | None = admin_result(futures[topic]).authorized_operations
        return operations

    try:
        authorized = call_retrying(
            describe, deadline_s=STARTUP_PATIENCE_S, on_retry=waiting_on(admin)
        )
    except KafkaException as exc:
        raise_if_refused(exc, cluster, {"TOPIC": ("DESCRIBE", topic)})
        error = kafka_error_of(exc)
        # Only a check: what it cannot learn (a service without this API, a topic the broker
        # has not seen yet) must not stop a start that worked before it existed.
        log.warning("could not check the operations allowed", topic=topic, error=error.str())
        return
    allowed = {op.name for op in authorized or ()}
    if "DESCRIBE" not in allowed and "ALL" not in allowed:
        return  # not reported (no authorizer, or a service that leaves it empty): unknown
    for operation in operations:
        if operation not in allowed and "ALL" not in allowed:
            refused = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
            raise NotAuthorizedError(
                refused, cluster=cluster, operation=operation, resource="TOPIC", name=topic
            )


def cluster_metadata(
    admin: AdminClient, topic: str | None = None, *, patience_s: float = STARTUP_PATIENCE_S
) -> ClusterMetadata:
    """``admin.list_topics`` at start-up, waiting out a broker that restarts or cannot be
    reached for a moment (transient errors retried for ``patience_s``): exactly chaos found
    roles exiting on "Failed to get metadata: Broker transport failure" instead."""
    waits = _attempt_waits(_FIRST_ATTEMPT_S, _ATTEMPT_S)
    return call_retrying(
        # Short attempts, retried: a refusal of the credentials is learnt only between them.
        lambda: admin.list_topics(topic, timeout=next(waits)),
        deadline_s=patience_s,
        backoff_s=1.0,
        # A cluster slow to answer a first attempt (a remote one's TLS and SASL, a large one's
        # whole metadata: librdkafka says "timed out", or "transport failure" while no
        # connection is up yet) is no news within the 10 s one attempt always had, and a
        # warning at every such start would be a false one.
        on_retry=waiting_on(admin, quiet_s=_ATTEMPT_S),
    )


def _attempt_waits(first_s: float, longest_s: float) -> Iterator[float]:
    """How long each attempt of a start-up request waits: ``first_s``, doubled each time, at
    most ``longest_s``."""
    wait = first_s
    while True:
        yield wait
        wait = min(2 * wait, longest_s)


def log_waiting(error: KafkaError) -> None:
    log.warning("cluster not ready; retrying", error=error.str())


def waiting_on(admin: AdminClient, *, quiet_s: float = 0.0) -> Callable[[KafkaError], None]:
    """``log_waiting``, after stopping with an ``AuthenticationError`` if the cluster refused
    ``admin``'s credentials: that fails the call as a transient "transport failure" and would
    be retried for minutes (librdkafka says why only to error_cb). Within ``quiet_s`` of its
    making, only the refusal is looked for."""

    if isinstance(admin, RoleAdminClient):
        admin.forget_refusals()  # a refusal from long ago, since mended, is not this loop's
    quiet_until = time.monotonic() + quiet_s

    def waiting(error: KafkaError) -> None:
        if isinstance(admin, RoleAdminClient):
            admin.check_credentials()
        if time.monotonic() >= quiet_until:
            log_waiting(error)

    return waiting


def await_leaders(admin: AdminClient, topic: str, timeout_s: float = _TIMEOUT_S) -> None:
    # The controller acknowledges a new topic before the brokers lead its partitions; reading
    # or describing it in that moment fails with "unknown partition".
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            found = admin.list_topics(topic, timeout=_TIMEOUT_S).topics.get(topic)
        except KafkaException as exc:
            error = kafka_error_of(exc)
            if classify(error) is not ErrorClass.RETRIABLE:
                raise TopicSetupError(f"could not describe topic {topic}: {error.str()}") from exc
            found = None  # a broker restarting: the deadline bounds the wait
            log_waiting(error)
        if (
            found is not None
            and found.error is None
            and found.partitions
            and all(p.leader >= 0 for p in found.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise TopicSetupError(f"topic {topic} has partitions without a leader after {timeout_s:.0f} s")

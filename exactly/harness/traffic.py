"""The demo's sample data: three topics on the source and a transactional producer that keeps
writing to them until stopped.

What the records carry is what a replicator gets wrong first: keys (also null), values (also
empty, large, and tombstones in a compacted topic), headers (repeated names, a null value), the
producer's timestamps, several partitions per topic. Every burst is one transaction and every
`abort_every`-th one is aborted: those records sit in the source log but no read_committed
consumer may ever see them, on the source or on the destination.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from exactly.harness.errors import DemoError
from exactly.harness.quiet import QUIET_CLIENT_LOG
from runtime import (
    ExactlyError,
    abort_or_replace,
    call_retrying,
    kafka_error_of,
    produce_when_room,
)
from runtime.errors import TopicSetupError
from runtime.topics import ensure_topic

TRANSACTIONAL_ID = "exactly-demo-traffic"
ABORTED_MARK = b"ABORTED "
_TIMEOUT_S = 30.0
_KINDS = ("orders", "orders", "orders", "payments", "payments", "customers")
# One payment in every LARGE_EVERY records carries LARGE_VALUE_BYTES of incompressible bytes:
# far past an envelope's usual size, so it travels alone (replicator/batching.py).
LARGE_EVERY = 2400
LARGE_VALUE_BYTES = 384 * 1024
# A transaction every 50 ms at most: each costs a commit round trip (about 12 ms here), so at
# 25 records a transaction one producer tops out near 2 000 records/s (measured: 2 040 asked
# 5 000); 250 records a transaction kept up with 5 000.
_TRANSACTIONS_PER_S = 20
_MIN_BURST = 25

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class DemoTopic:
    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)


TOPICS = (
    DemoTopic("demo.orders", 6),
    DemoTopic("demo.payments", 3),
    # Compacted, with tombstones: the replicator must copy deletes as records, not drop them.
    DemoTopic("demo.customers", 3, {"cleanup.policy": "compact"}),
)
# REPLICATION_TOPICS_INCLUDE for the roles: a full match of exactly these topics.
INCLUDE_PATTERN = r"demo\.(orders|payments|customers)"


@dataclass(frozen=True, slots=True)
class SampleRecord:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers


def create_topics(bootstrap_servers: str, topics: Iterable[DemoTopic] = TOPICS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "logger": QUIET_CLIENT_LOG})
    for topic in topics:
        try:
            ensure_topic(
                admin, NewTopic(topic.name, topic.partitions, -1, config=dict(topic.config))
            )
        except TopicSetupError as exc:
            raise DemoError(f"creating the sample topics on the source failed: {exc}") from exc


def sample_record(n: int) -> SampleRecord:
    """The n-th sample record: deterministic, so a run can be reasoned about afterwards."""
    kind = _KINDS[n % len(_KINDS)]
    if kind == "orders":
        return _order(n)
    if kind == "payments":
        return _payment(n)
    return _customer(n)


def _order(n: int) -> SampleRecord:
    value = json.dumps({"order": n, "amount_cents": (n * 7919) % 100_000, "currency": "EUR"})
    headers: Headers = [("content-type", b"application/json"), ("demo.seq", b"%d" % n)]
    if n % 5 == 0:
        headers += [("tag", b"gift"), ("tag", b"express")]  # one name twice: order matters
    if n % 7 == 0:
        headers.append(("trace-id", None))
    return SampleRecord("demo.orders", b"order-%d" % n, value.encode(), headers)


def _payment(n: int) -> SampleRecord:
    key = None if n % 4 == 0 else b"payment-%d" % n
    value = b"" if n % 9 == 0 else bytes([n % 256, 0, 255]) + b"payment %d" % n
    if n % LARGE_EVERY == _KINDS.index("payments"):
        value = hashlib.shake_256(b"payment %d" % n).digest(LARGE_VALUE_BYTES)
    return SampleRecord("demo.payments", key, value, [("demo.seq", b"%d" % n)])


def _customer(n: int) -> SampleRecord:
    key = b"customer-%d" % (n % 25)
    value = None if n % 4 == 0 else json.dumps({"customer": n % 25, "version": n}).encode()
    return SampleRecord("demo.customers", key, value, [("demo.seq", b"%d" % n)])


@dataclass(frozen=True, slots=True)
class TrafficCounts:
    committed: int
    aborted: int
    transactions: int
    # Records of transactions whose commit failed for a reason other than an abort (a broker
    # down past the timeout): committed or not, only the source log can tell.
    uncertain: int = 0


class SampleTraffic:
    """Produces `records_per_second` records in transactions of `burst` (by default sized so
    that about 20 transactions a second carry the rate) from a daemon thread.

    stop() ends it after the current transaction. A failure stops the thread and is kept in
    `error`, for the demo to report: the traffic never dies silently. With `ride_out`
    (`exactly chaos`, whose brokers die under it) a failed transaction is counted as uncertain
    instead and the traffic goes on with a new producer, as an application would.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        records_per_second: float,
        burst: int | None = None,
        abort_every: int = 8,
        ride_out: bool = False,
    ) -> None:
        self._bootstrap = bootstrap_servers
        if burst is None:
            burst = max(_MIN_BURST, round(records_per_second / _TRANSACTIONS_PER_S))
        self._interval_s = burst / records_per_second
        self._burst = burst
        self._abort_every = abort_every
        self._ride_out = ride_out
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._committed = self._aborted = self._transactions = self._uncertain = 0
        self._thread = threading.Thread(target=self._run, name="demo-traffic", daemon=True)
        self.error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = _TIMEOUT_S) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    @property
    def counts(self) -> TrafficCounts:
        with self._lock:
            return TrafficCounts(
                self._committed, self._aborted, self._transactions, self._uncertain
            )

    def _run(self) -> None:
        try:
            producer = _TransactionalProducer(self._bootstrap, TRANSACTIONAL_ID)
            try:
                producer = self._produce_until_stopped(producer)
            finally:
                producer.close()
        except (KafkaException, ExactlyError) as exc:
            self.error = f"the sample producer failed: {exc}"
        except Exception as exc:  # a thread must not die silently; the demo reports it
            self.error = f"the sample producer crashed: {exc!r}"

    def _produce_until_stopped(self, producer: _TransactionalProducer) -> _TransactionalProducer:
        """Produce until stopped; the producer in use then (a replacement, after a failure)."""
        n = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            abort = self._abort_every > 0 and (self._transactions + 1) % self._abort_every == 0
            records = [sample_record(i) for i in range(n, n + self._burst)]
            try:
                committed: bool | None = producer.transaction(records, abort=abort)
            except (KafkaException, ExactlyError):
                if not self._ride_out:
                    raise
                committed = None
            n += self._burst
            with self._lock:
                self._transactions += 1
                if committed is None:
                    self._uncertain += len(records)
                elif committed:
                    self._committed += len(records)
                else:
                    self._aborted += len(records)
            if committed is None:
                replaced = self._replace(producer)
                if replaced is None:
                    break  # stopped while the cluster was still out of reach
                producer = replaced
                next_at = time.monotonic()  # the steady rate again, not a burst to catch up
            next_at += self._interval_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))
        return producer

    def _replace(self, producer: _TransactionalProducer) -> _TransactionalProducer | None:
        """A new producer of the same transactional id (it fences the old one and ends its
        transaction), retried until it exists; None when the traffic is stopped first."""
        producer.discard()
        while not self._stop.is_set():
            try:
                return _TransactionalProducer(self._bootstrap, TRANSACTIONAL_ID)
            except (KafkaException, ExactlyError):
                self._stop.wait(1.0)
        return None


class _TransactionalProducer:
    """One transaction at a time, with docs/design.md §9's workarounds (slow coordinator, #4849)."""

    def __init__(self, bootstrap_servers: str, transactional_id: str) -> None:
        self._config = {
            "bootstrap.servers": bootstrap_servers,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            "logger": QUIET_CLIENT_LOG,
        }
        self._producer = self._new_producer()

    def transaction(self, records: list[SampleRecord], *, abort: bool) -> bool:
        """Produce `records` in one transaction; True when it committed."""
        self._producer.begin_transaction()
        for record in records:
            self._produce(record, abort=abort)
        if abort:
            self._abort()
            return False
        return self._commit()

    def close(self) -> None:
        self._producer.flush(_TIMEOUT_S)

    def discard(self) -> None:
        """Drop what is queued, without waiting for a broker that may be gone."""
        with contextlib.suppress(KafkaException):
            self._producer.purge()
            self._producer.flush(0)

    def _new_producer(self) -> Producer:
        producer = Producer(self._config)
        # "Coordinator load in progress" right after a broker start: wait, do not fail.
        call_retrying(lambda: producer.init_transactions(_TIMEOUT_S), deadline_s=_TIMEOUT_S)
        return producer

    def _produce(self, record: SampleRecord, *, abort: bool) -> None:
        value = record.value
        if abort and value is not None:
            value = ABORTED_MARK + value  # visible in a dump, should one ever reach the target
        produce_when_room(
            self._producer, record.topic, key=record.key, value=value, headers=record.headers
        )

    def _commit(self) -> bool:
        try:
            call_retrying(
                lambda: self._producer.commit_transaction(_TIMEOUT_S), deadline_s=_TIMEOUT_S
            )
            return True
        except KafkaException as exc:
            if not kafka_error_of(exc).txn_requires_abort():
                raise
            self._abort()
            return False

    def _abort(self) -> None:
        self._producer = abort_or_replace(self._producer, self._new_producer, _TIMEOUT_S)

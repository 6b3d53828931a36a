"""The stage-2 loop: read staging in batches (read_committed), apply the dedup rule, write each
accepted original record to its destination partition, and commit output, staging offsets and
the changelog of the new state in ONE Kafka transaction (`_commit`, step by step).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from deduplicator.backlog import Backlog
from deduplicator.errors import DeduplicatorError, TransactionFailedError
from deduplicator.metrics import DeduplicatorMetrics
from deduplicator.restore import ChangelogReader, changelog_reader, changelog_tail
from deduplicator.rule import PartitionState, encode_state, judge, state_key
from deduplicator.state import StateStore
from envelope import (
    HEADER_PROVENANCE,
    TIMESTAMP_NOT_AVAILABLE,
    EnvelopeError,
    EnvelopeRows,
    RecordRow,
    decode_rows,
    provenance_prefix,
)
from runtime import (
    LIBRDKAFKA_LOG,
    PREFETCH_DEFAULTS,
    ErrorClass,
    FencedJoins,
    Settings,
    abort_or_replace,
    call_retrying,
    classify,
    consume_ready,
    get_logger,
    kafka_error_of,
    log_client_error,
    member_fenced,
    produce_when_room,
    raise_if_refused,
)
from runtime.deadline import call_with_deadline, exit_hung, hard_deadline
from runtime.errors import ClientHungError
from runtime.role import static_membership

log = get_logger(__name__)

CONSUME_BATCH = 2000
CONSUME_TIMEOUT_S = 0.1
TXN_TIMEOUT_S = 30.0
TRANSACTION_TIMEOUT_MS = 60000
# A transactional call still blocked this long after its own timeout is hung (runtime.deadline).
HARD_DEADLINE_S = TXN_TIMEOUT_S + 30.0
# send_offsets_to_transaction is the call that hangs (librdkafka #5456, #5511, after the target
# broker died): a short timeout, retried within RETRY_DEADLINE_S like any retriable error, lets
# its hard deadline be short too. With 30 s + 30 s, each hang stalled the copy for 60 s in
# `exactly chaos` runs; with 10 s + 5 s, a SIGKILL of the node leading a destination partition
# and the coordinators stalled it 30-37 s on three nodes. It also waits out a coordinator's node
# in controlled shutdown, which answers nothing until it exits (8 s here): in a rolling restart of
# the target the call hung at every node whose coordinators moved. The call answers within
# milliseconds when it works and within its own timeout when it fails; only those outlive both.
# A replacement the deadline calls too early costs one aborted transaction and a new producer's
# init_transactions, and holds one of MAX_HUNG_PRODUCERS until the early call ends.
SEND_OFFSETS_TIMEOUT_S = 3.0
SEND_OFFSETS_HARD_DEADLINE_S = SEND_OFFSETS_TIMEOUT_S + 2.0
# A hung send_offsets_to_transaction leaves its producer to the call and a new one goes on
# (_replace_hung_producer); past this many stuck at once, the process exits for a restart.
MAX_HUNG_PRODUCERS = 2
# How long a retriable error of send_offsets_to_transaction is retried before the transaction
# is given up (aborted). init_transactions and commit_transaction wait for as long as it lasts
# (_retrying's until_stopped).
RETRY_DEADLINE_S = TRANSACTION_TIMEOUT_MS / 1000
# A call retried for long says so once, then at most this often (with its count).
RETRY_LOG_INTERVAL_S = 30.0
# Restore runs inside the assignment callback, where librdkafka's max.poll.interval.ms (300 s by
# default) keeps counting: past this deadline the process exits and its successor resumes the
# restore from the batch it reached, rather than being evicted from the group mid-restore.
RESTORE_DEADLINE_S = 120.0
MAX_RECORD_BYTES = 64 * 1024 * 1024
# Delivery errors of records purged because their transaction failed (librdkafka purges the
# queue when a transaction enters its abortable state): the cause is the transaction's error.
_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
# commit_transaction answers at once when a record failed; the bound is for the unexpected.
_ASK_TRANSACTION_ERROR_S = 10.0

# A transaction's flush is watched this often for a record that failed (_flushed).
FLUSH_SLICE_S = 0.5
# How long a failing process waits for its open transaction's abort before it exits anyway.
ABORT_ON_FAILURE_S = 5.0
# How long an abort (and the flush before it) may wait before the producer is replaced instead,
# the replacement's init_transactions ending the transaction (runtime.abort_or_replace). The
# abort follows a transaction the target refused, often because a coordinator or leader is
# moving: a node in controlled shutdown answers nothing until it exits. With 30 s each for the
# flush and the abort, one node of a rolling restart of the target stalled the copy 36 s after
# an aborted transaction, nothing logged between the abort and that node's exit. Each of the two
# has this long: up to 10 s before the replacement.
ABORT_TIMEOUT_S = 5.0


def consumer_config(
    settings: Settings, on_error: Callable[[KafkaError], None]
) -> dict[str, object]:
    """Stage 2's staging consumer."""
    return {
        **PREFETCH_DEFAULTS,  # the user's values win
        **settings.destination.client_config(),
        "group.id": settings.names.deduplicator_group,
        "enable.auto.commit": False,
        # Invariant 6: only committed staging records; never an aborted one.
        "isolation.level": "read_committed",
        # A new flow reads staging from its beginning (stage 1 wrote it for us).
        "auto.offset.reset": "earliest",
        "logger": LIBRDKAFKA_LOG,
        "error_cb": on_error,
        **static_membership(settings, "deduplicator"),
    }


class Deduplicator:
    def __init__(
        self,
        settings: Settings,
        instance_id: str,
        changelog_topic: str,
        deadletter_topic: str,
        metrics: DeduplicatorMetrics,
        should_stop: Callable[[], bool],
        beat: Callable[[], None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.changelog_topic = changelog_topic
        self.deadletter_topic = deadletter_topic
        self.metrics = metrics
        self._should_stop = should_stop
        self._beat = beat
        self._state_root = Path(settings.state_dir) / settings.flow
        self._transactional_id = settings.names.deduplicator_transactional_id(instance_id)
        self.stores: dict[int, StateStore] = {}
        # The open transaction: states changed, staging offsets consumed, size, record times.
        self._pending: dict[bytes, tuple[int, PartitionState]] = {}
        self._offsets: dict[int, int] = {}
        # Where each assigned staging partition's committed position is, as this process knows
        # it without asking the group coordinator (_rewind): the offset of the first record
        # the consumer returned since the assignment, then each commit's.
        self._positions: dict[int, int] = {}
        self._in_transaction = False
        self._commit_sent = False  # commit_transaction called: its outcome may be a commit
        self._began = 0.0
        self._produced = 0
        self._bytes = 0
        self._timestamps: list[int] = []
        self._written: set[str] = set()  # destination topics: named if a write is refused
        self._destinations: dict[str, str | None] = {}
        # Producers left to a call that hung, each with the thread it blocks (never closed
        # under it): destroyed once the call ends (_reap_hung).
        self._hung: list[tuple[Producer, threading.Thread]] = []
        self.consumer = Consumer(consumer_config(settings, self._client_error))
        self.producer = self._new_producer()
        self._fenced_joins = FencedJoins("staging consumer")
        self.backlog = Backlog(settings.names.staging, metrics.backlog)

    def _new_producer(self) -> Producer:
        """The transactional producer, initialised (invariant 6: a stable id per instance;
        init_transactions fences every earlier producer of the id and ends its transaction)."""
        producer = Producer(
            {
                **self.settings.destination.client_config(),
                "transactional.id": self._transactional_id,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "linger.ms": 5,
                # A destination record is as large as its source allowed (max.message.bytes is
                # mirrored per topic); the broker, not this client, enforces each topic's limit.
                "message.max.bytes": MAX_RECORD_BYTES,
                "logger": LIBRDKAFKA_LOG,
                "error_cb": self._client_error,
            }
        )
        try:
            self._retrying(
                "init_transactions",
                lambda: producer.init_transactions(TXN_TIMEOUT_S),
                until_stopped=True,
            )
        except KafkaException as exc:
            raise_if_refused(exc, "target", self._needs())
            raise
        return producer

    def _needs(self, *, writing: bool = True) -> dict[str, tuple[str, str]]:
        """What stage 2 needs granted for the transaction's writes (``writing``) or for the
        staging reads (``refusal``'s ``wanted``)."""
        names = self.settings.names
        written = sorted(self._written | {self.changelog_topic})
        topic = ("WRITE", " or ".join(written)) if writing else ("READ", names.staging)
        return {
            "TRANSACTIONAL_ID": ("WRITE", self._transactional_id),
            "GROUP": ("READ", names.deduplicator_group),
            "TOPIC": topic,
        }

    def _client_error(self, error: KafkaError) -> None:
        """Every error counted; a broker out of reach logged once per broker with a count, not
        once per attempt (runtime.log_client_error)."""
        self.metrics.client_errors.labels(error.name()).inc()
        log_client_error(log, error)

    # -- the loop -----------------------------------------------------------------------------

    def _subscribe(self) -> None:
        self.consumer.subscribe(
            [self.settings.names.staging],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    def run(self) -> None:
        self._subscribe()
        try:
            while not self._should_stop():
                self._beat()
                self.backlog.update_due(self.consumer, list(self.stores))
                messages = self.consumer.consume(CONSUME_BATCH, 0)
                self._note_positions(messages)
                if not messages:
                    if self._in_transaction:
                        # Nothing more at hand: make what this transaction holds visible now
                        # rather than wait out the interval (latency). Under load something is
                        # always at hand and the limits decide; below it, what arrives during
                        # one commit makes the next.
                        self._commit_or_recover()
                    messages = consume_ready(self.consumer, CONSUME_BATCH, CONSUME_TIMEOUT_S)
                    self._note_positions(messages)
                for message in messages:
                    self._process(message)
                    # Checked per envelope: a batch of envelopes can hold a million records,
                    # and the limits bound what one transaction holds, not what one batch does.
                    if self._commit_due() and not self._commit_or_recover():
                        break  # rewound: the rest of this batch is read again from the commit
            if self._in_transaction:
                self._commit_or_recover()
        except BaseException:
            # Never commit on the way out of a failure: close() revokes the partitions, and a
            # commit there would carry staging offsets past the record that failed (with
            # REPLICATION_ON_BAD_ENVELOPE=stop, the bad envelope itself), skipping it for good.
            self._drop_transaction()
            raise
        finally:
            self.consumer.close()
            self.producer.close()
            for store in self.stores.values():
                store.close()
            self.stores.clear()
            self._leave_hung()

    def _leave_hung(self) -> None:
        """On the way out: a producer still stuck in its call must not meet the interpreter's
        teardown (clients destroyed under a running call, or at exit, crash natively). Its
        transaction is fenced and aborted already; exit now, as a clean drain would (status 0)
        unless an error is on its way out (1)."""
        self._reap_hung()
        if not self._hung:
            return
        failing = sys.exc_info()[0] is not None
        log.warning(
            "a replaced producer is still stuck in its call; exiting without teardown",
            hung_producers=len(self._hung),
        )
        logging.shutdown()
        os._exit(1 if failing else 0)

    def _commit_due(self) -> bool:
        settings = self.settings
        return self._in_transaction and (
            time.monotonic() - self._began >= settings.commit_interval_ms / 1000
            or self._produced >= settings.commit_max_records
            or self._bytes >= settings.commit_max_bytes
        )

    def _process(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            raise_if_refused(error, "target", self._needs(writing=False))
            if member_fenced(error):
                self._join_again(error)
                return
            if classify(error) is ErrorClass.FATAL:
                raise KafkaException(error)
            log.warning("staging consume error", error=error.str())
            return
        partition = message.partition()
        if partition not in self.stores:
            return  # revoked within this batch: its next owner reads it from the commit point
        self._begin()
        self._offsets[partition] = message.offset() + 1
        value = message.value() or b""
        self._bytes += len(value)
        try:
            envelope = decode_rows(value)
        except EnvelopeError as exc:
            self._dead_letter(message, f"not an envelope: {exc}")
            return
        destination = self._destination(envelope.topic)
        if destination is None:
            self._dead_letter(message, f"topic {envelope.topic} is not replicated by this flow")
            return
        key = state_key(envelope.source_cluster_id, envelope.topic, envelope.partition)
        pending = self._pending.get(key)
        state = pending[1] if pending else self.stores[partition].get(key)
        verdict = judge(state, envelope)
        if verdict.duplicates:
            self.metrics.duplicates.inc(verdict.duplicates)
        if verdict.orphan:
            # Invariant 4: a gap in stage 1's session; the resend heals it. Never written.
            self.metrics.orphans.inc()
            log.warning(
                "orphan envelope not written",
                topic=envelope.topic,
                partition=envelope.partition,
                prev_offset=envelope.prev_offset,
                high=state.high if state else -1,
                first_offset=envelope.rows[0][0],
            )
            return
        if verdict.stale:
            self.metrics.stale.inc(verdict.duplicates)
            return
        if not verdict.accepted:
            return
        self._write(destination, envelope, verdict.accepted)
        self._written.add(destination)
        self._produced += len(verdict.accepted)
        self.metrics.records_written.labels(destination).inc(len(verdict.accepted))
        _offset, timestamp, timestamp_type, *_ = verdict.accepted[-1]
        if timestamp_type != TIMESTAMP_NOT_AVAILABLE:
            self._timestamps.append(timestamp)
        self._pending[key] = (partition, verdict.state)

    def _write(self, topic: str, envelope: EnvelopeRows, rows: tuple[RecordRow, ...]) -> None:
        """Each accepted record into the open transaction, on its source partition number, with
        its key, value, headers in order and timestamp, plus the provenance header.

        The hot path of stage 2, one turn per record: the produce call and nothing it can do
        without. No callback (the commit is the acknowledgement); positional arguments where
        produce() takes them (keywords cost 0.2 of its 1.6 µs, measured against librdkafka's
        local queue); the provenance prefix made once per envelope.
        """
        produce = self.producer.produce
        partition = envelope.partition
        origin = (
            provenance_prefix(envelope.source_cluster_id, partition)
            if self.settings.provenance_header
            else None
        )
        for offset, timestamp, _type, key, value, source_headers in rows:
            headers = list(source_headers)
            if origin is not None:
                headers.append((HEADER_PROVENANCE, origin + b"%d" % offset))
            try:
                produce(topic, value, key, partition, timestamp=timestamp, headers=headers)
            except BufferError:  # the local queue is full: wait for room, as every producer does
                produce_when_room(
                    self.producer,
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    timestamp=timestamp,
                    headers=headers,
                )

    def _destination(self, topic: str) -> str | None:
        # Per envelope on the hot path: the include/exclude regexes run once per source topic.
        if topic not in self._destinations:
            self._destinations[topic] = self.settings.destination_topic(topic)
        return self._destinations[topic]

    def _dead_letter(self, message: Message, reason: str) -> None:
        """Invariant 7: a bad staging record is kept, with its reason, in the same transaction."""
        if self.settings.on_bad_envelope == "stop":
            raise DeduplicatorError(
                f"staging record at partition {message.partition()} offset {message.offset()}: "
                f"{reason}"
            )
        self.metrics.dead_letters.inc()
        produce_when_room(
            self.producer,
            self.deadletter_topic,
            value=message.value(),
            key=message.key(),
            headers=[
                ("exactly.reason", reason.encode()),
                ("exactly.staging", f"{message.partition()}/{message.offset()}".encode()),
            ],
        )
        log.error(
            "staging record dead-lettered",
            partition=message.partition(),
            offset=message.offset(),
            reason=reason,
        )

    def _begin(self) -> None:
        if not self._in_transaction:
            self.producer.begin_transaction()
            self._in_transaction = True
            self._began = time.monotonic()

    # -- the commit protocol ------------------------------------------------------------------

    def _commit(self) -> None:
        """One transaction: output, staging offsets and changelog, then RocksDB.

        1. Produce the changelog records of every state this transaction changed, into the
           transaction (invariant 5: state commits with output).
        2. Add the staging offsets with the consumer group metadata (invariant 6: a zombie, whose
           generation is stale, cannot commit). Retriable errors are retried until
           RETRY_DEADLINE_S, then the transaction aborts. Sent before the flush: its two round
           trips to the coordinator overlap the acknowledgements of the records in flight.
        3. Flush: every record of the transaction is acknowledged; any failure raises and the
           transaction aborts (no per-record callback but the changelog's: the commit is the
           acknowledgement, and a transaction that fails purges its changelog records too).
        4. Commit the transaction: output, offsets and state become visible at once. A retriable
           error is retried for as long as it lasts (the coordinator answers once the target
           can write again): the outcome is unknown until then, and a guess would break
           invariant 5. Asked to stop meanwhile, the process stops and its successor restores
           from the changelog.
        5. Only then write RocksDB, one write batch per staging partition, with the changelog
           offset it reflects (invariant 5: a crash before this step restores from Kafka).
        """
        started = time.monotonic()
        changelog_offsets: dict[int, int] = {}
        failures: list[KafkaError] = []

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                failures.append(error)
                return
            partition = message.partition()
            changelog_offsets[partition] = max(
                changelog_offsets.get(partition, -1), message.offset()
            )

        for key, (partition, state) in self._pending.items():  # step 1
            produce_when_room(
                self.producer,
                self.changelog_topic,
                key=key,
                value=encode_state(state),
                partition=partition,
                on_delivery=delivered,
            )
        offsets = [
            TopicPartition(self.settings.names.staging, partition, offset)
            for partition, offset in self._offsets.items()
        ]
        group = self.consumer.consumer_group_metadata()

        def send_offsets() -> None:
            producer = self.producer
            call_with_deadline(
                lambda: producer.send_offsets_to_transaction(
                    offsets, group, SEND_OFFSETS_TIMEOUT_S
                ),
                SEND_OFFSETS_HARD_DEADLINE_S,
                "send_offsets_to_transaction",
            )

        def commit() -> None:
            with hard_deadline(HARD_DEADLINE_S, "commit_transaction"):
                self.producer.commit_transaction(TXN_TIMEOUT_S)

        self._retrying("send_offsets_to_transaction", send_offsets)  # step 2
        if not self._flushed(failures) or failures:  # step 3
            for failure in failures:  # no abort and retry mends a missing ACL
                raise_if_refused(failure, "target", self._needs())
            if failures and all(failure.code() in _PURGED for failure in failures):
                self._raise_if_the_transaction_was_refused()
            reasons = [failure.str() for failure in failures[:3]]
            raise TransactionFailedError(f"transaction records not acknowledged: {reasons}")
        self._commit_sent = True
        try:  # step 4
            self._retrying("commit_transaction", commit, until_stopped=True)
        except TransactionFailedError as exc:
            raise DeduplicatorError(f"outcome of the transaction commit unknown: {exc}") from exc
        committed_at = time.time()
        by_partition: dict[int, dict[bytes, PartitionState]] = {}
        for key, (partition, state) in self._pending.items():
            by_partition.setdefault(partition, {})[key] = state
        for partition, states in by_partition.items():  # step 5
            self.stores[partition].commit(states, changelog_offsets[partition])
        self._observe_commit(started, committed_at)
        for partition, offset in self._offsets.items():
            self._positions[partition] = offset
            self.backlog.committed(partition, offset)
        self._reset_transaction()

    def _flushed(self, failures: list[KafkaError]) -> bool:
        """Whether every record of the transaction was acknowledged within TXN_TIMEOUT_S; False
        as soon as one failed. A transaction that turned abortable purges what it holds, but a
        flush went on waiting for the records in flight to a node shutting down: 29 s after
        the purge in a rolling restart of the target, for an abort that was certain."""
        deadline = time.monotonic() + TXN_TIMEOUT_S
        while self.producer.flush(FLUSH_SLICE_S) != 0:
            if failures or time.monotonic() >= deadline:
                return False
        return True

    def _raise_if_the_transaction_was_refused(self) -> None:
        """Records purged with their transaction hide why it failed: a destination this role
        may not write fails the transaction when its partition is added, and abort after abort
        would follow. librdkafka gives the transaction's own error to the next transactional
        call, so ask commit_transaction: once a record of the transaction failed delivery it
        commits nothing (it answers "abort required" before sending a request), so invariant 5
        holds. The caller aborts as after any failed transaction."""
        try:
            self.producer.commit_transaction(_ASK_TRANSACTION_ERROR_S)
        except KafkaException as exc:
            raise_if_refused(exc, "target", self._needs())
            return
        # Not librdkafka's behaviour; if it ever were, stage 2's state would lag its output: stop,
        # and the successor restores from the changelog (as for an unknown commit outcome).
        raise DeduplicatorError("a transaction whose records were purged was committed")

    def _observe_commit(self, started: float, committed_at: float) -> None:
        self.metrics.transactions.labels("committed").inc()
        self.metrics.commit_seconds.observe(time.monotonic() - started)
        now_ms = committed_at * 1000
        for timestamp in self._timestamps:
            self.metrics.record_age.observe(max(0.0, (now_ms - timestamp) / 1000))

    def _retrying(
        self, operation: str, call: Callable[[], object], *, until_stopped: bool = False
    ) -> None:
        """Call again while the error is retriable, up to RETRY_DEADLINE_S (then
        TransactionFailedError); abortable and fatal errors raise at once, as KafkaException.

        ``until_stopped``: retry for as long as the error stays retriable, until the process is
        asked to stop. For the calls a successor would only repeat against the same cluster:
        init_transactions, and commit_transaction, whose outcome stays unknown until the
        coordinator answers (invariant 5: waiting for the answer guesses nothing). While the
        target cannot write (a coordinator moving, fewer in-sync replicas than
        min.insync.replicas) the role waits, live, and says so; it does not exit into a restart
        that would meet the same cluster."""
        retries = 0
        said_at = -math.inf

        def say(error: KafkaError) -> None:
            nonlocal retries, said_at
            retries += 1
            self._beat()  # waiting on Kafka on purpose: the loop is not stuck
            if time.monotonic() - said_at >= RETRY_LOG_INTERVAL_S:
                said_at = time.monotonic()
                log.warning("retrying", operation=operation, error=error.str(), retries=retries)
            if until_stopped and self._should_stop():
                raise TransactionFailedError(f"{operation}: stopping while {error.str()}")

        deadline_s = math.inf if until_stopped else RETRY_DEADLINE_S
        try:
            call_retrying(call, deadline_s=deadline_s, on_retry=say)
        except KafkaException as exc:
            error = kafka_error_of(exc)
            if classify(error) is ErrorClass.RETRIABLE:
                raise TransactionFailedError(
                    f"{operation}: {error.str()} (retried for {RETRY_DEADLINE_S:.0f} s)"
                ) from exc
            raise

    def _commit_or_recover(self) -> bool:
        """Commit; or abort and rewind to the committed offsets (False)."""
        self._reap_hung()
        try:
            self._commit()
            return True
        except ClientHungError as exc:
            self._replace_hung_producer(exc)
            self._rewind()
            return False
        except (KafkaException, TransactionFailedError) as exc:
            if isinstance(exc, KafkaException):
                raise_if_refused(exc, "target", self._needs())
                if classify(kafka_error_of(exc)) is ErrorClass.FATAL:
                    raise
            # Abortable: abort, rewind staging to the committed offsets, and forget the
            # uncommitted state (RocksDB holds only committed state).
            log.warning("transaction aborted", error=str(exc))
            error = kafka_error_of(exc) if isinstance(exc, KafkaException) else None
            if error is not None and member_fenced(error):
                # The offsets' member id is fenced, and our consumer with it (it can no longer
                # seek): a new consumer starts from the committed offsets, no rewind needed.
                self._join_again(error)
                return False
            commit_sent = self._commit_sent
            # After a commit was sent, an abort that fails makes the outcome unknown, and that
            # costs an exit: it is given as long as a commit, not ABORT_TIMEOUT_S.
            if not self._abort(TXN_TIMEOUT_S if commit_sent else ABORT_TIMEOUT_S) and commit_sent:
                # librdkafka can report a commit whose EndTxn the coordinator may have taken
                # (a transaction that failed locally meanwhile), and the replacement's
                # init_transactions then completes it: rewound here, its records would be
                # written again (invariant 5). A successor restores from the changelog.
                unknown = f"outcome of the transaction commit unknown: {exc}"
                raise DeduplicatorError(unknown) from exc
            self._rewind()
            return False

    def _abort(self, timeout_s: float = ABORT_TIMEOUT_S) -> bool:
        """End the open transaction: True if this producer aborted it, False if a new producer
        replaced it (the abort failed or timed out), whose init_transactions ended it."""
        self.metrics.transactions.labels("aborted").inc()
        producer = self.producer
        try:
            # Invariant 6: if the abort fails, the producer that replaces ours fences it and
            # ends its transaction on the broker, so nothing of it can become visible.
            self.producer = abort_or_replace(producer, self._new_producer, timeout_s)
        finally:
            self._reset_transaction()
        return self.producer is producer

    def _replace_hung_producer(self, hung: ClientHungError) -> None:
        """Leave the producer to its hung call and go on with a new one of the same
        transactional.id (runtime/deadline.py: librdkafka #5456, #5511). Invariant 6: the new
        producer's init_transactions fences the stuck one and has the coordinator abort its
        transaction, so nothing it holds can commit; RocksDB was not written (step 5 comes after
        the commit) and the caller rewinds staging to the committed offsets. The stuck producer
        is never closed under its call: that would free what the call still uses."""
        self.metrics.transactions.labels("aborted").inc()
        if len(self._hung) >= MAX_HUNG_PRODUCERS:
            exit_hung(hung.call, hung.seconds)
        log.warning(
            "transactional producer hung; replacing it",
            call=hung.call,
            seconds=hung.seconds,
            hung_producers=len(self._hung) + 1,
        )
        assert isinstance(hung.thread, threading.Thread)
        self._hung.append((self.producer, hung.thread))
        self._reset_transaction()
        started = time.monotonic()
        self.producer = self._new_producer()
        # How long the coordinator took to end the stuck producer's transaction: the other half
        # of the stall a hang costs.
        log.info("replacement producer ready", seconds=round(time.monotonic() - started, 1))

    def _reap_hung(self) -> None:
        """Destroy the producers whose hung call has ended (fenced, by then): purged and served,
        so that the collector frees them now and not at the interpreter's exit."""
        for producer, thread in [entry for entry in self._hung if not entry[1].is_alive()]:
            # Fenced by its successor, as intended: the fatal error it keeps raising is ours.
            with contextlib.suppress(KafkaException):
                producer.purge()
            with contextlib.suppress(KafkaException):
                producer.flush(0)
            self._hung.remove((producer, thread))

    def _drop_transaction(self) -> None:
        """End the open transaction without committing it, on the way out of a failure: an abort
        if the producer can still do one soon, else the successor's init_transactions (same
        transactional.id) or the transaction timeout ends it on the broker (invariant 6)."""
        if not self._in_transaction:
            return
        self.metrics.transactions.labels("aborted").inc()
        try:
            self.producer.abort_transaction(ABORT_ON_FAILURE_S)
        except KafkaException as exc:
            log.warning("open transaction left to the broker to end", error=str(exc))
        finally:
            self._reset_transaction()

    def _reset_transaction(self) -> None:
        self._pending.clear()
        self._offsets.clear()
        self._timestamps.clear()
        self._written.clear()
        self._in_transaction = False
        self._commit_sent = False
        self._produced = 0
        self._bytes = 0

    def _note_positions(self, messages: list[Message]) -> None:
        """Keep the first offset the consumer returned of each partition since its assignment:
        its committed position, for _rewind. A batch cut short by a rewind leaves records
        returned but never processed, and they must be read again. Only markers or aborted
        records can lie between the committed offset and that first record (read_committed),
        so the two positions read the same."""
        for message in messages:
            partition = message.partition()
            if message.error() is None and partition in self.stores:
                self._positions.setdefault(partition, message.offset())

    def _rewind(self) -> None:
        """Seek every staging partition the consumer returned records of since its assignment
        back to its committed offset, known here without asking the group coordinator. A
        rewind follows a transaction that did not commit: one aborted before commit_transaction
        was called, or aborted by this producer after it, or held by a hung
        send_offsets_to_transaction, whose transaction the replacement's init_transactions
        aborts (a hung commit exits; an unknown outcome raises in _commit_or_recover). And this
        instance alone commits its partitions' offsets (invariant 6), so the group holds what
        our last commit left there. Asking it instead waited on the coordinator that was
        moving: a target node in controlled shutdown held the offset fetch 27 s (three nodes,
        rolling restart). A partition the consumer returned nothing of has nothing to undo."""
        for partition, offset in self._positions.items():
            self.consumer.seek(TopicPartition(self.settings.names.staging, partition, offset))
            self.backlog.committed(partition, offset)

    # -- partitions ---------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        deadline = time.monotonic() + RESTORE_DEADLINE_S
        with changelog_reader(self.settings) as reader:
            for tp in partitions:
                self._positions.pop(tp.partition, None)  # read again from the group's commit
                self.stores[tp.partition] = self._open_store(reader, tp.partition, deadline)
        self.metrics.assigned_partitions.set(len(self.stores))
        log.info("staging partitions assigned", partitions=[tp.partition for tp in partitions])

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._in_transaction:
            self._commit_or_recover()
        self._release(partitions)
        log.info("staging partitions revoked", partitions=[tp.partition for tp in partitions])

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Our generation is gone: the open transaction cannot commit (invariant 6); abort it.
        if self._in_transaction:
            self._abort()
        self._release(partitions)
        log.warning("staging partitions lost", partitions=[tp.partition for tp in partitions])

    def _join_again(self, fenced: KafkaError) -> None:
        """The group coordinator fenced our static member: most often by our own later join,
        after a coordinator moved or the target could not answer (runtime.member_fenced).
        The consumer is fatal for good: abort the open transaction (invariant 6: its offsets
        carry the fenced member id), give up every partition, and join with a new consumer of
        the same group.instance.id, which restores each partition it gets from the changelog.
        A live twin fences us again and again (and fences our producer): then exit as fenced
        (runtime.fenced_joins)."""
        self._fenced_joins.count(fenced)
        if self._in_transaction:
            self._abort()
        self._release([TopicPartition(self.settings.names.staging, p) for p in self.stores])
        with contextlib.suppress(KafkaException, RuntimeError):
            self.consumer.close()
        self.consumer = Consumer(consumer_config(self.settings, self._client_error))
        self._subscribe()

    def _release(self, partitions: list[TopicPartition]) -> None:
        self.backlog.forget([tp.partition for tp in partitions])
        for tp in partitions:
            self._positions.pop(tp.partition, None)
            store = self.stores.pop(tp.partition, None)
            if store is not None:
                store.close()
        self.metrics.assigned_partitions.set(len(self.stores))

    def _open_store(self, reader: ChangelogReader, partition: int, deadline: float) -> StateStore:
        """The partition's RocksDB, brought up to date from the changelog (the truth)."""
        directory = self._state_root / str(partition)
        try:
            store = StateStore.open(directory)
        except DeduplicatorError as exc:
            log.warning("state store unusable; restoring from the changelog", error=str(exc))
            StateStore.destroy(directory)
            store = StateStore.open(directory)
        try:
            started = time.monotonic()
            reflected = store.changelog_offset()
            start = 0 if reflected is None else reflected + 1
            tail = changelog_tail(reader, self.changelog_topic, partition, start, deadline)
            with closing(tail):  # unassigns the reader also when restore raises mid-way
                restored = store.restore(tail)
        except BaseException:
            store.close()  # released on every path: the next owner of the directory opens it
            raise
        seconds = time.monotonic() - started
        self.metrics.restore_seconds.observe(seconds)
        self.metrics.restored_records.inc(restored)
        log.info(
            "state restored",
            partition=partition,
            from_offset=start,
            records=restored,
            seconds=round(seconds, 2),
        )
        return store

"""The stage-2 loop: read staging in batches (read_committed), apply the dedup rule, write each
accepted original record to its destination partition, and commit output, staging offsets and
the changelog of the new state in ONE Kafka transaction (`_commit`, step by step).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from deduplicator import access, output, stops
from deduplicator.abort_streak import AbortStreak
from deduplicator.backlog import Backlog
from deduplicator.broken import BrokenProducers
from deduplicator.clients import (
    consumer_config,
    cooperative,
    producer_config,
    report_client_error,
)
from deduplicator.deadletter import dead_letter
from deduplicator.errors import DeduplicatorError, ProducerFailedError, TransactionFailedError
from deduplicator.hung import HungProducers
from deduplicator.layout import ChangelogLayout
from deduplicator.limits import (
    ABORT_ON_FAILURE_S,
    ABORT_TIMEOUT_S,
    FLUSH_SLICE_S,
    HARD_DEADLINE_S,
    SEND_OFFSETS_HARD_DEADLINE_S,
    SEND_OFFSETS_TIMEOUT_S,
    SLOW_CALL_S,
    TXN_TIMEOUT_S,
)
from deduplicator.metrics import DeduplicatorMetrics
from deduplicator.partitions import Partitions
from deduplicator.retrying import retrying_with
from deduplicator.rule import state_key
from deduplicator.transaction import ChangelogWrites, OpenTransaction
from deduplicator.verdict import judged
from envelope import TIMESTAMP_NOT_AVAILABLE, EnvelopeError, decode_rows
from runtime import (
    ErrorClass,
    FencedJoins,
    Settings,
    abort_or_replace,
    classify,
    consume_ready,
    get_logger,
    kafka_error_of,
    member_fenced,
    producer_mendable,
    raise_if_refused,
    records_refused,
)
from runtime.assignment_watch import AssignmentWatch
from runtime.deadline import call_with_deadline, hard_deadline
from runtime.errors import ClientHungError
from runtime.role import on_consumer_group_protocol

log = get_logger(__name__)

CONSUME_BATCH = 2000
CONSUME_TIMEOUT_S = 0.1


class Deduplicator:
    def __init__(
        self,
        settings: Settings,
        instance_id: str,
        changelog: ChangelogLayout,
        deadletter_topic: str,
        metrics: DeduplicatorMetrics,
        should_stop: Callable[[], bool],
        beat: Callable[[], None] = lambda: None,
        clean_exit_status: Callable[[], int] = lambda: 0,
    ) -> None:
        self.settings = settings
        self.changelog = changelog
        self.deadletter_topic = deadletter_topic
        self.metrics = metrics
        self._should_stop = should_stop
        self._beat = beat
        self._clean_exit_status = clean_exit_status  # the process's, after a drain
        self._transactional_id = settings.names.deduplicator_transactional_id(instance_id)
        self._txn = OpenTransaction()
        self._destinations = output.Destinations(settings)
        self._hung = HungProducers()
        self._aborts = AbortStreak()
        self._broken = BrokenProducers()
        self._restamped_said: set[tuple[str, int]] = set()
        # Every call retried alive (the heartbeat beats, a stop request ends the wait), timed.
        self._retrying = retrying_with(beat, should_stop, metrics.observe_call)
        config = consumer_config(settings, self._client_error)
        self._cooperative = cooperative(config)
        self.consumer = Consumer(config)
        self._unassigned = AssignmentWatch(
            "staging",
            settings.names.deduplicator_group,
            consumer_group_protocol=on_consumer_group_protocol(config),
        )
        self.producer = self._new_producer()
        self._fenced_joins = FencedJoins("staging consumer")
        self.backlog = Backlog(settings.names.staging, metrics.backlog)
        self.partitions = Partitions(settings, changelog, metrics, self.backlog)

    def _new_producer(self) -> Producer:
        """The transactional producer, initialised (invariant 6: a stable id per instance;
        init_transactions fences every earlier producer of the id and ends its transaction)."""
        producer = Producer(
            producer_config(self.settings, self._transactional_id, self._client_error)
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
        """What stage 2 needs granted now (access.needs), for the refusal a broker answers."""
        return access.needs(
            self.settings.names,
            self._transactional_id,
            self._txn.written,
            self.changelog.topic,
            writing=writing,
        )

    def _client_error(self, error: KafkaError) -> None:
        report_client_error(self.metrics, error)

    # -- the loop -----------------------------------------------------------------------------

    def _subscribe(self) -> None:
        self.consumer.subscribe(
            [self.settings.names.staging],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self._unassigned.subscribed(len(self.partitions.stores))

    def run(self) -> None:
        self._subscribe()
        try:
            while not self._should_stop():
                self._beat()
                self._unassigned.check()
                self.backlog.update_due(self.consumer, list(self.partitions.stores))
                messages = self.consumer.consume(CONSUME_BATCH, 0)
                self.partitions.note_positions(messages)
                if not messages:
                    wait_s = CONSUME_TIMEOUT_S
                    # Nothing more at hand: commit now rather than wait out the interval
                    # (latency), once past the floor (transactions a second bounded at low
                    # rates). Under load something is always at hand: the limits decide.
                    if self._txn.open and (floor_left := self._txn.floor_left(self.settings)) > 0:
                        wait_s = min(wait_s, floor_left)
                    elif self._txn.open:
                        self._commit_or_recover()
                    messages = consume_ready(self.consumer, CONSUME_BATCH, wait_s)
                    self.partitions.note_positions(messages)
                for message in messages:
                    try:
                        self._process(message)
                    except ProducerFailedError as failed:
                        self._replace_failed_producer(failed.error)
                        self.partitions.rewind(self.consumer)
                        break
                    except KafkaException as exc:
                        # The transaction turned abortable while it was being written
                        # (_producing names its own error): as after a failed commit.
                        self._recover(exc)
                        break
                    # Checked per envelope: a batch of envelopes can hold a million records,
                    # and the limits bound what one transaction holds, not what one batch does.
                    if self._txn.due(self.settings) and not self._commit_or_recover():
                        break  # rewound: the rest of this batch is read again from the commit
            if self._txn.open:
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
            self.partitions.close()
            self._hung.leave(self._clean_exit_status())

    def _process(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._AUTO_OFFSET_RESET:
                stops.offset_reset(self.consumer, self.metrics, self.partitions.stopped, message)
                return
            raise_if_refused(error, "target", self._needs(writing=False))
            if member_fenced(error):
                self._join_again(error)
                return
            if classify(error) is ErrorClass.FATAL:
                raise KafkaException(error)
            log.warning("staging consume error", error=error.str())
            return
        partition = message.partition()
        if partition not in self.partitions.stores:
            return  # revoked within this batch: its next owner reads it from the commit point
        if partition in self.partitions.stopped:
            return  # fetched before its stop: read again from the commit point if ever resumed
        with self._producing():
            self._copy(message, partition)

    def _copy(self, message: Message, partition: int) -> None:
        """Judge one envelope and write what it adds to the open transaction."""
        self._begin()
        self._txn.offsets[partition] = message.offset() + 1
        value = message.value() or b""
        self._txn.bytes += len(value)
        try:
            envelope = decode_rows(value)
        except EnvelopeError as exc:
            self._dead_letter(message, f"not an envelope: {exc}")
            return
        destination = self._destinations.of(envelope.topic)
        if destination is None:
            self._dead_letter(message, f"topic {envelope.topic} is not replicated by this flow")
            return
        key = state_key(envelope.source_cluster_id, envelope.topic, envelope.partition)
        pending = self._txn.pending.get(key)
        state = pending[1] if pending else self.partitions.stores[partition].get(key)
        verdict = judged(self._txn.tally, state, envelope)
        if verdict.orphan or verdict.stale or not verdict.accepted:
            return
        # Before the write: a refusal can fail the transaction while this envelope's records
        # are still being produced, and it is then the one whose staging partition to stop.
        self._txn.routes.setdefault((destination, envelope.partition), set()).add(partition)
        provenance = self.settings.provenance_header
        restamped = output.write(
            self.producer, destination, envelope, verdict.accepted, provenance=provenance
        )
        if restamped:
            self._restamped(destination, envelope.partition, restamped)
        self._txn.produced += len(verdict.accepted)
        written = self._txn.tally.written
        written[destination] = written.get(destination, 0) + len(verdict.accepted)
        _offset, timestamp, timestamp_type, *_ = verdict.accepted[-1]
        if timestamp_type != TIMESTAMP_NOT_AVAILABLE:
            self._txn.timestamps.append(timestamp)
        self._txn.pending[key] = (partition, verdict.state)

    @contextlib.contextmanager
    def _producing(self) -> Iterator[None]:
        """The producer's calls: a fatal error a new producer mends raises ProducerFailedError
        (the loop replaces the producer), any other error stays what it is."""
        try:
            yield
        except KafkaException as exc:
            error = kafka_error_of(exc)
            if error.code() == KafkaError._FATAL:
                # produce() on a failed producer names no cause; its flush raises the error
                # that failed it (and sends nothing).
                try:
                    self.producer.flush(0)
                except KafkaException as cause:
                    error = kafka_error_of(cause)
            elif error.code() == KafkaError._STATE and self._txn.open:
                # produce() into a transaction turned abortable (a record refused, a batch
                # timed out) says only "Unable to produce message: Local: Erroneous state", and
                # stage 2 exited naming that; the transaction's own error is what the loop
                # recovers from, or stops on.
                error = self._transaction_error() or error
            if producer_mendable(error):
                raise ProducerFailedError(error) from exc
            if error is not kafka_error_of(exc):
                raise KafkaException(error) from exc
            raise

    def _transaction_error(self) -> KafkaError | None:
        """The error that made the open transaction abortable, if it is: librdkafka answers it
        to the next transactional call, and begin_transaction() changes nothing while a
        transaction is open (it answers "Operation not valid in state InTransaction"); the
        caller asks only then."""
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:
            error = kafka_error_of(exc)
            return error if error.txn_requires_abort() else None
        return None

    def _restamped(self, topic: str, partition: int, records: int) -> None:
        """Records stamped 0 written with the time of writing (output.write): counted, and said
        once per destination partition and process (docs/design.md §11)."""
        self._txn.tally.restamped += records
        if (topic, partition) not in self._restamped_said:
            self._restamped_said.add((topic, partition))
            log.warning(
                "records stamped 0 written with the time of writing",
                topic=topic,
                partition=partition,
                reason="librdkafka takes a timestamp of 0 for now and cannot write one",
            )

    def _dead_letter(self, message: Message, reason: str) -> None:
        self._txn.dead_lettered.add(message.partition())
        dead_letter(
            self.settings, self._txn.tally, self.producer, self.deadletter_topic, message, reason
        )

    def _begin(self) -> None:
        if not self._txn.open:
            self.producer.begin_transaction()
            self._txn.open = True
            self._txn.began = time.monotonic()

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
        changelog = ChangelogWrites(self.producer, self.changelog, self._txn)  # step 1
        offsets = [
            TopicPartition(self.settings.names.staging, partition, offset)
            for partition, offset in self._txn.offsets.items()
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
        if not self._flushed(changelog.failures) or changelog.failures:  # step 3
            access.raise_unacknowledged(self.producer, changelog.failures, self._needs())
        self._txn.commit_sent = True
        try:  # step 4
            self._retrying("commit_transaction", commit, until_stopped=True)
        except TransactionFailedError as exc:
            raise DeduplicatorError(f"outcome of the transaction commit unknown: {exc}") from exc
        committed_at = time.time()
        self.metrics.count_committed(self._txn.tally)
        for partition, states in self._txn.by_partition().items():  # step 5
            self.partitions.stores[partition].commit(states, changelog.offsets[partition])
        if changelog.offsets:
            self.partitions.advance_idle(max(changelog.offsets.values()))
        self.metrics.observe_commit(started, committed_at, self._txn.timestamps)
        self.partitions.committed(self._txn.offsets)
        self._txn.reset()
        self._aborts.committed()

    def _flushed(self, failures: list[KafkaError]) -> bool:
        """Whether every record of the transaction was acknowledged within TXN_TIMEOUT_S; False
        as soon as one failed. A transaction that turned abortable purges what it holds, but a
        flush went on waiting for the records in flight to a node shutting down: 29 s after
        the purge in a rolling restart of the target, for an abort that was certain."""
        started = time.monotonic()
        deadline = started + TXN_TIMEOUT_S
        while self.producer.flush(FLUSH_SLICE_S) != 0:
            if failures or time.monotonic() >= deadline:
                return False
        if failures:  # failed in the last slice: aborted, and not timed as a flush that held
            return False
        seconds = time.monotonic() - started
        # Timed beside the transactional calls: at low rates most of a commit is here, one
        # produce request per partition the transaction wrote, at most five in flight to a
        # broker (docs/design.md §9, "One partition per produce request").
        self.metrics.observe_call("flush", seconds)
        if seconds >= SLOW_CALL_S:
            log.info("slow call", operation="flush", seconds=round(seconds, 1), retries=0)
        return True

    def _commit_or_recover(self) -> bool:
        """Commit; or abort and rewind to the committed offsets (False)."""
        self._hung.reap()
        try:
            with self._producing():
                self._commit()
            return True
        except ClientHungError as exc:
            self._replace_hung_producer(exc)
            self.partitions.rewind(self.consumer)
            return False
        except ProducerFailedError as failed:
            if self._txn.commit_sent:
                # The coordinator may have taken the EndTxn before the producer failed, and the
                # replacement's init_transactions would then complete it: rewound here, its
                # records would be written again (invariant 5). A successor restores.
                unknown = f"outcome of the transaction commit unknown: {failed}"
                raise DeduplicatorError(unknown) from failed
            self._replace_failed_producer(failed.error)
            self.partitions.rewind(self.consumer)
            return False
        except (KafkaException, TransactionFailedError) as exc:
            self._recover(exc)
            return False

    def _recover(self, exc: KafkaException | TransactionFailedError) -> None:
        """After a transaction failed (``exc``): raise what no abort mends; else abort, rewind
        staging to the committed offsets and forget the uncommitted state (RocksDB holds only
        committed state). A destination partition refusing its records for good stops the
        staging partitions that wrote to it (stops.refused): the same transaction again would
        meet the same refusal, without end."""
        error = None
        if isinstance(exc, KafkaException):
            raise_if_refused(exc, "target", self._needs())
            error = kafka_error_of(exc)
            if classify(error) is ErrorClass.FATAL:
                raise exc
        self._aborts.aborted(str(exc))
        log.warning("transaction aborted", error=str(exc), aborts_in_a_row=self._aborts.aborts)
        if error is not None and member_fenced(error):
            # The offsets' member id is fenced, and our consumer with it (it can no longer
            # seek): a new consumer starts from the committed offsets, no rewind needed.
            self._join_again(error)
            return
        refused = records_refused(error) if error is not None else None
        writers: set[int] = set()
        if refused is not None:
            writers = set(self._txn.routes.get(refused, ()))
            if refused[0] == self.deadletter_topic:
                writers = set(self._txn.dead_lettered)
        commit_sent = self._txn.commit_sent
        # After a commit was sent, an abort that fails makes the outcome unknown, and that
        # costs an exit: it is given as long as a commit, not ABORT_TIMEOUT_S.
        if not self._abort(TXN_TIMEOUT_S if commit_sent else ABORT_TIMEOUT_S) and commit_sent:
            # librdkafka can report a commit whose EndTxn the coordinator may have taken
            # (a transaction that failed locally meanwhile), and the replacement's
            # init_transactions then completes it: rewound here, its records would be
            # written again (invariant 5). A successor restores from the changelog.
            unknown = f"outcome of the transaction commit unknown: {exc}"
            raise DeduplicatorError(unknown) from exc
        self.partitions.rewind(self.consumer)
        if refused is None or error is None:
            return
        if not writers:  # the changelog's: no envelope to stop
            raise DeduplicatorError(
                f"the target refuses records of {refused[0]} partition {refused[1]} for good: "
                f"{error.str()}"
            ) from exc
        staging = self.settings.names.staging
        stops.refused(
            self.consumer, self.metrics, self.partitions.stopped, staging, writers, refused, error
        )
        self._aborts.handled()  # the refusal's partitions stopped: its aborts end there

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
            self._txn.reset()
        return self.producer is producer

    def _replace_hung_producer(self, hung: ClientHungError) -> None:
        """Leave the producer to its hung call and go on with a new one of the same
        transactional.id (runtime/deadline.py: librdkafka #5456, #5511). Invariant 6: the new
        producer's init_transactions fences the stuck one and has the coordinator abort its
        transaction, so nothing it holds can commit; RocksDB was not written (step 5 comes after
        the commit) and the caller rewinds staging to the committed offsets. The stuck producer
        is never closed under its call: that would free what the call still uses."""
        self.metrics.transactions.labels("aborted").inc()
        self._hung.add(self.producer, hung)
        self._txn.reset()
        started = time.monotonic()
        self.producer = self._new_producer()
        # How long the coordinator took to end the stuck producer's transaction: the other half
        # of the stall a hang costs.
        log.info("replacement producer ready", seconds=round(time.monotonic() - started, 1))

    def _replace_failed_producer(self, error: KafkaError) -> None:
        """Close the producer librdkafka gave up (``error``) and go on with a new one of the same
        transactional.id, as for a hung one: its init_transactions fences the failed producer
        and has the coordinator abort its transaction (invariant 6); no commit was sent, RocksDB
        was not written, and the caller rewinds staging to the committed offsets."""
        self._broken.count(error)
        self.metrics.transactions.labels("aborted").inc()
        with contextlib.suppress(KafkaException, RuntimeError):
            self.producer.close()
        self._txn.reset()
        self.producer = self._new_producer()

    def _drop_transaction(self) -> None:
        """End the open transaction without committing it, on the way out of a failure: an abort
        if the producer can still do one soon, else the successor's init_transactions (same
        transactional.id) or the transaction timeout ends it on the broker (invariant 6)."""
        if not self._txn.open:
            return
        self.metrics.transactions.labels("aborted").inc()
        try:
            self.producer.abort_transaction(ABORT_ON_FAILURE_S)
        except KafkaException as exc:
            log.warning("open transaction left to the broker to end", error=str(exc))
        finally:
            self._txn.reset()

    # -- partitions ---------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._unassigned.given(len(partitions))  # before the restore, which is not the group's
        starts = self.partitions.assign(consumer, partitions)
        # Each at an explicit position (stops.py): librdkafka must never pick one itself.
        if self._cooperative:
            consumer.incremental_assign(starts)
        else:
            consumer.assign(starts)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._txn.open:
            self._commit_or_recover()
        self.partitions.release(partitions)
        log.info("staging partitions revoked", partitions=[tp.partition for tp in partitions])

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Our generation is gone: the open transaction cannot commit (invariant 6); abort it.
        if self._txn.open:
            self._abort()
        self.partitions.release(partitions)
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
        if self._txn.open:
            self._abort()
        staging = self.settings.names.staging
        self.partitions.release([TopicPartition(staging, p) for p in self.partitions.stores])
        with contextlib.suppress(KafkaException, RuntimeError):
            self.consumer.close()
        self.consumer = Consumer(consumer_config(self.settings, self._client_error))
        self._subscribe()

"""The stage-2 loop: read staging in batches (read_committed), apply the dedup rule, write each
accepted original record to its destination partition, and commit output, staging offsets and
the changelog of the new state in ONE Kafka transaction (`_commit`, step by step).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from deduplicator.errors import DeduplicatorError
from deduplicator.rule import PartitionState, encode_state, judge, state_key
from deduplicator.state import StateStore
from envelope import EnvelopeError, decode, encode_provenance
from envelope.provenance import HEADER_PROVENANCE
from runtime import ErrorClass, Settings, classify, get_logger
from runtime.role import static_membership

log = get_logger(__name__)
_LIBRDKAFKA_LOG = logging.getLogger("librdkafka")

CONSUME_BATCH = 2000
CONSUME_TIMEOUT_S = 0.1
TXN_TIMEOUT_S = 30.0
RESTORE_POLL_S = 1.0
MAX_RECORD_BYTES = 64 * 1024 * 1024


class Deduplicator:
    def __init__(
        self,
        settings: Settings,
        instance_id: str,
        changelog_topic: str,
        deadletter_topic: str,
        should_stop: Callable[[], bool],
        beat: Callable[[], None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.changelog_topic = changelog_topic
        self.deadletter_topic = deadletter_topic
        self._should_stop = should_stop
        self._beat = beat
        self._state_root = Path(settings.state_dir) / settings.flow
        self.stores: dict[int, StateStore] = {}
        # The open transaction: destination records produced, states changed, offsets consumed.
        self._pending: dict[bytes, tuple[int, PartitionState]] = {}
        self._offsets: dict[int, int] = {}
        self._in_transaction = False
        self._began = 0.0
        self._produced = 0
        self._destinations: dict[str, str | None] = {}
        self.counts = {"written": 0, "duplicates": 0, "orphans": 0, "stale": 0, "dead": 0}
        self.consumer = Consumer(
            {
                **settings.destination.client_config(),
                "group.id": f"exactly.{settings.flow}.deduplicator",
                "enable.auto.commit": False,
                # Invariant 6: only committed staging records; never an aborted one.
                "isolation.level": "read_committed",
                # A new flow reads staging from its beginning (stage 1 wrote it for us).
                "auto.offset.reset": "earliest",
                "logger": _LIBRDKAFKA_LOG,
                **static_membership(settings, "deduplicator"),
            }
        )
        self.producer = Producer(
            {
                **settings.destination.client_config(),
                # Invariant 6: a stable id per instance; init_transactions fences a zombie.
                "transactional.id": f"exactly.{settings.flow}.deduplicator.{instance_id}",
                "transaction.timeout.ms": 60000,
                "linger.ms": 5,
                # A destination record is as large as its source allowed (max.message.bytes is
                # mirrored per topic); the broker, not this client, enforces each topic's limit.
                "message.max.bytes": MAX_RECORD_BYTES,
                "logger": _LIBRDKAFKA_LOG,
            }
        )

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> None:
        self.producer.init_transactions(TXN_TIMEOUT_S)
        self.consumer.subscribe(
            [self.settings.staging_topic_name],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        try:
            while not self._should_stop():
                self._beat()
                for message in self.consumer.consume(CONSUME_BATCH, CONSUME_TIMEOUT_S):
                    self._process(message)
                if self._in_transaction and (
                    time.monotonic() - self._began >= self.settings.commit_interval_ms / 1000
                    or self._produced >= self.settings.commit_max_records
                ):
                    self._commit_or_recover()
            if self._in_transaction:
                self._commit_or_recover()
        finally:
            self.consumer.close()
            for store in self.stores.values():
                store.close()

    def _process(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if classify(error) is ErrorClass.FATAL:
                raise KafkaException(error)
            log.warning("staging consume error", error=error.str())
            return
        partition = message.partition()
        if partition not in self.stores:
            return  # revoked within this batch: its next owner reads it from the commit point
        self._begin()
        self._offsets[partition] = message.offset() + 1
        try:
            envelope = decode(message.value() or b"")
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
        self.counts["duplicates"] += verdict.duplicates
        if verdict.orphan:
            # Invariant 4: a gap in stage 1's session; the resend heals it. Never written.
            self.counts["orphans"] += 1
            log.warning(
                "orphan envelope not written",
                topic=envelope.topic,
                partition=envelope.partition,
                prev_offset=envelope.prev_offset,
                high=state.high if state else -1,
                first_offset=envelope.records[0].offset,
            )
            return
        if verdict.stale:
            self.counts["stale"] += 1
            return
        add_provenance = self.settings.provenance_header
        for record in verdict.accepted:
            headers = list(record.headers)
            if add_provenance:
                headers.append(
                    (
                        HEADER_PROVENANCE,
                        encode_provenance(
                            envelope.source_cluster_id, envelope.partition, record.offset
                        ),
                    )
                )
            self._produce(
                destination,
                value=record.value,
                key=record.key,
                partition=envelope.partition,
                timestamp=record.timestamp,
                headers=headers,
            )
        self._produced += len(verdict.accepted)
        self.counts["written"] += len(verdict.accepted)
        if verdict.accepted:
            self._pending[key] = (partition, verdict.state)

    def _destination(self, topic: str) -> str | None:
        # Per envelope on the hot path: the include/exclude regexes run once per source topic.
        if topic not in self._destinations:
            self._destinations[topic] = self.settings.destination_topic(topic)
        return self._destinations[topic]

    def _produce(self, topic: str, **kwargs: object) -> None:
        while True:
            try:
                self.producer.produce(topic, **kwargs)
                return
            except BufferError:
                self.producer.poll(0.1)

    def _dead_letter(self, message: Message, reason: str) -> None:
        """Invariant 7: a bad staging record is kept, with its reason, in the same transaction."""
        if self.settings.on_bad_envelope == "stop":
            raise DeduplicatorError(
                f"staging record at partition {message.partition()} offset {message.offset()}: "
                f"{reason}"
            )
        self.counts["dead"] += 1
        self._produce(
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
            self._produced = 0

    # -- the commit protocol ------------------------------------------------------------------

    def _commit(self) -> None:
        """One transaction: output, staging offsets and changelog, then RocksDB.

        1. Produce the changelog records of every state this transaction changed, into the
           transaction (invariant 5: state commits with output).
        2. Flush: every record of the transaction is acknowledged; any failure raises and the
           transaction aborts (no per-record callback: the commit is the acknowledgement).
        3. Add the staging offsets with the consumer group metadata (invariant 6: a zombie, whose
           generation is stale, cannot commit).
        4. Commit the transaction: output, offsets and state become visible at once.
        5. Only then write RocksDB, one write batch per staging partition, with the changelog
           offset it reflects (invariant 5: a crash before this step restores from Kafka).
        """
        changelog_offsets: dict[int, int] = {}
        failures: list[str] = []

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                failures.append(error.str())
                return
            partition = message.partition()
            changelog_offsets[partition] = max(
                changelog_offsets.get(partition, -1), message.offset()
            )

        for key, (partition, state) in self._pending.items():  # step 1
            self._produce(
                self.changelog_topic,
                key=key,
                value=encode_state(state),
                partition=partition,
                on_delivery=delivered,
            )
        if self.producer.flush(TXN_TIMEOUT_S) != 0 or failures:  # step 2
            raise DeduplicatorError(f"transaction records not acknowledged: {failures[:3]}")
        offsets = [
            TopicPartition(self.settings.staging_topic_name, partition, offset)
            for partition, offset in self._offsets.items()
        ]
        self.producer.send_offsets_to_transaction(  # step 3
            offsets, self.consumer.consumer_group_metadata(), TXN_TIMEOUT_S
        )
        self.producer.commit_transaction(TXN_TIMEOUT_S)  # step 4
        by_partition: dict[int, dict[bytes, PartitionState]] = {}
        for key, (partition, state) in self._pending.items():
            by_partition.setdefault(partition, {})[key] = state
        for partition, states in by_partition.items():  # step 5
            self.stores[partition].commit(states, changelog_offsets[partition])
        self._reset_transaction()

    def _commit_or_recover(self) -> None:
        try:
            self._commit()
        except (KafkaException, DeduplicatorError) as exc:
            error = exc.args[0] if isinstance(exc, KafkaException) else None
            if error is not None and classify(error) is ErrorClass.FATAL:
                raise
            # Abortable: abort, rewind staging to the committed offsets, and forget the
            # uncommitted state (RocksDB holds only committed state).
            log.warning("transaction aborted", error=str(exc))
            self.producer.flush(TXN_TIMEOUT_S)  # DESIGN.md §9: an abort after a flush succeeds
            self.producer.abort_transaction(TXN_TIMEOUT_S)
            self._reset_transaction()
            self._rewind()

    def _reset_transaction(self) -> None:
        self._pending.clear()
        self._offsets.clear()
        self._in_transaction = False
        self._produced = 0

    def _rewind(self) -> None:
        assigned = self.consumer.assignment()
        for tp in self.consumer.committed(assigned, timeout=TXN_TIMEOUT_S):
            offset = tp.offset if tp.offset >= 0 else 0
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))

    # -- partitions ---------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.stores[tp.partition] = self._open_store(tp.partition)
        log.info("staging partitions assigned", partitions=[tp.partition for tp in partitions])

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._in_transaction:
            self._commit_or_recover()
        for tp in partitions:
            store = self.stores.pop(tp.partition, None)
            if store is not None:
                store.close()
        log.info("staging partitions revoked", partitions=[tp.partition for tp in partitions])

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Our generation is gone: the open transaction cannot commit (invariant 6); abort it.
        if self._in_transaction:
            self.producer.abort_transaction(TXN_TIMEOUT_S)
            self._reset_transaction()
        for tp in partitions:
            store = self.stores.pop(tp.partition, None)
            if store is not None:
                store.close()
        log.warning("staging partitions lost", partitions=[tp.partition for tp in partitions])

    def _open_store(self, partition: int) -> StateStore:
        """The partition's RocksDB, brought up to date from the changelog (the truth)."""
        directory = self._state_root / str(partition)
        try:
            store = StateStore.open(directory)
        except DeduplicatorError as exc:
            log.warning("state store unusable; restoring from the changelog", error=str(exc))
            StateStore.destroy(directory)
            store = StateStore.open(directory)
        started = time.monotonic()
        reflected = store.changelog_offset()
        start = 0 if reflected is None else reflected + 1
        restored = store.restore(self._changelog_tail(partition, start))
        log.info(
            "state restored",
            partition=partition,
            from_offset=start,
            records=restored,
            seconds=round(time.monotonic() - started, 2),
        )
        return store

    def _changelog_tail(self, partition: int, start: int):  # noqa: ANN202 - a generator
        reader = Consumer(
            {
                **self.settings.destination.client_config(),
                "group.id": f"exactly.{self.settings.flow}.changelog-reader",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "logger": _LIBRDKAFKA_LOG,
            }
        )
        try:
            tp = TopicPartition(self.changelog_topic, partition)
            _low, end = reader.get_watermark_offsets(tp, timeout=TXN_TIMEOUT_S, cached=False)
            if start >= end:
                return
            reader.assign([TopicPartition(self.changelog_topic, partition, start)])
            while True:
                position = reader.position([tp])[0].offset
                if position >= end:
                    return
                message = reader.poll(RESTORE_POLL_S)
                if message is None:
                    continue
                if message.error():
                    raise KafkaException(message.error())
                yield message.key(), message.value(), message.offset()
                if message.offset() >= end - 1:
                    return
        finally:
            reader.close()

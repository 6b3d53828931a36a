"""Stage 1's Prometheus metrics, in a registry of its own (one per process), and their
bookkeeping: the lag of the lanes, the left-out gauge, a lane's series dropped when it goes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry, Counter, Gauge

from replicator.lanes import Lane


class ReplicatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.records = Counter(
            "exactly_replicator_records",
            "Source records in envelopes staging acknowledged. Not counted: records never "
            "enveloped (the record that stopped its partition and those after it) and "
            "envelopes refused or lost with their session. A record read again after a "
            "session restart or a handover counts again when its new envelope is acknowledged.",
            ["topic"],
            registry=r,
        )
        self.bytes = Counter(
            "exactly_replicator_bytes",
            "Key, value and header bytes of those records (estimated as envelopes are cut).",
            ["topic"],
            registry=r,
        )
        self.copies_passed_over = Counter(
            "exactly_replicator_copies_passed_over",
            "Source records not copied because they are copies already (they carry the "
            "exactly.origin header a stage 2 adds): loop prevention in active-active and mesh "
            "topologies.",
            ["topic"],
            registry=r,
        )
        self.envelopes = Counter(
            "exactly_replicator_envelopes", "Envelopes produced to staging.", registry=r
        )
        self.session_restarts = Counter(
            "exactly_replicator_session_restarts",
            "Stage-1 sessions ended and restarted (new producer, rewind), by reason.",
            ["reason"],
            registry=r,
        )
        self.lag = Gauge(
            "exactly_replicator_lag_records",
            "Source records not yet acknowledged in staging (high watermark - commit point).",
            ["topic", "partition"],
            registry=r,
        )
        self.partitions_stopped = Gauge(
            "exactly_replicator_partitions_stopped",
            "Source partitions stopped by policy (1 while stopped), by reason.",
            ["topic", "partition", "reason"],
            registry=r,
        )
        self.topics_left_out = Gauge(
            "exactly_replicator_topics_left_out",
            "Source topics not replicated (1 while left out) because their destination name "
            "collides with a replicated topic's or the flow's own (docs/topologies.md).",
            ["topic"],
            registry=r,
        )
        self.records_lost = Counter(
            "exactly_replicator_records_lost",
            "Source records deleted by retention before stage 1 read them.",
            ["topic", "partition"],
            registry=r,
        )
        self.client_errors = Counter(
            "exactly_replicator_client_errors",
            "Errors reported by the Kafka clients (unreachable brokers among them), by cluster.",
            ["cluster", "code"],
            registry=r,
        )
        self.assigned_partitions = Gauge(
            "exactly_replicator_assigned_partitions",
            "Source partitions this instance owns.",
            registry=r,
        )

    def count_left_out(self, topics: Iterable[str]) -> None:
        """The left-out gauge after a discovery round: 1 for each topic it leaves out."""
        gauge = self.topics_left_out
        gauge.clear()  # a topic no longer left out (renamed apart, excluded, deleted) drops out
        for topic in topics:
            gauge.labels(topic).set(1)

    def forget(self, lane: Lane) -> None:
        """Drop the series of a lane this instance no longer owns (revoked, lost, rejoined)."""
        with contextlib.suppress(KeyError):
            self.lag.remove(lane.topic, str(lane.partition))
        if lane.stopped:
            self.partitions_stopped.remove(lane.topic, str(lane.partition), lane.stopped)

    def update_lag(self, consumer: Consumer, lanes: Iterable[Lane]) -> None:
        """Each lane's lag from the consumer's cached high watermark (no request to the broker).

        A lane with nothing in flight has copied all it read: its lag counts from the consumer's
        position, which has moved past the transaction markers a source written in transactions
        ends with. Counted from ``committable`` (the last record's offset + 1) such a lane lagged
        by one for ever, and ExactlyFlowStalled fired on every quiet flow of transactional
        records (every active-active pair: each side's source holds the other's copies)."""
        lanes = list(lanes)
        asked = [TopicPartition(ln.topic, ln.partition) for ln in lanes]
        try:
            positions = {(tp.topic, tp.partition): tp.offset for tp in consumer.position(asked)}
        except KafkaException:
            positions = {}
        for lane in lanes:
            try:
                _low, high = consumer.get_watermark_offsets(
                    TopicPartition(lane.topic, lane.partition), cached=True
                )
            except KafkaException:
                continue
            read = lane.committable
            # Not a stopped lane: its position may have passed what it stopped on (a record
            # too large, a batch the client could not read), which is still to copy.
            if not lane.in_flight and not lane.stopped:
                read = max(read, positions.get((lane.topic, lane.partition), -1))
            if high >= 0 and read >= 0:
                self.lag.labels(lane.topic, str(lane.partition)).set(max(0, high - read))

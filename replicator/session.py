"""Stage 1's producer session: the life of one idempotent, gapless producer into staging.

Within a session the envelopes of a source partition chain through `prev_offset` with no gap
(invariant 2). ANY delivery error, a produce error or a stall ends it: ``error`` says why, and
the copy loop's commit (`Replicator._commit`, steps 1 and 4) drops this producer and starts the
next. Nothing is retried envelope by envelope. A dropped producer's late reports touch no lane:
each report carries the number of the session that sent it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from replicator.access import delivery_refusal
from replicator.clients import producer_config, report_client_error
from replicator.lanes import InFlight, Lane
from replicator.metrics import ReplicatorMetrics
from replicator.topics import StagingTopic
from runtime import NotAuthorizedError, Settings, get_logger, kafka_error_of, produce_when_room

# The copy loop's logger: these lines were the loop's, and a log query selects on its logger name.
log = get_logger("replicator.loop")


class StagingSession:
    def __init__(
        self,
        settings: Settings,
        staging: StagingTopic,
        metrics: ReplicatorMetrics,
        lanes: Mapping[tuple[str, int], Lane],
    ) -> None:
        self.settings = settings
        self.staging = staging
        self.metrics = metrics
        self._lanes = lanes  # the loop's, watched for a stall
        self.number = 0
        self.error: str | None = None  # why the session must end; None while healthy
        self.refused: NotAuthorizedError | None = None  # a write to staging refused: stop
        self.producer = self.new_producer()

    def new_producer(self) -> Producer:
        return Producer(producer_config(self.settings, self.staging, self._on_producer_error))

    def send(
        self, lane: Lane, data: bytes, last_record: int, covers: int, records: int, size: int
    ) -> None:
        """Produce one envelope of ``lane`` to its staging partition, holding ``records``
        source records of ``size`` bytes (counted once staging acknowledges it)."""
        flight = lane.sent(last_record, covers, time.monotonic())
        session = self.number

        def delivered(error: KafkaError | None, _message: Message) -> None:
            if self._delivered(error, lane, flight, session):
                # Counted here, not when sent: an envelope never produced, lost with its
                # session or refused is not a copy, and its records are read again (invariant
                # 2); those of a stopped lane never reach staging (invariant 7).
                self.metrics.records.labels(lane.topic).inc(records)
                self.metrics.bytes.labels(lane.topic).inc(size)

        try:
            produced = produce_when_room(
                self.producer,
                self.staging.name,
                # A full local queue waits only while the session is healthy; a stall ends it
                # (and the restart rewinds this lane).
                keep_waiting=self._healthy,
                value=data,
                partition=lane.staging_partition,
                on_delivery=delivered,
            )
        except KafkaException as exc:
            # E.g. the producer turned fatal on a gap before its error callback ran.
            # Invariant 2: end the session; never retry this envelope alone.
            self.error = f"produce_error:{kafka_error_of(exc).name()}"
            return
        if produced:
            self.metrics.envelopes.inc()

    def _healthy(self) -> bool:
        if self.error is None:
            self.watch_for_stall(time.monotonic())
        return self.error is None

    def _delivered(
        self, error: KafkaError | None, lane: Lane, flight: InFlight, session: int
    ) -> bool:
        """Apply a delivery report; True when it acknowledges an envelope of this session."""
        if session != self.number:
            return False  # a dropped producer's late report: its lanes have rewound already
        if error is not None:
            denied = delivery_refusal(error, self.staging.name)
            if denied is not None:
                self.refused = denied  # no session mends a missing ACL
                self.error = self.error or f"refused:{error.name()}"
                return False
            # Invariant 2: ANY delivery error ends the session, never a retry of one envelope.
            if self.error is None:
                self.error = f"delivery_error:{error.name()}"
                log.warning(
                    "envelope delivery failed",
                    topic=lane.topic,
                    partition=lane.partition,
                    last_offset=flight.last_offset,
                    error=error.str(),
                )
            return False
        lane.acknowledged(flight)
        return True

    def watch_for_stall(self, now: float) -> None:
        oldest = min(
            (t for lane in self._lanes.values() if (t := lane.oldest_unacked_at()) is not None),
            default=None,
        )
        if oldest is not None and now - oldest > self.settings.stall_timeout_ms / 1000:
            self.error = "stall"
            log.warning(
                "no acknowledgement from staging: ending the session",
                seconds=round(now - oldest, 1),
            )

    def _on_producer_error(self, error: KafkaError) -> None:
        if error.fatal():
            # A gapless idempotent producer turns a gap into a fatal error: end the session.
            self.error = f"fatal:{error.name()}"
        report_client_error(self.metrics, "target", error)

    def serve(self, timeout_s: float = 0.0, *, flush: bool = False) -> int:
        """Serve delivery reports; returns what ``flush``/``poll`` return (with ``flush``: the
        envelopes still unacknowledged).

        The client raises a producer's fatal error from ``poll``/``flush`` (a gap, with
        ``enable.gapless.guarantee``): invariant 2 makes that the end of the session, whose
        restart rewinds every lane, never the end of the process.
        """
        try:
            served = self.producer.flush(timeout_s) if flush else self.producer.poll(timeout_s)
            return int(served)
        except KafkaException as exc:
            error = kafka_error_of(exc)
            if not error.fatal():
                raise
            if self.error is None:
                self.error = f"fatal:{error.name()}"
            return len(self.producer)

    def drop(self) -> None:
        """End the session's producer: the reports it still owes no longer touch any lane, and
        it is never served again. Purging its in-flight requests is itself a gap to a gapless
        producer, which turns fatal a moment later: that error belongs to the session just
        ended, so nothing may poll this producer again (a poll raised it and stopped the
        process, found by a broker paused past the stall timeout)."""
        self.number += 1
        with contextlib.suppress(KafkaException):
            self.producer.purge()

    def release(self) -> None:
        """Let the producer go before the process exits. Its envelopes' delivery callbacks hold
        this session, and so the producer, where the collector cannot see them: purged and
        served (their reports touch no lane), they let runtime/role.py destroy it. Not close():
        that flushes without a bound (message.timeout.ms 0)."""
        self.drop()
        with contextlib.suppress(KafkaException):
            self.producer.flush(0)

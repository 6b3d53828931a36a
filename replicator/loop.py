"""The stage-1 loop: consume the source in batches, wrap runs of records in envelopes, produce
them to each source partition's lane in staging, commit the acknowledged prefix.

A *session* is the life of one idempotent, gapless producer (replicator/session.py). Within a
session the envelopes of a source partition chain through `prev_offset` with no gap (invariant
2). ANY delivery error or a stall ends the session: the producer is dropped, every lane rewinds
to its commit point and the next session starts with an empty `prev_offset`. Nothing is retried
record by record.

Why this is at-least-once with chains stage 2 can trust is `Replicator._commit`, the one place
a source offset is committed: its four numbered steps name the invariant each protects.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Callable, Collection, Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from envelope import RecordRow, encode_rows
from replicator.access import consumer_refusal
from replicator.assignment import REBALANCE_FLUSH_S, drop_all, lose, new_lanes, read_assigned
from replicator.batching import Run, cut_runs, estimated_size, row_of
from replicator.clients import consumer_config, report_client_error
from replicator.consume_errors import on_message_error
from replicator.copies import count_passed_over, without_copies
from replicator.discovery import Discovered, TopicDiscovery
from replicator.discovery_thread import DiscoveryThread
from replicator.errors import ReplicatorError
from replicator.flowrecords import FlowRecords
from replicator.lanes import Lane, commit_metadata
from replicator.metrics import ReplicatorMetrics
from replicator.session import StagingSession
from replicator.stops import hold_recreated, stop_too_large
from replicator.topics import StagingTopic
from runtime import (
    FencedJoins,
    NotAuthorizedError,
    Settings,
    admin_client,
    consume_ready,
    get_logger,
    kafka_error_of,
    member_fenced,
)
from runtime.assignment_watch import AssignmentWatch
from runtime.role import on_consumer_group_protocol
from runtime.topics import cluster_metadata

log = get_logger(__name__)

CONSUME_BATCH = 2000
CONSUME_TIMEOUT_S = 0.2
COMMIT_INTERVAL_S = 1.0
DISCOVERY_INTERVAL_S = 5.0  # a new matching topic is picked up within 10 s (issue 4)
# How long the loop's end waits for a discovery round under way (its admin calls: 30 s each).
DISCOVERY_JOIN_S = 30.0
WATCHDOG_INTERVAL_S = 1.0
DRAIN_FLUSH_S = 30.0
# What a produce request adds around one envelope (record batch and request headers).
PRODUCE_OVERHEAD = 1024


class Why(enum.Enum):
    """The moments stage 1 commits at (`Replicator._commit`, step 1)."""

    PERIODIC = "periodic"  # every COMMIT_INTERVAL_S, asynchronously
    HANDOVER = "handover"  # partitions revoked, or the drain on SIGTERM
    SESSION_END = "session_end"  # a delivery error, a produce error or a stall


class Replicator:
    def __init__(
        self,
        settings: Settings,
        staging: StagingTopic,
        records: FlowRecords,
        metrics: ReplicatorMetrics,
        should_stop: Callable[[], bool],
        beat: Callable[[], None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.staging = staging
        self.records = records
        if records.started_at_ms is None:
            raise ReplicatorError(f"{records.topic} holds no flow start: ensure_staging records it")
        self.started_at_ms = records.started_at_ms
        self.metrics = metrics
        self._should_stop = should_stop
        self._beat = beat
        source_admin = admin_client(settings.source)
        self.source_cluster_id = str(cluster_metadata(source_admin).cluster_id)
        self.discovery = TopicDiscovery(
            settings,
            records,
            source_admin,
            admin_client(settings.destination),
            staging.destination_defaults,
        )
        self._discovery_thread = DiscoveryThread(self.discovery.refresh, DISCOVERY_INTERVAL_S)
        self._group = settings.names.replicator_group  # named if a read is refused
        self.lanes: dict[tuple[str, int], Lane] = {}
        self._fatal: KafkaError | None = None
        self._refused: NotAuthorizedError | None = None  # a read refused: stop, naming it
        self._max_envelope = staging.max_message_bytes - PRODUCE_OVERHEAD
        self._budget = min(settings.envelope_max_bytes, self._max_envelope)
        config = consumer_config(self.settings, self._on_consumer_error)
        self.consumer = Consumer(config)
        self._unassigned = AssignmentWatch(
            "source", self._group, consumer_group_protocol=on_consumer_group_protocol(config)
        )
        self.session = StagingSession(settings, staging, metrics, self.lanes)
        self._subscribed: list[str] = []
        self._abandoning = False
        self._fenced_joins = FencedJoins("source consumer")

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> None:
        """Copy until asked to stop, then drain. On the way out of a failure the consumer is
        closed here rather than by the interpreter's exit: once in CI a stage that had logged
        its fatal error (a refused CREATE) died of SIGSEGV instead of exiting 1, and clients
        left running into the exit are the likely cause (not reproduced since)."""
        try:
            try:
                self._copy()
            except BaseException:
                self._abandon()
                raise
            self._drain()
        finally:
            # Told to stop when the copy ended, a round under way ran out meanwhile; joined so
            # that no thread uses the admin clients while the process destroys them.
            self._discovery_thread.join(DISCOVERY_JOIN_S)

    def _copy(self) -> None:
        # Start-up's round runs here, its errors stopping start-up with their own line and
        # status (a collision the flow has not met: exit 2); every later one on its own thread.
        found = self.discovery.refresh()
        if found is not None:
            self._apply(found)
        self._discovery_thread.start()
        try:
            self._copy_until_stopped()
        finally:
            self._discovery_thread.stop()

    def _copy_until_stopped(self) -> None:
        next_lag = time.monotonic() + DISCOVERY_INTERVAL_S
        next_commit = next_watchdog = time.monotonic()
        while not self._should_stop():
            self._beat()
            # What is at hand, at once: an envelope closes when the source has nothing more
            # ready, never after waiting for a batch to fill.
            messages = consume_ready(self.consumer, CONSUME_BATCH, CONSUME_TIMEOUT_S)
            if messages:
                self._replicate(messages)
            self.session.serve()
            refused = self.session.refused or self._refused
            if refused is not None:
                raise refused
            if self._fatal is not None:
                if not member_fenced(self._fatal):
                    raise KafkaException(self._fatal)
                self._join_again(self._fatal)
                continue
            found = self._discovery_thread.take()  # at once; raises what ended the thread
            if found is not None:
                self._apply(found)
            if self.session.error is not None:
                self._end_session()
                continue
            now = time.monotonic()
            if now >= next_watchdog:
                self.session.watch_for_stall(now)
                self._unassigned.check()
                next_watchdog = now + WATCHDOG_INTERVAL_S
            if now >= next_commit:
                self._commit(Why.PERIODIC)
                next_commit = now + COMMIT_INTERVAL_S
            if now >= next_lag:
                self.metrics.update_lag(self.consumer, self.lanes.values())
                next_lag = now + DISCOVERY_INTERVAL_S

    def _replicate(self, messages: list[Message]) -> None:
        # Lazily: a run is shipped as soon as it is cut, before the next row is made, so a lane
        # its envelope stopped (or a session it ended) takes no more rows of this batch.
        rows = self._rows(messages)
        for key, run in cut_runs(rows, self.settings.envelope_max_records, self._budget):
            self._ship(self.lanes[key], run)

    def _rows(self, messages: list[Message]) -> Iterator[tuple[tuple[str, int], RecordRow, int]]:
        for message in messages:
            error = message.error()
            if error is not None:
                fenced = on_message_error(
                    self.consumer, self.metrics, self.lanes, self._group, message, error
                )
                self._fatal = self._fatal or fenced
                continue
            key = (message.topic(), message.partition())
            lane = self.lanes.get(key)
            if lane is None or lane.stopped:
                # Revoked or stopped meanwhile: its commit point does not move, so nothing of
                # it is lost; whoever owns it next reads it again.
                continue
            row, size = row_of(message)
            yield key, row, size  # a plain tuple: starred unpacking costs more per record

    def _ship(self, lane: Lane, run: Run) -> None:
        if lane.stopped or self.session.error is not None:
            return  # the session restart rewinds this lane to its commit point
        covers = run.rows[-1][0]
        rows, size = without_copies(run)  # loop prevention (replicator/copies.py)
        if len(rows) < len(run.rows):
            count_passed_over(self.metrics, lane, len(run.rows) - len(rows))
            if not rows:
                lane.passed_over(covers, time.monotonic())
                return
        self._send(lane, rows, covers, size)

    def _send(self, lane: Lane, rows: list[RecordRow], covers: int, size: int) -> None:
        """Envelope ``rows`` (``size`` bytes, estimated) and produce it; the records and bytes
        counters count it when staging acknowledges it (StagingSession.send)."""
        data = encode_rows(
            self.source_cluster_id,
            lane.topic,
            lane.topic_id,
            lane.partition,
            lane.prev_offset,
            tuple(rows),
        )
        if len(data) > self._max_envelope:
            if len(rows) == 1:
                stop_too_large(
                    self.consumer, self.metrics, lane, self.staging, len(data), rows[0][0]
                )
                return
            # The size estimate was short (many small headers): halve and send in order.
            half = len(rows) // 2
            first = sum(estimated_size(row) for row in rows[:half])
            self._send(lane, rows[:half], rows[half - 1][0], first)
            if not lane.stopped:
                self._send(lane, rows[half:], covers, size - first)
            return
        self.session.send(lane, data, rows[-1][0], covers, len(rows), size)

    def _on_consumer_error(self, error: KafkaError) -> None:
        self._refused = self._refused or consumer_refusal(error, self._group)
        if error.fatal():
            # The loop stops on it, unless our static member was fenced: it joins again then.
            self._fatal = error
        report_client_error(self.metrics, "source", error)

    # -- commits ------------------------------------------------------------------------------

    def _commit(
        self, why: Why, lanes: Collection[Lane] | None = None, *, flush_s: float = 0.0
    ) -> None:
        """Stage 1's commit protocol: the source offsets it commits cover exactly the records
        whose envelopes staging acknowledged. The one place a source offset is committed.

        1. Settle the producer as the moment needs (invariant 3: only acknowledged envelopes
           count). PERIODIC serves the acknowledgements received so far. HANDOVER (a revoke,
           the drain) waits up to ``flush_s`` for every envelope in flight: the next owner
           starts exactly after them. SESSION_END drops them, and the old producer's late
           reports are ignored (invariant 2: an envelope is never retried alone; its records
           are read again).
        2. Take each lane's committable offset: `Lane.acknowledged` moves it over a prefix of
           acknowledged envelopes only (invariant 3), and only forward.
        3. Commit those offsets to the source group. A commit that fails leaves the group at
           its old point and those records are read again (invariant 3: a commit may lag the
           acknowledgements, never lead them; the duplicates it makes in staging are stage 2's
           to drop). A PERIODIC commit is asynchronous and unanswered here: the lane counts it
           as committed at once, so a lane that does not move again is not committed again at
           a handover, and its successor reads from the older point (duplicates, never a gap).
        4. SESSION_END: rewind every running lane to its commit point and start a new chain
           (`prev_offset` None) on a new producer (invariant 2: within a session a lane's
           envelopes chain without a gap; stage 2 trusts no chain across sessions).
        """
        lanes = self.lanes.values() if lanes is None else lanes
        if why is Why.HANDOVER:  # step 1
            remaining = self.session.serve(flush_s, flush=True)
            if remaining:
                log.warning("envelopes unacknowledged; they will be read again", count=remaining)
        elif why is Why.SESSION_END:
            self.session.drop()  # the old producer's late reports no longer touch any lane
        else:
            self.session.serve()
        moved = [  # step 2
            lane for lane in lanes if lane.committable >= 0 and lane.committable > lane.committed
        ]
        if moved:  # step 3
            # Each offset names the topic id its lane read (invariant 7): a lane still reading
            # under the old id when its topic was deleted and recreated (the client follows the
            # name) commits onto the new topic, and the next assignment must not take that
            # offset for the new topic's (replicator.assignment.own_offsets).
            offsets = [
                TopicPartition(
                    ln.topic, ln.partition, ln.committable, metadata=commit_metadata(ln.topic_id)
                )
                for ln in moved
            ]
            try:
                self.consumer.commit(offsets=offsets, asynchronous=why is Why.PERIODIC)
            except KafkaException as exc:
                log.warning("commit failed", error=kafka_error_of(exc).str())
            else:
                for lane, offset in zip(moved, offsets, strict=True):
                    lane.committed = offset.offset
        if why is Why.SESSION_END:  # step 4
            for lane in lanes:
                lane.new_session()
                if not lane.stopped:
                    position = TopicPartition(lane.topic, lane.partition, lane.committable)
                    self.consumer.seek(position)
            self.session.producer = self.session.new_producer()

    def _end_session(self) -> None:
        """ANY delivery error, a produce error or a stall ends the session (invariant 2)."""
        reason = self.session.error or "unknown"
        self.metrics.session_restarts.labels(reason.split(":")[0]).inc()
        self._commit(Why.SESSION_END)
        self.session.error = None
        log.warning("stage-1 session restarted", reason=reason, session=self.session.number)

    # -- partitions ---------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._unassigned.given(len(partitions))
        start_from = self.settings.start_from
        committed, found, starts = read_assigned(
            consumer, partitions, self.discovery, self._beat, start_from, self.started_at_ms
        )
        lanes = new_lanes(committed, found, starts, start_from, self.staging.partitions)
        for lane in lanes:
            self.lanes[(lane.topic, lane.partition)] = lane
        consumer.incremental_assign(
            [TopicPartition(lane.topic, lane.partition, lane.committable) for lane in lanes]
        )
        hold_recreated(self.consumer, self.metrics, lanes, found)
        self.metrics.assigned_partitions.set(len(self.lanes))
        log.info("partitions assigned", count=len(lanes), total=len(self.lanes))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = [
            self.lanes[k] for tp in partitions if (k := (tp.topic, tp.partition)) in self.lanes
        ]
        if not self._abandoning:
            self._commit(Why.HANDOVER, revoked, flush_s=REBALANCE_FLUSH_S)
        for lane in revoked:
            del self.lanes[(lane.topic, lane.partition)]
            self.metrics.forget(lane)
        consumer.incremental_unassign(partitions)
        self.metrics.assigned_partitions.set(len(self.lanes))
        log.info("partitions revoked", count=len(revoked), total=len(self.lanes))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        lose(consumer, partitions, self.lanes, self.metrics)

    def _join_again(self, fenced: KafkaError) -> None:
        """The group coordinator fenced our static member: most often by our own later join,
        after a coordinator moved (runtime.member_fenced). The consumer is fatal for good: end
        both clients as on a fatal error and join with a new consumer of the same
        group.instance.id. Each partition it gets starts from its committed offset (_on_assign):
        what was copied since is read again, and stage 2 drops the duplicates. A live twin
        fences us again and again: then exit as fenced (runtime.fenced_joins)."""
        self._fenced_joins.count(fenced)
        self.metrics.session_restarts.labels("fenced").inc()
        # No commit (a fenced member cannot): invariant 3 needs none, the commit points never
        # lead the acknowledgements. The released producer's late reports touch no lane.
        self._abandon()
        self._abandoning = False  # the new consumer's revokes commit their handover again
        drop_all(self.lanes, self.metrics)
        # What the old clients left (the fenced error, the purged producer's gap) ended with them.
        self._fatal = self.session.error = None
        self.consumer = Consumer(consumer_config(self.settings, self._on_consumer_error))
        self.session.producer = self.session.new_producer()
        topics, self._subscribed = self._subscribed, []
        self._subscribe(topics)  # the new consumer's own subscription, to the same topics

    # -- topics -------------------------------------------------------------------------------

    def _apply(self, found: Discovered) -> None:
        """A finished discovery round, in the loop's own thread (the consumer, the lanes and the
        gauges are the loop's): the policy for recreated topics first, so that no lane of one
        copies another record, then the subscription and the left-out gauge."""
        hold_recreated(self.consumer, self.metrics, self.lanes.values(), found)
        self._subscribe(sorted(found.topics))
        self.metrics.count_left_out(found.left_out)

    def _subscribe(self, names: list[str]) -> None:
        if names == self._subscribed:
            return
        if names:
            self.consumer.subscribe(
                names, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
            log.info("subscribed", topics=",".join(names))
            self._unassigned.subscribed(len(self.lanes))
        else:
            self.consumer.unsubscribe()
            self._unassigned.unsubscribed()
            log.warning("no source topic matches the configured topics; waiting")
        self._subscribed = names

    # -- shutdown -----------------------------------------------------------------------------

    def _abandon(self) -> None:
        """A fatal error: close without committing. The commit points stay where the last
        commit left them (invariant 3 holds: they never lead the acknowledgements), and the
        restart reads the rest again."""
        self._abandoning = True
        self.session.release()
        with contextlib.suppress(KafkaException, RuntimeError):
            self.consumer.close()

    def _drain(self) -> None:
        """SIGTERM: stop fetching, wait for acknowledgements, commit them, leave the group."""
        log.info("draining", lanes=len(self.lanes))
        self._commit(Why.HANDOVER, flush_s=DRAIN_FLUSH_S)
        self.consumer.close()
        self.session.release()  # what the flush left unacknowledged is read again
        log.info("drained")

"""Reading a few records of many partitions of one cluster at once, read_committed: what offset
translation needs from each side in one sync cycle.

A sync cycle translates hundreds of committed offsets (50 groups x 12 partitions). Reading them
one partition at a time costs a round trip each; here every partition of a cycle is assigned to
one consumer and read together, each driven by a ``Cursor`` that decides, record by record,
whether it has what it needs, wants to read on, or wants to jump ahead (a seek).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from offsetsync.errors import ReadTimeoutError
from runtime import (
    LIBRDKAFKA_LOG,
    ErrorClass,
    PartitionAnswer,
    classify,
    kafka_error_of,
    partition_answer,
)
from runtime.topics import admin_result

# (topic, partition)
Key = tuple[str, int]

KEEP = None  # Cursor.take: read on
STOP = -1  # Cursor.take: this partition has what it needs

_TIMEOUT_S = 30.0
_BATCH = 500
# consume() waits for a full batch or this long: short, because a cycle's reads are small and
# its partitions finish at different times.
_POLL_S = 0.01


class Bounds(dict[Key, tuple[int, int]]):
    """Log start and last stable offset of each partition that could be asked; ``unavailable``:
    the partitions that could not be (no leader, or a retriable error of their own), each with
    why; ``stale``: those of them whose answer says this client's idea of their leader is out
    of date (a new client mends that: offsetsync.loop). A partition in none does not exist."""

    def __init__(
        self,
        found: Mapping[Key, tuple[int, int]],
        unavailable: Mapping[Key, str],
        stale: Collection[Key] = (),
    ) -> None:
        super().__init__(found)
        self.unavailable = dict(unavailable)
        self.stale = set(stale)


class Cursor(Protocol):
    def take(self, message: Message) -> int | None:
        """KEEP, STOP, or the offset to seek to (always forward)."""

    def end(self) -> None:
        """The range ended before the cursor stopped."""


class ClusterReader:
    """Reads ranges of many partitions of one cluster, read_committed; it never commits."""

    def __init__(
        self,
        client_config: Mapping[str, str],
        admin: AdminClient,
        *,
        cluster: str = "cluster",
        stats_cb: Callable[[str], None] | None = None,
    ) -> None:
        self._config: dict[str, object] = {
            **client_config,
            "group.id": "exactly-offsetsync-reader",  # assign() only, never commits
            "enable.auto.commit": False,
            # Never beyond what stage 2 has committed: aborted and open transactions are not
            # there for this reader, so a translation never points into them.
            "isolation.level": "read_committed",
            # A position outside the log (retention moved meanwhile) is an error for this cycle
            # to report, never a silent jump to either end.
            "auto.offset.reset": "error",
            # A range that ends in transaction markers returns no record; learn so at once.
            "fetch.wait.max.ms": 10,
            # The fetch state of a partition that stops moving names the cause (_describe_stuck).
            "statistics.interval.ms": 1000,
            "stats_cb": self._keep_stats,
            # A broker out of reach: one warning with a count, not a line per attempt.
            "logger": LIBRDKAFKA_LOG,
        }
        self._cluster = cluster
        self._stats_cb = stats_cb
        self._last_stats: dict[str, Any] = {}
        self._consumer = Consumer(self._config)
        self._admin = admin
        self._paused: list[TopicPartition] = []

    def _keep_stats(self, stats: str) -> None:
        with contextlib.suppress(ValueError):
            self._last_stats = json.loads(stats)
        if self._stats_cb is not None:
            self._stats_cb(stats)

    def close(self) -> None:
        self._consumer.close()

    def serve_callbacks(self) -> None:
        """Deliver queued statistics; between reads nothing else would, and they pile up."""
        self._consumer.poll(0)

    def bounds(self, keys: Collection[Key]) -> Bounds:
        """Log start and last stable offset of each partition; a partition that does not exist
        (a topic not yet created on the destination) is left out, and one that could not be
        asked this time (no leader) is ``unavailable``: one partition's trouble is not every
        partition's (the caller leaves it for the next cycle)."""
        if not keys:
            return Bounds({}, {})
        unavailable: dict[Key, str] = {}
        stale: set[Key] = set()
        low = self._list_offsets(keys, OffsetSpec.earliest(), unavailable, stale)
        # Only what the first lookup found: the others are not there, or not to be read now.
        high = (
            self._list_offsets(low.keys(), OffsetSpec.latest(), unavailable, stale) if low else {}
        )
        found = {
            key: (low[key], high[key]) for key in low.keys() & high.keys() if key not in unavailable
        }
        return Bounds(found, unavailable, stale)

    def offsets_for_times(self, timestamps: Mapping[Key, int]) -> dict[Key, int]:
        """The first offset of each partition whose timestamp is at or after the one given;
        -1 where there is none."""
        if not timestamps:
            return {}
        found = self._consumer.offsets_for_times(
            [TopicPartition(t, p, ms) for (t, p), ms in timestamps.items()], timeout=_TIMEOUT_S
        )
        answers = {}
        for tp in found:
            if tp.error:
                raise KafkaException(tp.error)
            answers[(tp.topic, tp.partition)] = tp.offset
        return answers

    def scan(self, ranges: Mapping[Key, tuple[int, int]], cursors: Mapping[Key, Cursor]) -> None:
        """Feed each partition's readable records from ``start`` towards ``end`` (exclusive) to
        its cursor until it stops or the range ends (then ``Cursor.end``)."""
        active = {}
        for key, (start, end) in ranges.items():
            if start < end:
                active[key] = start
            else:
                cursors[key].end()
        if not active:
            return
        ends = {key: ranges[key][1] for key in active}
        self._consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in active.items()])
        deadline = time.monotonic() + _TIMEOUT_S
        try:
            while active:
                for message in self._consumer.consume(_BATCH, timeout=_POLL_S):
                    if message.error():
                        raise KafkaException(message.error())
                    key = (message.topic(), message.partition())
                    if key in active:
                        self._feed(key, message, cursors[key], ends[key], active)
                self._finish_ended(active, ends, cursors)
                if active and time.monotonic() > deadline:
                    stuck = self._describe_stuck(active, ends)
                    self._replace_consumer()
                    raise ReadTimeoutError(
                        f"{self._cluster}: partitions not read to their end in "
                        f"{_TIMEOUT_S:.0f} s: {stuck}"
                    )
        finally:
            # A pause outlives unassign(): resume, or the next scan of a partition reads nothing.
            if self._paused:
                self._consumer.resume(self._paused)
                self._paused = []
            self._consumer.unassign()

    def _feed(
        self, key: Key, message: Message, cursor: Cursor, end: int, active: dict[Key, int]
    ) -> None:
        if message.offset() >= end:
            cursor.end()
            self._done(key, active)
            return
        step = cursor.take(message)
        if step is KEEP:
            return
        if step == STOP:
            self._done(key, active)
        elif step >= end:
            cursor.end()
            self._done(key, active)
        else:
            self._consumer.seek(TopicPartition(key[0], key[1], step))
            active[key] = step

    def _finish_ended(
        self, active: dict[Key, int], ends: Mapping[Key, int], cursors: Mapping[Key, Cursor]
    ) -> None:
        """Partitions whose position reached the end without a record there: the rest of
        their range is transaction markers or aborted records."""
        if not active:
            return
        for tp in self._consumer.position([TopicPartition(t, p) for t, p in active]):
            key = (tp.topic, tp.partition)
            # Before its first record a partition's position may be invalid (negative).
            if tp.offset >= ends[key]:
                cursors[key].end()
                self._done(key, active)

    def _describe_stuck(self, active: Mapping[Key, int], ends: Mapping[Key, int]) -> str:
        """Each unfinished partition with its position, its range's end and librdkafka's fetch
        state: what an operator needs to tell a slow broker from a stuck fetcher."""
        try:
            positions = {
                (tp.topic, tp.partition): tp.offset
                for tp in self._consumer.position([TopicPartition(t, p) for t, p in active])
            }
        except KafkaException:
            positions = {}
        topics = self._last_stats.get("topics", {})

        def fetch_state(topic: str, partition: int) -> str:
            found = topics.get(topic, {}).get("partitions", {}).get(str(partition), {})
            return f"{found.get('fetch_state', '?')}, leader {found.get('leader', '?')}"

        return ", ".join(
            f"{t}[{p}] at {positions.get((t, p), '?')} of {ends[(t, p)]} ({fetch_state(t, p)})"
            for t, p in sorted(active)
        )

    def _replace_consumer(self) -> None:
        """A scan that timed out leaves a fetcher the next cycle must not trust (seen after
        broker restarts: partitions that never fetched again): start the next on a new one."""
        old, self._consumer = self._consumer, Consumer(self._config)
        self._paused = []
        with contextlib.suppress(KafkaException, RuntimeError):
            old.close()

    def _done(self, key: Key, active: dict[Key, int]) -> None:
        del active[key]
        # Stop fetching it; the others read on.
        paused = TopicPartition(*key)
        self._consumer.pause([paused])
        self._paused.append(paused)

    def _list_offsets(
        self,
        keys: Collection[Key],
        spec: OffsetSpec,
        unavailable: dict[Key, str],
        stale: set[Key],
    ) -> dict[Key, int]:
        """The offsets of ``keys`` at ``spec``; a partition that could not be asked goes to
        ``unavailable`` with why. Raised: a fatal error, or a retriable one of every partition
        asked (the cluster or the client, not a partition: the cycle fails, and failed cycles
        make the clients anew)."""
        futures = self._admin.list_offsets(
            {TopicPartition(t, p): spec for t, p in keys},
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=_TIMEOUT_S,
        )
        offsets = {}
        failed: dict[Key, KafkaException] = {}
        no_leader_found: list[Key] = []
        # One deadline of our own for them all: librdkafka leaves a request to a broker that left
        # the cluster unanswered (offsetsync.groups.states).
        deadline = time.monotonic() + _TIMEOUT_S + 2
        for tp, future in futures.items():
            key = (tp.topic, tp.partition)
            try:
                answer = admin_result(future, max(0.0, deadline - time.monotonic()))
                offsets[key] = answer.offset
            except KafkaException as exc:
                error = kafka_error_of(exc)
                answer_of = partition_answer(error)
                if answer_of is PartitionAnswer.ABSENT:
                    continue  # its requests wait (destination) or are skipped
                if error.code() == KafkaError._NOENT:
                    # librdkafka's answer for every partition when not one of those asked has a
                    # leader: a topic not created yet alone says so too.
                    no_leader_found.append(key)
                elif answer_of in (PartitionAnswer.NO_LEADER, PartitionAnswer.STALE_LEADER):
                    # Left for the next cycle, whatever the others answered; a stale leader
                    # then fails the cycle, so that failed cycles make the clients anew.
                    unavailable[key] = error.str()
                    if answer_of is PartitionAnswer.STALE_LEADER:
                        stale.add(key)
                elif classify(error) is ErrorClass.RETRIABLE:
                    failed[key] = exc
                else:
                    raise
        if failed and not offsets and len(failed) == len(futures):
            raise next(iter(failed.values()))
        unavailable.update((key, kafka_error_of(exc).str()) for key, exc in failed.items())
        if no_leader_found:
            unavailable.update(self._without_leader(no_leader_found))
        return offsets

    def _without_leader(self, keys: Collection[Key]) -> dict[Key, str]:
        """Which of ``keys`` (librdkafka found no leader for any of them) exist without a leader:
        the cluster's metadata tells them from partitions not there (those are left out)."""
        topics = self._admin.list_topics(timeout=_TIMEOUT_S).topics
        found = {}
        for topic, partition in keys:
            metadata = topics.get(topic)
            if metadata is not None and partition in metadata.partitions:
                found[(topic, partition)] = "partition leader not available (no leader found)"
        return found

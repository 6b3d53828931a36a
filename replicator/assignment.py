"""The lanes of the source partitions this instance owns: where newly assigned partitions start
(their committed offsets, their topics' descriptions), and the lanes dropped when they go.

A partition never committed starts where REPLICATION_START_FROM says, pinned to a real offset:
``earliest`` at its first record, ``latest`` at the first record its source took after the flow
first started (recorded once in the flow's meta topic). So ``latest`` skips only history: a
partition or topic that appears later is copied whole, not from when stage 1 first met it.
An error reading a committed offset is never taken for "never committed": that would re-read or,
with ``latest``, skip.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from replicator.discovery import Discovered, TopicDiscovery
from replicator.lanes import Lane, committed_topic_id, lane_of
from replicator.metrics import ReplicatorMetrics
from runtime import call_retrying, get_logger

# The copy loop's logger: these lines were the loop's, and a log query selects on its logger name.
log = get_logger("replicator.loop")

REBALANCE_FLUSH_S = 10.0  # bounded: a rebalance callback must never hang the group
# How long an assignment waits for its committed offsets and topic descriptions while the
# source cannot answer; with one 30 s admin call in flight at the deadline, within the loop's
# liveness bound (runtime.role.LOOP_SILENCE_S) and the consumer's max.poll.interval.ms.
ASSIGN_PATIENCE_S = 60.0


# The start offsets of never-committed partitions, by (topic, partition).
Starts = dict[tuple[str, int], int]


def read_assigned(
    consumer: Consumer,
    partitions: list[TopicPartition],
    discovery: TopicDiscovery,
    beat: Callable[[], None],
    start_from: str,
    started_at_ms: int,
) -> tuple[list[TopicPartition], Discovered, Starts]:
    """The committed offsets of newly assigned partitions, their topics' descriptions and where
    the never-committed ones start, waited for up to ASSIGN_PATIENCE_S."""
    # A source broker dead or cut off right then is waited out here, as at start-up: ending
    # the process instead (exactly chaos --nodes 3 saw stage 1 exit 1 on "no answer in 30
    # s") only meets the same cluster again after a restart, and under an orchestrator's
    # growing back-off.

    def waiting(error: KafkaError) -> None:
        beat()  # waiting on the cluster, bounded: not a loop that stopped turning
        log.warning("assigned partitions not readable yet; retrying", error=error.str())

    def assigned() -> tuple[list[TopicPartition], Discovered, Starts]:
        committed = consumer.committed(partitions, timeout=REBALANCE_FLUSH_S)
        for tp in committed:
            if tp.error is not None:
                # Taking it for "never committed" would re-read or, with `latest`, skip: asked
                # again (a retriable error) or the process stops, and its restart asks again.
                raise KafkaException(tp.error)
        found = discovery.describe({tp.topic for tp in committed})
        committed = own_offsets(committed, found)
        fresh = [tp for tp in committed if tp.offset < 0]
        starts = start_offsets(consumer, fresh, start_from, started_at_ms)
        return committed, found, starts

    return call_retrying(assigned, deadline_s=ASSIGN_PATIENCE_S, on_retry=waiting)


def own_offsets(committed: list[TopicPartition], found: Discovered) -> list[TopicPartition]:
    """The committed offsets, each of the topic now under its name: one whose metadata names
    another topic id (``replicator.lanes.commit_metadata``) was committed by a lane that read an
    earlier topic of that name, deleted and recreated since, and is taken for "never
    committed". Invariant 7: read from it, the new topic's records below it were skipped
    unseen (Kafka deletes a deleted topic's offsets, but a lane still assigned under the old id
    commits its positions onto the new topic, which the client follows by name)."""
    own = []
    for tp in committed:
        topic = found.topics.get(tp.topic)
        marked = committed_topic_id(tp.metadata)
        if tp.offset >= 0 and topic is not None and marked not in (None, topic.topic_id.hex()):
            log.warning(
                "committed offset is of an earlier topic of this name; not read from",
                topic=tp.topic,
                partition=tp.partition,
                offset=tp.offset,
                committed_topic_id=marked,
                topic_id=topic.topic_id.hex(),
            )
            tp = TopicPartition(tp.topic, tp.partition, OFFSET_INVALID)
        own.append(tp)
    return own


def start_offsets(
    consumer: Consumer, fresh: list[TopicPartition], start_from: str, started_at_ms: int
) -> Starts:
    """Where never-committed partitions start, as real offsets: a session restart rewinds to
    them, where the logical "end" would skip what came since."""
    if start_from == "earliest":
        return {(tp.topic, tp.partition): int(OFFSET_BEGINNING) for tp in fresh}
    # The ends are asked first: a record appended after that is at or past its end, so neither
    # answer can pass over it. A partition with no record since the flow started starts at its
    # end; one whose first such record lies past the end (taken since) starts at the end too.
    ends = _offsets_at(consumer, fresh, int(OFFSET_END))
    since = _offsets_at(consumer, fresh, started_at_ms)
    return {
        where: min(since[where], end) if since[where] >= 0 else end for where, end in ends.items()
    }


def _offsets_at(consumer: Consumer, partitions: list[TopicPartition], timestamp: int) -> Starts:
    """The first offset at or after ``timestamp`` (OFFSET_END: the end) of each partition, in
    one request per leader; -1 where no record is that recent."""
    if not partitions:
        return {}
    query = [TopicPartition(tp.topic, tp.partition, timestamp) for tp in partitions]
    answered = consumer.offsets_for_times(query, timeout=REBALANCE_FLUSH_S)
    for tp in answered:
        if tp.error is not None:
            raise KafkaException(tp.error)  # asked again by read_assigned while retriable
    return {(tp.topic, tp.partition): tp.offset for tp in answered}


def new_lanes(
    committed: list[TopicPartition],
    found: Discovered,
    starts: Starts,
    start_from: str,
    staging_partitions: int,
) -> list[Lane]:
    """A lane for each assigned partition whose topic is still there, starting at its committed
    offset or, never committed, where ``start_from`` says."""
    lanes = []
    fresh: dict[str, list[int]] = {}
    for tp in committed:
        topic = found.topics.get(tp.topic)
        if topic is None:
            log.warning("assigned a topic that is gone", topic=tp.topic, partition=tp.partition)
            continue
        if tp.offset >= 0:
            start = tp.offset
        else:
            start = starts[(tp.topic, tp.partition)]
            fresh.setdefault(tp.topic, []).append(tp.partition)
        lanes.append(
            Lane(
                topic=tp.topic,
                partition=tp.partition,
                staging_partition=lane_of(tp.topic, tp.partition, staging_partitions),
                topic_id=topic.topic_id,
                committable=start,
                committed=tp.offset,
            )
        )
    if fresh:
        # One line per assignment, not per partition: a first start on 6,000 partitions
        # logged 6,000 lines (issue 34).
        log.info(
            "no committed offset",
            start_from=start_from,
            count=sum(len(partitions) for partitions in fresh.values()),
            partitions=_named(fresh),
        )
    return lanes


def _named(partitions: dict[str, list[int]], topics: int = 10) -> str:
    """``topic[0,1,2] ...`` for the first ``topics`` topics, then how many more."""
    named = [f"{t}[{','.join(map(str, sorted(ps)))}]" for t, ps in sorted(partitions.items())]
    more = f" and {len(named) - topics} more topics" if len(named) > topics else ""
    return " ".join(named[:topics]) + more


def lose(
    consumer: Consumer,
    partitions: list[TopicPartition],
    lanes: MutableMapping[tuple[str, int], Lane],
    metrics: ReplicatorMetrics,
) -> None:
    """Partitions lost: the group moved on without us, so committing is no longer ours to do."""
    for tp in partitions:
        lane = lanes.pop((tp.topic, tp.partition), None)
        if lane is not None:
            metrics.forget(lane)
    consumer.incremental_unassign(partitions)
    log.warning("partitions lost", count=len(partitions))


def drop_all(lanes: MutableMapping[tuple[str, int], Lane], metrics: ReplicatorMetrics) -> None:
    """Every lane gone at once, with its metrics: the consumer that owned them is closed."""
    for lane in lanes.values():
        metrics.forget(lane)
    lanes.clear()
    metrics.assigned_partitions.set(0)

"""The lanes of the source partitions this instance owns: where newly assigned partitions start
(their committed offsets, their topics' descriptions), and the lanes dropped when they go.

A partition never committed starts where REPLICATION_START_FROM says, pinned to a real offset.
An error reading a committed offset is never taken for "never committed": that would re-read or,
with ``latest``, skip.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from replicator.discovery import Discovered, TopicDiscovery
from replicator.lanes import Lane, lane_of
from replicator.metrics import ReplicatorMetrics
from runtime import call_retrying, get_logger

# The copy loop's logger: these lines were the loop's, and a log query selects on its logger name.
log = get_logger("replicator.loop")

REBALANCE_FLUSH_S = 10.0  # bounded: a rebalance callback must never hang the group
# How long an assignment waits for its committed offsets and topic descriptions while the
# source cannot answer; with one 30 s admin call in flight at the deadline, within the loop's
# liveness bound (runtime.role.LOOP_SILENCE_S) and the consumer's max.poll.interval.ms.
ASSIGN_PATIENCE_S = 60.0


def read_assigned(
    consumer: Consumer,
    partitions: list[TopicPartition],
    discovery: TopicDiscovery,
    beat: Callable[[], None],
) -> tuple[list[TopicPartition], Discovered]:
    """The committed offsets of newly assigned partitions and their topics' descriptions,
    waited for up to ASSIGN_PATIENCE_S."""
    # A source broker dead or cut off right then is waited out here, as at start-up: ending
    # the process instead (exactly chaos --nodes 3 saw stage 1 exit 1 on "no answer in 30
    # s") only meets the same cluster again after a restart, and under an orchestrator's
    # growing back-off.

    def waiting(error: KafkaError) -> None:
        beat()  # waiting on the cluster, bounded: not a loop that stopped turning
        log.warning("assigned partitions not readable yet; retrying", error=error.str())

    return call_retrying(
        lambda: _assigned(consumer, partitions, discovery),
        deadline_s=ASSIGN_PATIENCE_S,
        on_retry=waiting,
    )


def _assigned(
    consumer: Consumer, partitions: list[TopicPartition], discovery: TopicDiscovery
) -> tuple[list[TopicPartition], Discovered]:
    """The committed offsets of newly assigned partitions and their topics' descriptions."""
    committed = consumer.committed(partitions, timeout=REBALANCE_FLUSH_S)
    for tp in committed:
        if tp.error is not None:
            # Taking it for "never committed" would re-read or, with `latest`, skip: asked
            # again (a retriable error) or the process stops, and its restart asks again.
            raise KafkaException(tp.error)
    return committed, discovery.describe({tp.topic for tp in committed})


def new_lanes(
    consumer: Consumer,
    committed: list[TopicPartition],
    found: Discovered,
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
            start = _start_offset(consumer, tp, start_from)
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


def _start_offset(consumer: Consumer, tp: TopicPartition, start_from: str) -> int:
    """Where a never-committed partition starts. `latest` is pinned to a real offset now:
    a session restart rewinds to it, where the logical "end" would skip what came since."""
    if start_from == "earliest":
        return int(OFFSET_BEGINNING)
    _low, high = consumer.get_watermark_offsets(
        TopicPartition(tp.topic, tp.partition), timeout=REBALANCE_FLUSH_S
    )
    return int(high)


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

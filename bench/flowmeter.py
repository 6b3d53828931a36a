"""Measuring a replication from the outside, the same way whatever runs it (our pipeline, a plain
loop, MirrorMaker 2): end offsets of topics, when the last source record of every partition is
visible to a read_committed consumer of the destination, paced production with the production
time in each record, the latency of each record to the destination, and recovery after a kill.

Nothing here reads every destination record to know that a copy is complete: on a 2-core
machine that consumer would take CPU from what is measured. A copy is complete when, in every
partition, the source's last record (its key) is visible under read_committed: records arrive in
order within a partition, so the last one visible means all before it are.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from confluent_kafka import Consumer, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from bench.common import jit_seconds_between, jit_thread_seconds, process_cpu_seconds
from localkafka import process_tree

TICK_S = 0.1
PROBED_PARTITIONS = 240


# -- offsets ----------------------------------------------------------------------------------


class EndOffsets:
    """Per-partition end offsets of topics, one ListOffsets request per call for all of them.

    `committed=True` asks for the last stable offset (what read_committed consumers can read,
    transaction markers included), otherwise the high watermark. A partition that cannot be
    answered (topic not created yet, leader moving) keeps its last known value, 0 at first.
    """

    def __init__(self, bootstrap: str, topics: Sequence[tuple[str, int]], *, committed: bool):
        self._config = {"bootstrap.servers": bootstrap}
        self._admin = AdminClient(self._config)
        self._partitions = [TopicPartition(t, p) for t, n in topics for p in range(n)]
        self._level = (
            IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        )
        self.last: dict[tuple[str, int], int] = {
            (tp.topic, tp.partition): 0 for tp in self._partitions
        }

    def fetch(self) -> dict[tuple[str, int], int]:
        try:
            futures = self._admin.list_offsets(
                {tp: OffsetSpec.latest() for tp in self._partitions},
                isolation_level=self._level,
                request_timeout=10,
            )
        except KafkaException:
            return self.last
        failed = False
        for tp, future in futures.items():
            try:
                self.last[(tp.topic, tp.partition)] = future.result().offset
            except KafkaException:
                failed = True
        if failed:
            # Seen here: a client that asked for a topic before it existed keeps answering
            # "unknown topic" for minutes after it was created, when asked together with a
            # known one. A new client looks the topic up again.
            self._admin = AdminClient(self._config)
        return self.last

    def total(self) -> int:
        return sum(self.fetch().values())


@dataclass(frozen=True)
class SourceTail:
    """What a complete copy shows: per partition, the record count and the last record's key."""

    counts: dict[int, int]
    last_keys: dict[int, bytes | None]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def source_tail(bootstrap: str, topic: str, partitions: int) -> SourceTail:
    """Read the last record of every partition of a topic written without transactions."""
    return source_tails(bootstrap, {topic: partitions})[topic]


def source_tails(bootstrap: str, topics: dict[str, int]) -> dict[str, SourceTail]:
    """source_tail of each topic (name -> partition count), with one consumer for them all."""
    ends = EndOffsets(bootstrap, list(topics.items()), committed=False).fetch()
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-tail", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(t, p, n - 1) for (t, p), n in ends.items() if n > 0])
    last: dict[tuple[str, int], bytes | None] = {}
    deadline = time.monotonic() + 30 + len(ends) / 100
    while len(last) < sum(1 for n in ends.values() if n > 0):
        if time.monotonic() > deadline:
            raise TimeoutError(f"could not read the last records of {sorted(topics)}")
        for message in consumer.consume(100, 0.5):
            if not message.error():
                last[(message.topic(), message.partition())] = message.key()
    consumer.close()
    return {
        topic: SourceTail(
            {p: ends[(topic, p)] for p in range(n)},
            {p: last[(topic, p)] for p in range(n) if (topic, p) in last},
        )
        for topic, n in topics.items()
    }


def _keys(bootstrap: str, topic: str, partitions: int, until: SourceTail) -> dict[int, list]:
    """Every key of every partition, in order, up to the partition's last source key."""
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-keys",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    reader.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    keys: dict[int, list] = {p: [] for p in range(partitions)}
    open_partitions = {p for p, n in until.counts.items() if n}
    deadline = time.monotonic() + 300
    try:
        while open_partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {sorted(open_partitions)} incomplete")
            for message in reader.consume(10000, 0.5):
                p = message.partition()
                if message.error() or p not in open_partitions:
                    continue
                keys[p].append(message.key())
                if message.key() == until.last_keys[p]:
                    open_partitions.discard(p)
    finally:
        reader.close()
    return keys


def exactly_once(
    source: str, topic: str, target: str, destination: str, partitions: int
) -> tuple[int, int, int]:
    """(records, missing, duplicated) of a finished copy, record by record: every partition's
    keys on the destination against the source's, as counts and in order."""
    tail = source_tail(source, topic, partitions)
    want = _keys(source, topic, partitions, tail)
    got = _keys(target, destination, partitions, tail)
    missing = duplicated = 0
    for p in range(partitions):
        wanted, written = Counter(want[p]), Counter(got[p])
        missing += sum((wanted - written).values())
        duplicated += sum((written - wanted).values())
        if wanted == written and got[p] != want[p]:
            missing += 1  # reordered: counted as a loss, never hidden
    return tail.total, missing, duplicated


# -- completion of a copy -----------------------------------------------------------------------


@dataclass
class RunTiming:
    """One copy, in time.monotonic() seconds and CPU seconds (utime + stime)."""

    launched: float
    first_output: float = 0.0  # the candidate's first record appended on the target
    destination_first: float = 0.0  # its first record appended on the destination
    all_visible: float = 0.0  # the last source record of every partition readable, committed
    cpu_role: float = 0.0  # the candidate's processes, between first output and all visible
    cpu_each: list[float] = field(default_factory=list)  # the same per process, in role_pids order
    cpu_brokers: float = 0.0  # both brokers, same interval
    cpu_brokers_jit: float = 0.0  # of which their JIT compiler threads
    notes: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.all_visible - self.first_output

    @property
    def startup(self) -> float:
        return self.first_output - self.launched


def cpu_seconds(pids: Sequence[int | None]) -> float:
    """CPU seconds of the processes and of their live descendants (a supervisor's workers)."""
    total = 0.0
    for pid in (each for root in pids if root is not None for each in process_tree(root)):
        try:
            total += process_cpu_seconds(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


class BrokerCpu(NamedTuple):
    """CPU seconds of the brokers, and each of their JIT compiler threads' by (pid, thread id):
    compared thread by thread (bench.common.jit_seconds_between)."""

    total: float
    jit: dict[tuple[int, int], float]


def broker_cpu_seconds(pids: Sequence[int | None]) -> BrokerCpu:
    jit: dict[tuple[int, int], float] = {}
    for pid in pids:
        if pid is None:
            continue
        try:
            jit |= {(pid, tid): s for tid, s in jit_thread_seconds(pid).items()}
        except (FileNotFoundError, ProcessLookupError):
            continue  # a broker that is gone, as cpu_seconds takes it
    return BrokerCpu(cpu_seconds(pids), jit)


def await_copies(
    target: str,
    copies: dict[str, SourceTail],
    *,
    first_output_topics: Sequence[tuple[str, int]],
    launched: float,
    role_pids: Callable[[], Sequence[int | None]],
    broker_pids: Sequence[int | None],
    check_alive: Callable[[], None],
    timeout_s: float,
) -> RunTiming:
    """Wait until every destination topic of ``copies`` (destination -> its source's tail) shows
    every source record to read_committed consumers.

    The clock starts at the candidate's first record appended anywhere on the target (its first
    output topics: staging for our pipeline, the destinations for the others), so start-up time
    (a JVM, group joins, topic creation) is reported apart and not in the rate. It stops when,
    in every partition, the source's last key is visible under read_committed: read from the
    offset it can at the earliest have (the record count), so only a few records are read.
    """
    timing = RunTiming(launched)
    destinations = [(topic, len(tail.counts)) for topic, tail in copies.items()]
    # The first destination record is looked for in every partition of a few, in the first
    # partition of each topic past that: at 6,000 partitions every look would list them all.
    probe = destinations
    if sum(n for _topic, n in destinations) > PROBED_PARTITIONS:
        probe = [(topic, 1) for topic, _n in destinations]
    first = EndOffsets(target, [*first_output_topics, *probe], committed=False)
    stable = EndOffsets(target, destinations, committed=True)
    reader = _completion_reader(target)
    tailing: set[tuple[str, int]] = set()
    done = {(t, p) for t, tail in copies.items() for p, n in tail.counts.items() if n == 0}
    partitions = sum(n for _topic, n in destinations)
    deadline = time.monotonic() + timeout_s
    cpu_each: list[float] = []
    cpu_brokers = BrokerCpu(0.0, {})
    try:
        while len(done) < partitions:
            check_alive()
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(
                    f"{sorted(copies)[:3]}...: {partitions - len(done)} partitions incomplete "
                    f"after {timeout_s} s"
                )
            if not timing.first_output:
                if first.total() > 0:
                    timing.first_output = time.monotonic()
                    cpu_each = [cpu_seconds([pid]) for pid in role_pids()]
                    cpu_brokers = broker_cpu_seconds(broker_pids)
                else:
                    time.sleep(TICK_S)
                    continue
            if not timing.destination_first and any(
                first.fetch()[(topic, p)] for topic, n in probe for p in range(n)
            ):
                timing.destination_first = time.monotonic()
            _read_tails(reader, stable.fetch(), copies, tailing, done)
        timing.all_visible = time.monotonic()
        _count_cpu(timing, role_pids(), cpu_each, broker_pids, cpu_brokers)
    finally:
        reader.close()
    return timing


def _count_cpu(
    timing: RunTiming,
    role_pids: Sequence[int | None],
    cpu_each: list[float],
    broker_pids: Sequence[int | None],
    cpu_brokers: BrokerCpu,
) -> None:
    """The CPU seconds used since the first output, from the counts taken then."""
    timing.cpu_each = [
        cpu_seconds([pid]) - before for pid, before in zip(role_pids, cpu_each, strict=True)
    ]
    timing.cpu_role = sum(timing.cpu_each)
    now = broker_cpu_seconds(broker_pids)
    timing.cpu_brokers = now.total - cpu_brokers.total
    timing.cpu_brokers_jit = jit_seconds_between(cpu_brokers.jit, now.jit)


def _completion_reader(target: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": target,
            "group.id": "bench-completion",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 20,
        }
    )


def _read_tails(
    reader: Consumer,
    ends: dict[tuple[str, int], int],
    copies: dict[str, SourceTail],
    tailing: set[tuple[str, int]],
    done: set[tuple[str, int]],
) -> None:
    """One look at the destinations' tails: a partition whose last stable offset reached the
    source's count is read from the earliest offset its last record can have; one whose last
    source key shows moves from ``tailing`` to ``done``."""
    start = [
        TopicPartition(topic, p, tail.counts[p] - 1)
        for topic, tail in copies.items()
        for p in range(len(tail.counts))
        if (topic, p) not in tailing
        and (topic, p) not in done
        and ends[(topic, p)] >= tail.counts[p]
    ]
    if start:
        reader.incremental_assign(start)
        tailing.update((tp.topic, tp.partition) for tp in start)
    if not tailing:
        time.sleep(TICK_S)
        return
    for message in reader.consume(1000, TICK_S):
        at = (message.topic(), message.partition())
        if message.error() or at in done:
            continue
        if message.key() == copies[at[0]].last_keys[at[1]]:
            done.add(at)
            tailing.discard(at)
            reader.incremental_unassign([TopicPartition(*at)])

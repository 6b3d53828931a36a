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

import itertools
import math
import multiprocessing
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import (
    OFFSET_END,
    Consumer,
    IsolationLevel,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from bench.payloads import Payloads

# In a child: the kernel SIGKILLs it when the bench dies, even by SIGKILL.
from envelope import HEADER_PROVENANCE, encode_provenance
from localkafka import die_with_parent, process_tree
from runtime import produce_when_room

_CLK_TCK = os.sysconf("SC_CLK_TCK")
_TICK_S = 0.1


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
    ends = EndOffsets(bootstrap, [(topic, partitions)], committed=False).fetch()
    counts = {p: ends[(topic, p)] for p in range(partitions)}
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-tail", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, n - 1) for p, n in counts.items() if n > 0])
    last: dict[int, bytes | None] = {}
    deadline = time.monotonic() + 30
    while len(last) < sum(1 for n in counts.values() if n > 0):
        if time.monotonic() > deadline:
            raise TimeoutError(f"could not read the last records of {topic}")
        for message in consumer.consume(100, 0.5):
            if not message.error():
                last[message.partition()] = message.key()
    consumer.close()
    return SourceTail(counts, last)


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
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += (int(fields[11]) + int(fields[12])) / _CLK_TCK
    return total


def await_copy(
    target: str,
    destination: str,
    tail: SourceTail,
    *,
    first_output_topics: Sequence[tuple[str, int]],
    launched: float,
    role_pids: Callable[[], Sequence[int | None]],
    broker_pids: Sequence[int | None],
    check_alive: Callable[[], None],
    timeout_s: float,
) -> RunTiming:
    """Wait until `destination` shows every source record to read_committed consumers.

    The clock starts at the candidate's first record appended anywhere on the target (its first
    output topics: staging for our pipeline, the destination for the others), so start-up time
    (a JVM, group joins, topic creation) is reported apart and not in the rate. It stops when,
    in every partition, the source's last key is visible under read_committed: read from the
    offset it can at the earliest have (the record count), so only a few records are read.
    """
    timing = RunTiming(launched)
    partitions = len(tail.counts)
    first = EndOffsets(target, [*first_output_topics, (destination, partitions)], committed=False)
    stable = EndOffsets(target, [(destination, partitions)], committed=True)
    reader = Consumer(
        {
            "bootstrap.servers": target,
            "group.id": "bench-completion",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 20,
        }
    )
    tailing: set[int] = set()
    done: set[int] = {p for p, n in tail.counts.items() if n == 0}
    deadline = time.monotonic() + timeout_s
    cpu_each: list[float] = []
    cpu_brokers = 0.0
    try:
        while len(done) < partitions:
            check_alive()
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(
                    f"{destination}: {partitions - len(done)} partitions incomplete after "
                    f"{timeout_s} s"
                )
            if not timing.first_output:
                if first.total() > 0:
                    timing.first_output = time.monotonic()
                    cpu_each = [cpu_seconds([pid]) for pid in role_pids()]
                    cpu_brokers = cpu_seconds(broker_pids)
                else:
                    time.sleep(_TICK_S)
                    continue
            if not timing.destination_first and any(
                first.fetch()[(destination, p)] for p in range(partitions)
            ):
                timing.destination_first = time.monotonic()
            ends = stable.fetch()
            start = [
                TopicPartition(destination, p, tail.counts[p] - 1)
                for p in range(partitions)
                if p not in tailing and p not in done and ends[(destination, p)] >= tail.counts[p]
            ]
            if start:
                reader.incremental_assign(start)
                tailing.update(tp.partition for tp in start)
            if not tailing:
                time.sleep(_TICK_S)
                continue
            for message in reader.consume(1000, _TICK_S):
                p = message.partition()
                if not message.error() and message.key() == tail.last_keys[p] and p not in done:
                    done.add(p)
                    tailing.discard(p)
                    reader.incremental_unassign([TopicPartition(destination, p)])
        timing.all_visible = time.monotonic()
        timing.cpu_each = [
            cpu_seconds([pid]) - before for pid, before in zip(role_pids(), cpu_each, strict=True)
        ]
        timing.cpu_role = sum(timing.cpu_each)
        timing.cpu_brokers = cpu_seconds(broker_pids) - cpu_brokers
    finally:
        reader.close()
    return timing


# -- paced production and latency ---------------------------------------------------------------


def _paced_produce(
    bootstrap: str,
    topic: str,
    partitions: int,
    rate: float,
    size: int,
    stop,
    sent,
) -> None:
    """Child process: `rate` records/s, each stamped with its production time (CreateTime)."""
    _tie_to_parent()
    # linger 1 ms: the record's CreateTime is within about a millisecond of its source append.
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": "all", "enable.idempotence": True}
    )
    payloads = Payloads(size)  # a different value for every record (bench/payloads.py)
    started = time.monotonic()
    count = 0
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        while count < due:
            try:
                producer.produce(
                    topic,
                    value=payloads.value(count),
                    key=b"p%d" % count,
                    partition=count % partitions,
                    timestamp=int(time.time() * 1000),
                )
                count += 1
            except BufferError:
                # Not runtime.produce_when_room: the record is made anew after the wait, so its
                # CreateTime is when it entered the queue, which the latency is measured from.
                producer.poll(0.01)
        producer.poll(0)
        sent.value = count
        time.sleep(0.002)
    producer.flush(30)
    sent.value = count


class PacedProducer:
    """A child process producing at a steady rate until stopped (its own GIL and core share)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float, size: int):
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._sent = context.Value("q", 0)
        self.rate = rate
        self._process = context.Process(
            target=_paced_produce,
            args=(bootstrap, topic, partitions, rate, size, self._stop, self._sent),
            daemon=True,
        )

    def __enter__(self) -> PacedProducer:
        """Start it and return once it produces (a spawned interpreter takes a second or two)."""
        self._process.start()
        deadline = time.monotonic() + 60
        while self._sent.value == 0:
            self.check_alive()
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError("the paced producer did not start producing within 60 s")
            time.sleep(0.05)
        return self

    def check_alive(self) -> None:
        if not self._process.is_alive() and not self._stop.is_set():
            raise RuntimeError(f"the paced producer exited with {self._process.exitcode}")

    def stop(self) -> int:
        self._stop.set()
        self._process.join(60)
        if self._process.is_alive():
            self._process.kill()
        return self._sent.value

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def probe_until_visible(
    source: str, target: str, topic: str, destination: str, timeout_s: float
) -> float:
    """Produce a record every half second until one is visible on the destination (the
    candidate is up and copying); the seconds it took."""
    started = time.monotonic()
    producer = Producer({"bootstrap.servers": source, "linger.ms": 0})
    visible = EndOffsets(target, [(destination, 1)], committed=True)
    while visible.total() == 0:
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"nothing reached {destination} within {timeout_s} s")
        producer.produce(topic, value=b"probe", key=b"probe", partition=0)
        producer.flush(10)
        time.sleep(0.5)
    return time.monotonic() - started


def collect_latencies(
    target: str,
    destination: str,
    partitions: int,
    window: tuple[float, float],
    check_alive: Callable[[], None],
    timeout_s: float,
) -> list[float]:
    """Milliseconds from production (the record's timestamp) to visibility on the destination
    under read_committed, for every record produced within `window` (time.time() seconds).

    Runs until every partition has shown a record produced after the window: partitions are
    ordered, so by then every record of the window has been seen.
    """
    begin_ms, end_ms = (int(t * 1000) for t in window)
    reader = Consumer(
        {
            "bootstrap.servers": target,
            "group.id": "bench-latency",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 10,
        }
    )
    reader.assign([TopicPartition(destination, p, 0) for p in range(partitions)])
    latencies: list[float] = []
    past_window: set[int] = set()
    deadline = time.time() + timeout_s
    try:
        while len(past_window) < partitions:
            check_alive()
            if time.time() > deadline:
                raise TimeoutError(f"{destination}: records of the window still missing")
            messages = reader.consume(2000, 0.01)
            seen_ms = time.time() * 1000
            for message in messages:
                if message.error():
                    continue
                stamp = message.timestamp()[1]
                if stamp >= end_ms:
                    past_window.add(message.partition())
                elif stamp >= begin_ms and message.key() != b"probe":
                    latencies.append(seen_ms - stamp)
    finally:
        reader.close()
    return latencies


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# -- recovery after a kill ----------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    at: float  # time.monotonic()
    produced: int  # source records appended (high watermarks)
    visible: int  # destination offsets readable under read_committed (last stable offsets)


@dataclass(frozen=True)
class Recovery:
    victim: str
    produce_rate: float  # records/s, measured over the 5 s before the kill
    lag_before: float  # median records produced but not yet visible, 5 s before the kill
    stalled_s: float  # longest stretch without any destination progress after the kill
    dipped: bool  # the destination fell below half the produce rate (1 s windows)
    full_speed_s: float | None  # kill -> start of the first 1 s at >= 90 % of the produce rate
    caught_up_s: float | None  # kill -> after the peak, lag <= 2 x lag_before + 0.1 s of production
    max_lag: int
    flowing_again_s: float | None = None  # kill -> first record produced after it visible


def longest_stall(samples: Sequence[Sample], since: float, until: float) -> float:
    """The longest stretch in [since, until] in which nothing new became visible."""
    inside = [s for s in samples if since <= s.at <= until]
    stalled = longest = 0.0
    for previous, sample in itertools.pairwise(inside):
        stalled = stalled + (sample.at - previous.at) if sample.visible == previous.visible else 0
        longest = max(longest, stalled)
    return longest


def analyse_recovery(
    samples: Sequence[Sample],
    killed_at: float,
    victim: str,
    flowing_again_s: float | None = None,
) -> Recovery:
    before = [s for s in samples if killed_at - 5 <= s.at <= killed_at]
    after = [s for s in samples if s.at >= killed_at]
    rate = (before[-1].produced - before[0].produced) / (before[-1].at - before[0].at)
    lag_before = statistics.median(s.produced - s.visible for s in before)
    longest = longest_stall(samples, killed_at, math.inf)
    # Rates over the next second from each sample; a kill first brings a dip (below half the
    # produce rate), full speed is the first second after the dip at >= 90 %.
    full_speed = caught_up = None
    dipped = False
    for i, sample in enumerate(after):
        ahead = next((s for s in after[i:] if s.at >= sample.at + 1.0), None)
        if ahead is None:
            break
        speed = (ahead.visible - sample.visible) / (ahead.at - sample.at)
        if not dipped:
            dipped = speed < 0.5 * rate
            if not dipped and sample.at - killed_at > 10:
                full_speed = 0.0  # no dip at this resolution: never slowed down
                break
            continue
        if speed >= 0.9 * rate:
            full_speed = sample.at - killed_at
            break
    # Caught up: after the largest lag the kill caused, back within the lag before it.
    peak = max(after, key=lambda s: s.produced - s.visible)
    threshold = 2 * lag_before + 0.1 * rate
    if full_speed is None:
        pass  # still slow, or too early to tell that it never slowed down
    elif peak.produced - peak.visible <= threshold:
        caught_up = 0.0  # never fell behind by more than that
    else:
        caught_up = next(
            (
                s.at - killed_at
                for s in after
                if s.at >= peak.at and s.produced - s.visible <= threshold
            ),
            None,
        )
    return Recovery(
        victim=victim,
        produce_rate=rate,
        lag_before=lag_before,
        stalled_s=longest,
        dipped=dipped,
        full_speed_s=full_speed,
        caught_up_s=caught_up,
        max_lag=peak.produced - peak.visible,
        flowing_again_s=flowing_again_s,
    )


class FreshRecords:
    """When records produced after a moment first become visible on the destination, seen by a
    read_committed reader of the destination's tail in a thread of its own.

    docs/design.md §10's "flowing again": the first record produced after the kill (its CreateTime,
    stamped by the paced producer) that a read_committed reader sees. Not offsets moving, which
    an abort moves too, and not the backlog a reader behind the kill still reads: a record
    produced before the kill counts for nothing, however late it arrives.
    """

    def __init__(self, target: str, destination: str, partitions: int) -> None:
        self._reader = Consumer(
            {
                "bootstrap.servers": target,
                "group.id": "bench-fresh-records",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
            }
        )
        self._reader.assign([TopicPartition(destination, p, OFFSET_END) for p in range(partitions)])
        self._first_seen: dict[int, float | None] = {}  # moment (ms) -> time.monotonic() seen
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def mark(self) -> int:
        """Now, as the moment to watch for (epoch milliseconds, as record timestamps are)."""
        moment = int(time.time() * 1000)
        with self._lock:
            self._first_seen[moment] = None
        return moment

    def first_seen(self, moment: int) -> float | None:
        """time.monotonic() when the first record produced at or after `moment` was seen."""
        with self._lock:
            return self._first_seen[moment]

    def _read(self) -> None:
        while not self._stop.is_set():
            messages = self._reader.consume(2000, 0.05)
            seen = time.monotonic()
            if not messages:
                continue
            newest = max((m.timestamp()[1] for m in messages if not m.error()), default=-1)
            with self._lock:
                for moment, first in self._first_seen.items():
                    if first is None and newest >= moment:
                        self._first_seen[moment] = seen

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._reader.close()


class Sampler:
    """Samples produced and visible totals every tick, in the caller's loop."""

    def __init__(self, source: str, topic: str, target: str, destination: str, partitions: int):
        self._produced = EndOffsets(source, [(topic, partitions)], committed=False)
        self._visible = EndOffsets(target, [(destination, partitions)], committed=True)
        self.samples: list[Sample] = []

    def run_for(self, seconds: float, check_alive: Callable[[], None]) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            check_alive()
            self.sample()
            time.sleep(_TICK_S)

    def sample(self) -> Sample:
        sample = Sample(time.monotonic(), self._produced.total(), self._visible.total())
        self.samples.append(sample)
        return sample

    def run_until_recovered(
        self, killed_at: float, victim: str, check_alive: Callable[[], None], timeout_s: float
    ) -> None:
        """Sample until the destination caught up after the kill (and 5 s more), or timeout."""
        until = killed_at + timeout_s
        while time.monotonic() < until:
            self.run_for(1.0, check_alive)
            if analyse_recovery(self.samples, killed_at, victim).caught_up_s is not None:
                self.run_for(5.0, check_alive)  # steady again before anything next
                return


# -- a function in a child process ----------------------------------------------------------------


def _child(queue, function, args) -> None:
    _tie_to_parent()
    queue.put(function(*args))


class ChildRun:
    """`function(*args)` in a spawned process (its own GIL, measured like the other candidates)."""

    def __init__(self, function: Callable[..., object], *args: object) -> None:
        context = multiprocessing.get_context("spawn")
        self._queue = context.Queue()
        self._process = context.Process(target=_child, args=(self._queue, function, args))
        self._process.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def check_alive(self) -> None:
        code = self._process.exitcode
        if code not in (None, 0):
            raise RuntimeError(f"child process {self.pid} failed with exit code {code}")

    def result(self, timeout_s: float) -> object:
        value = self._queue.get(timeout=timeout_s)
        self._process.join(timeout_s)
        return value

    def kill(self) -> None:
        if self._process.is_alive():
            self._process.kill()
        self._process.join(10)


def _tie_to_parent() -> None:
    """In a child process of the bench: the kernel SIGKILLs it when the bench dies."""
    tie = die_with_parent()
    if tie is not None:
        tie()


def copy_as_stage_2(producer: Producer, topic: str, message: Message, cluster_id: str) -> None:
    """Produce a copy of ``message`` the way stage 2 writes one: same partition, key, value,
    headers and timestamp, plus the provenance header naming its source record."""
    partition, offset = message.partition(), message.offset()
    headers = message.headers() or []
    headers.append((HEADER_PROVENANCE, encode_provenance(cluster_id, partition, offset)))
    produce_when_room(
        producer,
        topic,
        value=message.value(),
        key=message.key(),
        partition=partition,
        headers=headers,
        timestamp=message.timestamp()[1],
    )

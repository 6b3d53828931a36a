"""Paced production and what it shows: a child process producing at a steady rate with the
production time in each record, a probe until a candidate copies every partition, and each
record's latency from production to visibility on the destination under read_committed."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from bench.common import tie_to_parent
from bench.flowmeter import EndOffsets
from bench.payloads import Payloads

_START_TIMEOUT_S = 180.0


def _paced_produce(
    bootstrap: str,
    topics: list[str],
    partitions: int,
    rate: float,
    size: int,
    stop,
    sent,
) -> None:
    """Child process: `rate` records/s round-robin over every partition of `topics` (each of
    `partitions`), each stamped with its production time (CreateTime)."""
    tie_to_parent()
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
                place = count % (len(topics) * partitions)
                producer.produce(
                    topics[place // partitions],
                    value=payloads.value(count),
                    key=b"p%d" % count,
                    partition=place % partitions,
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
    """A child process producing at a steady rate until stopped (its own GIL and core share),
    round-robin over every partition of one topic or of several of the same partition count."""

    def __init__(
        self, bootstrap: str, topic: str | list[str], partitions: int, rate: float, size: int
    ):
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._sent = context.Value("q", 0)
        self.rate = rate
        topics = [topic] if isinstance(topic, str) else topic
        self._process = context.Process(
            target=_paced_produce,
            args=(bootstrap, topics, partitions, rate, size, self._stop, self._sent),
            daemon=True,
        )

    def __enter__(self) -> PacedProducer:
        """Start it and return once it produces (a spawned interpreter takes a second or two)."""
        self._process.start()
        # 60 s was once too short (make bench-rolling, six JVMs and a candidate already busy on
        # two cores; which candidate's producer, the error did not say). It makes a 16 MiB
        # payload pool in Python before its first record. Slow to start is not wrong: nothing
        # is timed before it produces.
        deadline = time.monotonic() + _START_TIMEOUT_S
        while self._sent.value == 0:
            self.check_alive()
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(
                    f"the paced producer did not start producing within {_START_TIMEOUT_S:.0f} s"
                )
            time.sleep(0.05)
        return self

    @property
    def sent(self) -> int:
        """Records produced so far."""
        return int(self._sent.value)

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
    source: str, target: str, topic: str, destination: str, partitions: int, timeout_s: float
) -> float:
    """Produce a record to each partition every half second until every destination partition
    shows one (the candidate is up and copying all of them); the seconds it took.

    Every partition, not the first only: MirrorMaker 2 copies each partition in a task of its
    own, and its first task can copy while the others still start, so a record visible on one
    partition says nothing of the rest, and a measurement begun then could time their start."""
    started = time.monotonic()
    producer = Producer({"bootstrap.servers": source, "linger.ms": 0})
    visible = EndOffsets(target, [(destination, partitions)], committed=True)
    while min(visible.fetch().values()) == 0:
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(
                f"{destination}: not every partition showed a record within {timeout_s} s"
            )
        for partition in range(partitions):
            producer.produce(topic, value=b"probe", key=b"probe", partition=partition)
        producer.flush(10)
        time.sleep(0.5)
    return time.monotonic() - started


class Arrival(NamedTuple):
    """One measured record: its production (CreateTime, ms) and its latency (ms)."""

    produced_ms: int
    latency_ms: float


def collect_arrivals(
    target: str,
    destination: str,
    partitions: int,
    window: tuple[float, float],
    check_alive: Callable[[], None],
    timeout_s: float,
) -> list[Arrival]:
    """Every record produced within `window` (time.time() seconds), with its latency to
    visibility on the destination under read_committed.

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
    arrivals: list[Arrival] = []
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
                    arrivals.append(Arrival(stamp, seen_ms - stamp))
    finally:
        reader.close()
    return arrivals


class LiveLatencies:
    """A read_committed reader of every destination partition from its end, in a thread:
    when each record became visible, against its CreateTime."""

    def __init__(self, target: str, destinations: list[tuple[str, int]]) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": target,
                "group.id": "bench-low-rate",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                # The broker answers a waiting fetch as soon as the last stable offset moves,
                # so a long wait costs no latency here; a short one had the bench's own
                # fetches of every partition, 100 a second, in the brokers' CPU.
                "fetch.wait.max.ms": 500,
            }
        )
        self._consumer.assign(
            [TopicPartition(t, p, OFFSET_END) for t, n in destinations for p in range(n)]
        )
        self._seen: list[tuple[int, float, float]] = []  # CreateTime ms, latency ms, seen at s
        self._topics: set[str] = set()  # those a record was seen in
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            messages = self._consumer.consume(500, 0.05)
            seen_s = time.time()
            for message in messages:
                if message.error() is None:
                    stamp = message.timestamp()[1]
                    self._seen.append((stamp, seen_s * 1000 - stamp, seen_s))
                    self._topics.add(str(message.topic()))

    def await_each(
        self, flows: list[list[str]], check_alive: Callable[[], None], timeout_s: float
    ) -> float:
        """Wait until a record is visible in some topic of each flow (each candidate copies);
        the seconds it took."""
        started = time.monotonic()
        while not all(self._topics.intersection(topics) for topics in flows):
            check_alive()
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"not every flow copied within {timeout_s} s")
            time.sleep(0.1)
        return time.monotonic() - started

    def visible_between(self, begin_s: float, end_s: float) -> int:
        """How many records became visible between ``begin_s`` and ``end_s`` (time.time())."""
        return sum(1 for _stamp, _latency, seen_s in self._seen if begin_s <= seen_s < end_s)

    def stop(self, begin_s: float, end_s: float) -> list[float]:
        """The latencies (ms) of the records produced between ``begin_s`` and ``end_s``."""
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()
        begin_ms, end_ms = begin_s * 1000, end_s * 1000
        return [latency for stamp, latency, _seen in self._seen if begin_ms <= stamp < end_ms]

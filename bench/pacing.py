"""Paced production and what it shows: a child process producing at a steady rate with the
production time in each record, a probe until a candidate copies at all, and each record's
latency from production to visibility on the destination under read_committed."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.common import tie_to_parent
from bench.flowmeter import EndOffsets
from bench.payloads import Payloads


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

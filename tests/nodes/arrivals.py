"""When records reach the destination, as a user's read_committed consumer sees them: the
stalls a fault causes, for the whole destination and for one partition."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from itertools import pairwise

from confluent_kafka import Consumer, TopicPartition

_QUIET = {"log_level": 0}  # a node restarting refuses connections: expected here


@dataclass(frozen=True, slots=True)
class Stall:
    whole_s: float  # the longest time no destination partition advanced
    partition_s: float  # the longest time the named partition did not


class ArrivalWatch:
    """A daemon thread reading ``topic``'s ``partitions`` from their current end, noting the
    monotonic time of every record's arrival per partition."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"arrival-watch-{topic}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 50,
                **_QUIET,
            }
        )
        # OFFSET_END: what already arrived is not this watch's business.
        self._consumer.assign([TopicPartition(topic, p, -1) for p in range(partitions)])
        self._arrivals: dict[int, list[float]] = {p: [] for p in range(partitions)}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="arrival-watch", daemon=True)

    def __enter__(self) -> ArrivalWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()

    def count(self) -> int:
        with self._lock:
            return sum(len(times) for times in self._arrivals.values())

    def stall(self, since: float, until: float, partition: int) -> Stall:
        """The longest gaps in arrivals between ``since`` and ``until`` (monotonic)."""
        with self._lock:
            every = sorted(t for times in self._arrivals.values() for t in times)
            own = list(self._arrivals[partition])
        return Stall(_longest_gap(every, since, until), _longest_gap(own, since, until))

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.consume(500, 0.1):
                if message.error() is None:
                    with self._lock:
                        self._arrivals[message.partition()].append(time.monotonic())


def _longest_gap(times: list[float], since: float, until: float) -> float:
    inside = [since, *(t for t in times if since < t < until), until]
    return max(b - a for a, b in pairwise(inside))

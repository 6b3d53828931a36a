"""A consumer group that an application runs on the source for the whole chaos run.

It reads one topic more slowly than the traffic writes it, so its committed offsets sit inside
the log, where translating them is not trivial, and it commits every second, as applications
do, while brokers die and come back under it: offsetsync moves a group that keeps moving, not
only one that stood still before the failover. A commit a fault makes fail is counted and the
next one carries the position on; nothing here stops the run. When stopped, it commits where it
is and leaves: the run then checks that the group resumes on the target at exactly its next
record (harness/failover.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException, TopicPartition

from exactly.chaos.errors import ChaosError
from exactly.harness.quiet import QUIET_CLIENT_LOG

_COMMIT_EVERY_S = 1.0
_BATCH = 200
_POLL_S = 0.2
_FINAL_COMMIT_S = 60.0
_READ_S = 30.0


class LiveGroup:
    def __init__(
        self, bootstrap_servers: str, group: str, topic: str, records_per_second: float
    ) -> None:
        self.group = group
        self.topic = topic
        self._config = {
            "bootstrap.servers": bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "logger": QUIET_CLIENT_LOG,
        }
        self._per_record_s = 1.0 / records_per_second
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-live-group", daemon=True)
        self._lock = threading.Lock()
        self._processed = self._commits = self._failed_commits = 0
        self.error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> Mapping[int, int]:
        """Commit where it is and leave the group; then the offsets the source holds for it,
        per partition (read back: a commit that timed out may still have been applied)."""
        self._stop.set()
        self._thread.join(_FINAL_COMMIT_S + 30.0)
        if self._thread.is_alive():
            raise ChaosError(f"{self.group} did not leave within {_FINAL_COMMIT_S + 30.0:.0f} s")
        if self.error is not None:
            raise ChaosError(self.error)
        reader = Consumer(self._config)  # committed() does not join the group
        try:
            topic = reader.list_topics(self.topic, timeout=_READ_S).topics[self.topic]
            wanted = [TopicPartition(self.topic, p) for p in sorted(topic.partitions)]
            committed = reader.committed(wanted, timeout=_READ_S)
        except KafkaException as exc:
            raise ChaosError(
                f"{self.group}: its committed offsets could not be read: {exc}"
            ) from exc
        finally:
            reader.close()
        return {tp.partition: tp.offset for tp in committed if tp.offset >= 0}

    def abandon(self) -> None:
        """Stop without waiting or committing (the run is failing; its clusters are going)."""
        self._stop.set()

    @property
    def counts(self) -> dict[str, int]:
        """Records processed, commits made, commits a fault made fail: as the report shows them."""
        with self._lock:
            return {
                "processed": self._processed,
                "commits": self._commits,
                "failed_commits": self._failed_commits,
            }

    def _run(self) -> None:
        try:
            consumer = Consumer(self._config)
            try:
                self._consume_until_stopped(consumer)
            finally:
                consumer.close()
        except Exception as exc:  # a thread must not die silently; the run reports it
            self.error = f"{self.group} crashed: {exc!r}"

    def _consume_until_stopped(self, consumer: Consumer) -> None:
        consumer.subscribe([self.topic])
        next_commit = time.monotonic() + _COMMIT_EVERY_S
        while not self._stop.is_set():
            messages = consumer.consume(_BATCH, timeout=_POLL_S)
            readable = [m for m in messages if m.error() is None]
            with self._lock:
                self._processed += len(readable)
            # Processing: slower than the traffic, so the group lags and commits mid-log.
            self._stop.wait(len(readable) * self._per_record_s)
            if time.monotonic() >= next_commit:
                self._commit(consumer)
                next_commit = time.monotonic() + _COMMIT_EVERY_S
        # The last commit must land: it is what the failover is checked against.
        deadline = time.monotonic() + _FINAL_COMMIT_S
        while not self._commit(consumer):
            if time.monotonic() > deadline:
                self.error = f"{self.group}: its last commit failed for {_FINAL_COMMIT_S:.0f} s"
                return
            time.sleep(1.0)

    def _commit(self, consumer: Consumer) -> bool:
        """Commit the position of every assigned partition; whether it was acknowledged (the
        read-back in stop(), not this, is what the failover is judged against)."""
        try:
            positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
            if not positions:
                return True  # nothing assigned or read yet: nothing to commit
            results = consumer.commit(offsets=positions, asynchronous=False) or []
            acknowledged = all(tp.error is None for tp in results)
        except KafkaException:
            acknowledged = False
        with self._lock:
            if acknowledged:
                self._commits += 1
            else:
                self._failed_commits += 1
        return acknowledged

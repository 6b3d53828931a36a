"""The source data mix of the end-to-end replication tests, and a producer that keeps writing.

`create_data_mix()` creates four topics on the SOURCE cluster (24 partitions in all) and fills
them with every kind of record a replicator must carry byte for byte:

    <prefix>.mixed      10 partitions  null/empty keys, tombstones, empty values, repeated header
                                       names, None and binary header values; non-transactional
                                       records interleaved with committed AND aborted transactions
                                       (some partitions end with an aborted one)
    <prefix>.large       2 partitions  records of 1.5 MB (max.message.bytes=3 MiB on the topic)
    <prefix>.history     6 partitions  old, out-of-order CreateTimes (2015, 2021), retention.ms=-1
    <prefix>.compacted   6 partitions  cleanup.policy=compact, few keys repeated many times

About 2,600 records, of which ~2,500 are readable. The compacted topic keeps the default segment
settings, so the broker does not compact it while a test runs: what `read_source()` sees before a
test is what the replicator sees during it. Offset gaps come from transaction markers and aborted
records instead.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaError, Producer

from runtime import abort_or_replace, call_retrying, produce_when_room
from tests.kafka_helpers import create_topic

LARGE_VALUE_BYTES = 1_500_000
ABORTED_MARK = b"ABORTED"
# 2021-01-01T00:00:00Z and 2015-06-01T00:00:00Z in milliseconds.
OLD_TIMESTAMP_2021 = 1_609_459_200_000
OLD_TIMESTAMP_2015 = 1_433_116_800_000

_MIB = 1024 * 1024
_TIMEOUT_S = 30.0
_COMMIT_DEADLINE_S = 180.0
_BINARY = bytes(range(256))
# Header lists cycled through the records: none, a repeated name, None and empty values,
# binary bytes, a non-ASCII name.
_HEADER_VARIANTS: tuple[tuple[tuple[str, bytes | None], ...], ...] = (
    (),
    (("h", b"1"), ("h", b"2"), ("h", b"1")),
    (("null", None), ("empty", b""), ("bin", _BINARY)),
    (("trace", b"abc"), ("null", None), ("trace", None)),
    (("größe", "ü".encode()), ("h", b"\x00\xff")),
)


@dataclass(frozen=True)
class DataMix:
    """What `create_data_mix()` made: topic -> partition count, and how much it wrote."""

    prefix: str
    partitions: dict[str, int]
    include_regex: str
    readable_records: int
    aborted_records: int
    mixed_topic: str
    large_topic: str
    history_topic: str
    compacted_topic: str

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(self.partitions)

    @property
    def total_partitions(self) -> int:
        return sum(self.partitions.values())


def create_data_mix(bootstrap: str, prefix: str) -> DataMix:
    """Create the mix's topics, named `<prefix>.<kind>`, at `bootstrap` and produce into them."""
    names = {kind: f"{prefix}.{kind}" for kind in ("mixed", "large", "history", "compacted")}
    layout = {
        "mixed": (10, {}),
        "large": (2, {"max.message.bytes": str(3 * _MIB)}),
        "history": (6, {"retention.ms": "-1"}),
        "compacted": (6, {"cleanup.policy": "compact"}),
    }
    for kind, (partitions, config) in layout.items():
        create_topic(bootstrap, names[kind], partitions=partitions, config=config)

    plain = _DeliveryCheckedProducer(
        bootstrap, {"enable.idempotence": True, "message.max.bytes": 4 * _MIB}
    )
    readable = _produce_large(plain, names["large"], layout["large"][0])
    readable += _produce_history(plain, names["history"], layout["history"][0])
    readable += _produce_compacted(plain, names["compacted"], layout["compacted"][0])
    mixed_readable, aborted = _produce_mixed(
        bootstrap, plain, names["mixed"], layout["mixed"][0], transactional_id=f"{prefix}.txn"
    )
    plain.flush_and_check()

    kinds = "|".join(names)
    return DataMix(
        prefix=prefix,
        partitions={names[kind]: partitions for kind, (partitions, _) in layout.items()},
        # One regex, fully matching exactly these four names (REPLICATION_TOPICS_INCLUDE).
        include_regex=rf"{re.escape(prefix)}\.(?:{kinds})",
        readable_records=readable + mixed_readable,
        aborted_records=aborted,
        mixed_topic=names["mixed"],
        large_topic=names["large"],
        history_topic=names["history"],
        compacted_topic=names["compacted"],
    )


def _edge_record(i: int) -> tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]:
    """Key, value and headers of the i-th record of a partition: every edge case, cycled."""
    keys = (None, b"", f"key-{i}".encode(), _BINARY[: 1 + i % 17])
    values = (f"value-{i}".encode(), None, b"", _BINARY * (1 + i % 3))
    return keys[i % len(keys)], values[(i // 4) % len(values)], _HEADER_VARIANTS[i % 5]


def _produce_mixed(
    bootstrap: str,
    plain: _DeliveryCheckedProducer,
    topic: str,
    partitions: int,
    transactional_id: str,
) -> tuple[int, int]:
    """Non-transactional records interleaved with committed and aborted transactions.

    Every phase flushes before the next, so the records really interleave in each partition's log:
    plain, txn 1 (committed) with plain records in the middle, txn 2 (aborted) with plain records
    in the middle, plain, txn 3 (committed), and on even partitions a final aborted txn 4.
    """
    txn = _TransactionalProducer(bootstrap, transactional_id)
    readable = aborted = 0
    counter = iter(range(1_000_000))

    def produce(producer: Callable[..., None], count: int, label: bytes, parts: range) -> int:
        for partition in parts:
            for _ in range(count):
                i = next(counter)
                key, value, headers = _edge_record(i)
                if label:
                    value = label + b"-" + (value or b"")
                producer(topic, partition=partition, key=key, value=value, headers=headers)
        return count * len(parts)

    every = range(partitions)
    readable += produce(plain.produce, 60, b"", every)
    plain.flush_and_check()

    txn.begin()
    readable += produce(txn.produce, 20, b"txn1", every)
    txn.flush()
    readable += produce(plain.produce, 10, b"", every)
    plain.flush_and_check()
    readable += produce(txn.produce, 20, b"txn1", every)
    txn.commit()

    txn.begin()
    aborted += produce(txn.produce, 15, ABORTED_MARK, every)
    txn.flush()
    readable += produce(plain.produce, 5, b"", every)
    plain.flush_and_check()
    txn.abort()

    readable += produce(plain.produce, 10, b"", every)
    plain.flush_and_check()
    txn.begin()
    readable += produce(txn.produce, 10, b"txn3", every)
    txn.commit()

    txn.begin()
    aborted += produce(txn.produce, 5, ABORTED_MARK, range(0, partitions, 2))
    txn.abort()
    txn.close()
    return readable, aborted


def _produce_large(producer: _DeliveryCheckedProducer, topic: str, partitions: int) -> int:
    rng = random.Random(1)
    count = 0
    for partition in range(partitions):
        for i in range(22):
            if i % 8 == 3:  # 3 per partition: 6 records of 1.5 MB
                value = rng.randbytes(LARGE_VALUE_BYTES)
                headers = [("size", str(len(value)).encode()), ("blob", rng.randbytes(50_000))]
            else:
                value, headers = f"small-{i}".encode(), [("h", b"x")]
            producer.produce(
                topic, partition=partition, key=f"k{i}".encode(), value=value, headers=headers
            )
            count += 1
        producer.flush_and_check()  # keep at most a few MB in flight
    return count


def _produce_history(producer: _DeliveryCheckedProducer, topic: str, partitions: int) -> int:
    count = 0
    for partition in range(partitions):
        for i in range(100):
            # Mostly increasing 2021 times, with a few 2015 ones out of order in between.
            if i % 10 == 7:
                timestamp = OLD_TIMESTAMP_2015 + i
            else:
                timestamp = OLD_TIMESTAMP_2021 + partition * 86_400_000 + i * 1_000
            key, value, headers = _edge_record(i)
            producer.produce(
                topic,
                partition=partition,
                key=key,
                value=value,
                headers=headers,
                timestamp=timestamp,
            )
            count += 1
    return count


def _produce_compacted(producer: _DeliveryCheckedProducer, topic: str, partitions: int) -> int:
    count = 0
    for partition in range(partitions):
        for i in range(80):
            # A compacted topic rejects null keys; tombstones (value None) are fine.
            key = f"user-{i % 7}".encode()
            value = None if i % 13 == 12 else f"state-{i}".encode()
            producer.produce(
                topic, partition=partition, key=key, value=value, headers=_HEADER_VARIANTS[i % 5]
            )
            count += 1
    return count


class _DeliveryCheckedProducer:
    """A producer whose every delivery is checked: flush_and_check() raises on any failure."""

    def __init__(self, bootstrap: str, config: Mapping[str, object]) -> None:
        self._producer = Producer({"bootstrap.servers": bootstrap, **config})
        self._errors: list[str] = []

    def _on_delivery(self, error: KafkaError | None, message: object) -> None:
        if error is not None:
            self._errors.append(str(error))

    def produce(self, topic: str, **kwargs: object) -> None:
        kwargs["headers"] = list(kwargs.get("headers") or ())  # the client takes no tuple
        produce_when_room(self._producer, topic, on_delivery=self._on_delivery, **kwargs)

    def flush_and_check(self) -> None:
        remaining = self._producer.flush(_TIMEOUT_S)
        if remaining or self._errors:
            raise RuntimeError(
                f"data mix: {remaining} records undelivered, {len(self._errors)} failed: "
                f"{self._errors[:3]}"
            )


class _TransactionalProducer:
    """A transactional producer that survives the quirks of docs/design.md §9 (slow coordinator,
    #4849)."""

    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        self._config = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id}
        self._producer = self._new_producer()

    def _new_producer(self) -> Producer:
        producer = Producer(self._config)
        # "Coordinator load in progress" right after a broker start: wait, do not fail.
        call_retrying(lambda: producer.init_transactions(_TIMEOUT_S), deadline_s=_TIMEOUT_S)
        return producer

    def begin(self) -> None:
        self._producer.begin_transaction()

    def produce(self, topic: str, **kwargs: object) -> None:
        kwargs["headers"] = list(kwargs.get("headers") or ())  # the client takes no tuple
        self._producer.produce(topic, **kwargs)

    def flush(self) -> None:
        if self._producer.flush(_TIMEOUT_S):
            raise RuntimeError("data mix: transactional records not delivered in time")

    def commit(self) -> None:
        # A broker killed mid-commit leaves the outcome unknown until a new leader takes over
        # (a rolling SIGKILL on three nodes took past 30 s here): librdkafka's rule for a
        # retriable commit error is to call it again, as an application would.
        producer = self._producer
        call_retrying(
            lambda: producer.commit_transaction(_TIMEOUT_S), deadline_s=_COMMIT_DEADLINE_S
        )

    def abort(self) -> None:
        self._producer = abort_or_replace(self._producer, self._new_producer, _TIMEOUT_S)

    def close(self) -> None:
        self._producer.flush(_TIMEOUT_S)


class ContinuousProducer:
    """Keeps producing numbered records into the given topics until stop(); for chaos tests.

    Record n goes to topic n % len(topics), partition (n // len(topics)) % partitions, with key
    b"cont-<n>" and value b"<label>-<n>" and a header ("seq", b"<n>"). With transactional=True
    every burst is one transaction and every `abort_every`-th burst is aborted (after a flush).
    stop() returns how many records were acknowledged (committed, in transactional mode); the
    thread is a daemon and stop() joins it, so none outlives the test.
    """

    def __init__(
        self,
        bootstrap: str,
        partitions: Mapping[str, int],
        *,
        records_per_second: float = 400.0,
        burst: int = 20,
        transactional_id: str | None = None,
        abort_every: int = 5,
        label: str = "cont",
    ) -> None:
        if not partitions:
            raise ValueError("ContinuousProducer needs at least one topic")
        self._targets = [(topic, count) for topic, count in partitions.items()]
        self._interval = burst / records_per_second
        self._burst = burst
        self._bootstrap = bootstrap
        self._transactional_id = transactional_id
        self._abort_every = abort_every
        self._label = label.encode()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._acknowledged = 0
        self._aborted = 0
        self._failures: list[str] = []
        self._crash: BaseException | None = None
        self._lock = threading.Lock()

    @property
    def acknowledged(self) -> int:
        with self._lock:
            return self._acknowledged

    @property
    def aborted(self) -> int:
        return self._aborted

    @property
    def failures(self) -> list[str]:
        with self._lock:
            return list(self._failures)

    def start(self) -> ContinuousProducer:
        if self._thread is not None:
            raise RuntimeError("ContinuousProducer already started")
        self._thread = threading.Thread(target=self._run, name="continuous-producer", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 15.0) -> int:
        """Stop producing, wait for the outstanding acknowledgements, return the count."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise RuntimeError(f"ContinuousProducer did not stop within {timeout_s} s")
        if self._crash is not None:
            raise RuntimeError(f"ContinuousProducer failed: {self._crash!r}") from self._crash
        return self.acknowledged

    def __enter__(self) -> ContinuousProducer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            if self._transactional_id is None:
                self._run_plain()
            else:
                self._run_transactional()
        except BaseException as exc:  # reported by stop(); a thread must not die silently
            self._crash = exc

    def _record(self, n: int) -> dict[str, object]:
        topic, partitions = self._targets[n % len(self._targets)]
        return {
            "topic": topic,
            "partition": (n // len(self._targets)) % partitions,
            "key": b"cont-%d" % n,
            "value": self._label + b"-%d" % n,
            "headers": [("seq", b"%d" % n)],
        }

    def _on_delivery(self, error: KafkaError | None, message: object) -> None:
        with self._lock:
            if error is None:
                self._acknowledged += 1
            else:
                self._failures.append(str(error))

    def _bursts(self) -> Iterator[range]:
        n = 0
        while not self._stop.is_set():
            yield range(n, n + self._burst)
            n += self._burst
            self._stop.wait(self._interval)

    def _run_plain(self) -> None:
        producer = Producer({"bootstrap.servers": self._bootstrap, "enable.idempotence": True})
        try:
            for numbers in self._bursts():
                for n in numbers:
                    producer.produce(on_delivery=self._on_delivery, **self._record(n))
                producer.poll(0)
        finally:
            producer.flush(10)

    def _run_transactional(self) -> None:
        assert self._transactional_id is not None
        txn = _TransactionalProducer(self._bootstrap, self._transactional_id)
        for index, numbers in enumerate(self._bursts(), start=1):
            txn.begin()
            for n in numbers:
                txn.produce(**self._record(n))
            if self._abort_every and index % self._abort_every == 0:
                txn.abort()
                self._aborted += len(numbers)
            else:
                txn.commit()
                with self._lock:
                    self._acknowledged += len(numbers)
        txn.close()

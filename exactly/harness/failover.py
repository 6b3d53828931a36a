"""The demo's consumer-group failover: a group reads part of a source topic and stops,
offsetsync moves its offsets to the target, and the same group resumes there.

    stop_halfway()       the group processes about half of each partition on the source, commits
                         as a consumer does, and leaves
    await_moved()        until offsetsync has committed the group's offsets on the target
    resume_and_compare() the group, subscribed on the target, reads every partition to its end;
                         what it reads is compared, record by record, with the source records it
                         had not processed (compare_resumed): nothing read again, nothing skipped

The two consumers (process_and_stop, resume_on_target) are the ones an application would run;
the offset-sync tests use them too.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from envelope import HEADER_PROVENANCE
from exactly.harness.errors import DemoError
from exactly.harness.quiet import QUIET_CLIENT_LOG
from exactly.harness.verdict import Record, read_committed

ALL = -1  # process every record: a caught-up group
_TIMEOUT_S = 60.0
_CONSUME_BATCH = 100
_POLL_S = 0.2
_AWAIT_POLL_S = 0.1

Headers = tuple[tuple[str, bytes | None], ...]
# What a record is, wherever it was read: key, value, headers without `exactly.origin`,
# timestamp type and timestamp.
Content = tuple[bytes | None, bytes | None, Headers, int, int]


class GroupNotMovedError(DemoError):
    """offsetsync did not commit the group's offsets on the target in time."""


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """A record as the resumed group's consumer received it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: tuple[int, int]  # (type, milliseconds), as confluent_kafka gives it


@dataclass(frozen=True, slots=True)
class StoppedGroup:
    """A group that processed part of a topic on the source and left."""

    group: str
    topic: str
    source: Mapping[int, Sequence[Record]]  # every readable record, per partition
    committed: Mapping[int, int]  # the offsets it committed on the source, per partition

    @property
    def total(self) -> int:
        return sum(len(records) for records in self.source.values())

    @property
    def processed(self) -> int:
        return sum(len(self.processed_records(p)) for p in self.source)

    def processed_records(self, partition: int) -> list[Record]:
        end = self.committed[partition]
        return [r for r in self.source[partition] if r.offset < end]

    def unprocessed_records(self, partition: int) -> list[Record]:
        end = self.committed[partition]
        return [r for r in self.source[partition] if r.offset >= end]


@dataclass(frozen=True, slots=True)
class FailoverResult:
    partitions: int
    processed: int  # on the source, before the group stopped
    read: int  # on the target, after it resumed there
    re_read: int  # read on the target although already processed on the source
    skipped: int  # neither processed on the source nor read on the target
    exact: bool  # on every partition, the target gave exactly the unprocessed records, in order


# --- the demo's steps ---------------------------------------------------------------------------


def stop_halfway(bootstrap: str, group: str, topic: str) -> StoppedGroup:
    """`group` processes about half of the readable records of each partition of `topic` on
    the source (read_committed), commits and leaves."""
    source = _read_source(bootstrap, topic)
    few = sorted(p for p, records in source.items() if len(records) < 2)
    if few:
        raise DemoError(
            f"{topic}: partitions {few} hold fewer than 2 records, too few to stop a consumer "
            "group halfway; run the demo longer or at a higher rate"
        )
    counts = {p: (len(records) + 1) // 2 for p, records in source.items()}
    committed = process_and_stop(bootstrap, group, topic, counts)
    return StoppedGroup(group, topic, source, committed)


def stopped_at(
    bootstrap: str, group: str, topic: str, committed: Mapping[int, int]
) -> StoppedGroup:
    """A group that an application ran on the source and stopped with `committed`: every
    readable record of `topic` is read now, to tell processed from unprocessed."""
    source = _read_source(bootstrap, topic)
    never = sorted(set(source) - set(committed))
    if never:
        raise DemoError(f"{group} never committed on {topic} partitions {never}: nothing to move")
    return StoppedGroup(group, topic, source, dict(committed))


def _read_source(bootstrap: str, topic: str) -> dict[int, Sequence[Record]]:
    reading = read_committed(bootstrap, [topic], _TIMEOUT_S)
    if not reading.records:
        raise DemoError(f"{topic} is not on the source: no group can read it")
    if reading.unread:
        raise DemoError(f"{topic}: partitions {_names(reading.unread)} not readable to their end")
    return {p: records for (_t, p), records in sorted(reading.records.items())}


def await_moved(
    bootstrap: str,
    stopped: StoppedGroup,
    timeout_s: float,
    check: Callable[[], None] = lambda: None,
) -> float:
    """Seconds until the group has a committed offset on the target for every partition it
    committed on the source; GroupNotMovedError after `timeout_s`. `check` runs between looks (it
    raises when the process that should move the group died)."""
    started = time.monotonic()
    deadline = started + timeout_s
    wanted = [TopicPartition(stopped.topic, p) for p in sorted(stopped.committed)]
    # Asking for committed offsets does not join the group: offsetsync still sees it idle.
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": stopped.group,
            "enable.auto.commit": False,
            "logger": QUIET_CLIENT_LOG,
        }
    )
    there: set[int] = set()
    failure = ""
    try:
        while True:
            check()
            try:
                there = {
                    tp.partition
                    for tp in consumer.committed(wanted, timeout=10)
                    if tp.error is None and tp.offset >= 0
                }
                failure = ""
            except KafkaException as exc:  # the coordinator moving: look again
                failure = f" (last look failed: {exc})"
            if len(there) == len(wanted):
                return time.monotonic() - started
            if time.monotonic() > deadline:
                missing = sorted(set(stopped.committed) - there)
                raise GroupNotMovedError(
                    f"{stopped.group} was not moved to the target within {timeout_s:.0f} s: no "
                    f"committed offset there for {stopped.topic} partitions {missing}{failure}"
                )
            time.sleep(_AWAIT_POLL_S)
    finally:
        consumer.close()


def resume_and_compare(bootstrap: str, stopped: StoppedGroup) -> FailoverResult:
    """The group resumes on the target; what it reads, against what it had not processed."""
    resumed = resume_on_target(bootstrap, stopped.group, stopped.topic, len(stopped.source))
    return compare_resumed(stopped, resumed)


def compare_resumed(
    stopped: StoppedGroup, resumed: Mapping[int, Sequence[ConsumedRecord]]
) -> FailoverResult:
    """Per partition, what the group read on the target against the source records it had not
    processed (key, value, headers without `exactly.origin`, timestamp)."""
    read = re_read = skipped = 0
    exact = True
    for partition in stopped.source:
        processed = [_content(r) for r in stopped.processed_records(partition)]
        unprocessed = [_content(r) for r in stopped.unprocessed_records(partition)]
        got = [_consumed_content(r) for r in resumed.get(partition, [])]
        read += len(got)
        re_read += sum((Counter(got) & Counter(processed)).values())
        skipped += sum((Counter(unprocessed) - Counter(got)).values())
        exact = exact and got == unprocessed
    exact = exact and re_read == 0 and skipped == 0
    return FailoverResult(len(stopped.source), stopped.processed, read, re_read, skipped, exact)


# --- the consumers, as an application runs them -------------------------------------------------


def process_and_stop(
    bootstrap: str, group: str, topic: str, counts: Mapping[int, int]
) -> dict[int, int]:
    """The group processes the first ``counts[p]`` readable records of each partition (ALL: to
    the end), commits as a consumer does, and leaves. Returns the offsets it committed."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "logger": QUIET_CLIENT_LOG,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in counts
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in counts])
        left = {p: n for p, n in counts.items() if n != 0}
        committed: dict[int, int] = {}
        for batch in _batches_until_done(
            consumer, lambda: left.keys(), f"{group}: {topic} partitions {{}} not processed"
        ):
            for message in batch:
                p = message.partition()
                if p not in left:
                    continue
                committed[p] = message.offset() + 1
                if left[p] != ALL:
                    left[p] -= 1
                    if left[p] == 0:
                        del left[p]
                        consumer.pause([TopicPartition(topic, p)])
            for p in [p for p, n in left.items() if n == ALL]:
                position = consumer.position([TopicPartition(topic, p)])[0].offset
                if position >= ends[p]:
                    # Read to the end: a consumer commits its position (past the last marker).
                    committed[p] = position
                    del left[p]
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in committed.items()],
            asynchronous=False,
        )
        return committed
    finally:
        consumer.close()


def resume_on_target(
    bootstrap: str, group: str, topic: str, partitions: int
) -> dict[int, list[ConsumedRecord]]:
    """The group, subscribed on the target as its application would be, reads every partition
    to its end from the committed offsets. No committed offset is an error, not a reset."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "error",
            "logger": QUIET_CLIENT_LOG,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
        consumer.subscribe([topic])
        read: dict[int, list[ConsumedRecord]] = {p: [] for p in range(partitions)}
        done: set[int] = set()
        for batch in _batches_until_done(
            consumer,
            lambda: ends.keys() - done,
            f"{group}: {topic} partitions {{}} not read to their end on the target",
        ):
            for message in batch:
                read[message.partition()].append(
                    ConsumedRecord(
                        message.partition(),
                        message.offset(),
                        message.key(),
                        message.value(),
                        tuple(message.headers() or ()),
                        message.timestamp(),
                    )
                )
            assignment = consumer.assignment()
            if assignment:
                # A partition with nothing to read has no position until a record arrives: its
                # committed offset at the end says it is done.
                for tp in consumer.position(assignment) + consumer.committed(assignment, 10):
                    if tp.offset >= ends[tp.partition]:
                        done.add(tp.partition)
        return read
    finally:
        consumer.close()


# --- comparing ----------------------------------------------------------------------------------


def _content(record: Record) -> Content:
    return (
        record.key,
        record.value,
        _without_origin(record.headers),
        record.timestamp_type,
        record.timestamp,
    )


def _consumed_content(record: ConsumedRecord) -> Content:
    timestamp_type, timestamp = record.timestamp
    return (record.key, record.value, _without_origin(record.headers), timestamp_type, timestamp)


def _without_origin(headers: Headers) -> Headers:
    return tuple((name, value) for name, value in headers if name != HEADER_PROVENANCE)


def _names(partitions: set[tuple[str, int]]) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in sorted(partitions))


def _batches_until_done(
    consumer: Consumer, unfinished: Callable[[], Collection[int]], failure: str
) -> Iterator[list[Message]]:
    """Batches of readable records while ``unfinished()`` names partitions; after _TIMEOUT_S, a
    DemoError: ``failure`` with the unfinished partitions in its ``{}``."""
    deadline = time.monotonic() + _TIMEOUT_S
    while left := unfinished():
        if time.monotonic() > deadline:
            raise DemoError(f"{failure.format(sorted(left))} within {_TIMEOUT_S:.0f} s")
        batch = consumer.consume(_CONSUME_BATCH, timeout=_POLL_S)
        for message in batch:
            if message.error():
                raise KafkaException(message.error())
        yield batch

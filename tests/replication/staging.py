"""Read the staging topic and prove it against the source: the end-to-end check of stage 1.

    source = read_source(source.bootstrap_servers, mix.topics)
    staged = await_staging_complete(target.bootstrap_servers, staging_topic, source, 60)
    report = verify_staging(source, staged, source_cluster_id=source.cluster_id,
                            topic_ids=topic_ids(source.bootstrap_servers, mix.topics))
    assert report.ok, report

Coordinates in every message: `topic[partition]@offset` for a source record and
`staging[partition]@offset` for an envelope.
"""

from __future__ import annotations

import bisect
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicCollection,
    TopicPartition,
    Uuid,
)
from confluent_kafka.admin import AdminClient

import envelope
from envelope import HEADER_PROVENANCE, Envelope, EnvelopeError, SourceRecord, decode_provenance
from runtime import ErrorClass, call_retrying, classify, kafka_error_of

SourcePartition = tuple[str, int]
SourceRecords = dict[SourcePartition, list[SourceRecord]]

# Violation kinds of a StagingReport, in the order str(report) lists them.
MISSING = "missing"  # (a) a readable source record in no envelope, byte-identical
ALTERED = "altered"  # (a) an envelope record whose bytes differ from the source record
NOT_READABLE = "not-readable"  # (b) an envelope record that is no readable source record
INCOMPLETE = "incomplete"  # (c) an envelope that skips readable records inside its range
GAP = "gap"  # (d) prev_offset jumps over readable records
BROKEN_CHAIN = "broken-chain"  # (d) prev_offset links to no earlier envelope's last record
LANE_SPLIT = "lane-split"  # (e) one source partition in several staging partitions
CLUSTER_ID = "cluster-id"  # (f) wrong source_cluster_id
TOPIC_ID = "topic-id"  # (f) wrong topic_id
KINDS = (
    MISSING,
    ALTERED,
    NOT_READABLE,
    INCOMPLETE,
    GAP,
    BROKEN_CHAIN,
    LANE_SPLIT,
    CLUSTER_ID,
    TOPIC_ID,
)

_NO_COMMITS_GROUP = "kafka-exactly-tests-reader-no-commits"
_BATCH = 500
_POLL_S = 0.2
_SHOWN_BYTES = 24


class StagedEnvelope(NamedTuple):
    """One decoded staging record: where it sits and what it carries."""

    partition: int
    offset: int
    envelope: Envelope


class StagingDecodeError(AssertionError):
    """Staging records that are not valid envelopes, each named by its coordinates."""

    def __init__(self, staging_topic: str, failures: Sequence[tuple[int, int, str]]) -> None:
        lines = [f"staging[{p}]@{o}: {reason}" for p, o, reason in failures[:10]]
        more = f"\n  ... and {len(failures) - 10} more" if len(failures) > 10 else ""
        super().__init__(
            f"{len(failures)} undecodable records in {staging_topic}:\n  "
            + "\n  ".join(lines)
            + more
        )
        self.failures = list(failures)


# --- reading ------------------------------------------------------------------------------------


def read_source(bootstrap: str, topics: Iterable[str], timeout_s: float = 60.0) -> SourceRecords:
    """Every readable (read_committed) record of `topics`, up to the end offsets seen at start.

    Every partition of every topic is a key, also an empty one; records are in offset order.
    """
    consumer = _reader(bootstrap)
    try:
        counts = _partition_counts(consumer, list(topics), must_exist=True)
        records: SourceRecords = {
            (topic, p): [] for topic, count in counts.items() for p in range(count)
        }
        ends = _end_offsets(consumer, records)

        def keep(message: Message) -> None:
            where = (message.topic(), message.partition())
            if message.offset() < ends[where]:
                timestamp_type, timestamp = message.timestamp()
                records[where].append(
                    SourceRecord(
                        message.offset(),
                        timestamp,
                        timestamp_type,
                        message.key(),
                        message.value(),
                        tuple(message.headers() or ()),
                    )
                )

        _assign_from_start(consumer, ends)
        _drain_to(consumer, ends, time.monotonic() + timeout_s, keep)
        return records
    finally:
        consumer.close()


def await_records(
    bootstrap: str,
    topics: Iterable[str],
    at_least: int,
    timeout_s: float = 120.0,
    supervise: Callable[[], object] = lambda: None,
    every_s: float = 0.5,
) -> SourceRecords:
    """read_source of ``topics`` once they hold ``at_least`` records in all, or what they hold
    at the deadline (the caller's assertions say what is missing). A topic stage 1 has not
    created yet, or one whose partitions have no leader yet, reads as empty; ``supervise`` runs
    between reads (restarting roles a test kills)."""
    topics = sorted(topics)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            records = read_source(bootstrap, topics)
        except LookupError:  # stage 1 has not created every destination topic yet
            records = {}
        except KafkaException as exc:  # a new topic's partitions without a leader yet
            error = kafka_error_of(exc)
            # A broker that has not learnt of a topic just created answers it is unknown.
            young = error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            if classify(error) is not ErrorClass.RETRIABLE and not young:
                raise
            records = {}
        if sum(len(r) for r in records.values()) >= at_least or time.monotonic() > deadline:
            return records
        supervise()
        time.sleep(every_s)


def read_staging(
    bootstrap: str, staging_topic: str, timeout_s: float = 60.0
) -> list[StagedEnvelope]:
    """Every envelope of `staging_topic` up to its end offsets now, in staging order.

    Raises StagingDecodeError naming every record that is not a valid envelope.
    """
    consumer = _reader(bootstrap)
    try:
        count = _partition_counts(consumer, [staging_topic], must_exist=True)[staging_topic]
        ends = _end_offsets(consumer, [(staging_topic, p) for p in range(count)])
        decoder = _Decoder()
        _assign_from_start(consumer, ends)
        _drain_to(consumer, ends, time.monotonic() + timeout_s, decoder.add)
        return decoder.result(staging_topic)
    finally:
        consumer.close()


def await_staging_complete(
    bootstrap_target: str,
    staging_topic: str,
    source_records: SourceRecords,
    timeout_s: float,
) -> list[StagedEnvelope]:
    """Read staging until an envelope covers every source record, or until `timeout_s` passes.

    Then read on to the staging end offsets of that moment and return it all in staging order,
    covered or not: verify_staging() says what is missing. The staging topic may not exist yet
    when this starts. Raises StagingDecodeError as soon as a record is not a valid envelope.
    """
    needed = {(t, p, r.offset) for (t, p), records in source_records.items() for r in records}
    deadline = time.monotonic() + timeout_s
    consumer = _reader(bootstrap_target)
    # Metadata and end offsets from a client of their own: on the reading consumer's connection
    # they would queue behind its long-polling fetches (up to fetch.wait.max.ms each).
    probe = _reader(bootstrap_target)
    decoder = _Decoder()
    assigned: set[int] = set()
    next_metadata = 0.0

    def cover(message: Message) -> None:
        staged = decoder.add(message)
        if staged is not None:
            env = staged.envelope
            for record in env.records:
                needed.discard((env.topic, env.partition, record.offset))

    try:
        while needed and not decoder.failures and time.monotonic() < deadline:
            if time.monotonic() >= next_metadata:
                counts = _partition_counts(probe, [staging_topic], must_exist=False)
                new = set(range(counts.get(staging_topic, 0))) - assigned
                if new:
                    consumer.incremental_assign(
                        [TopicPartition(staging_topic, p, OFFSET_BEGINNING) for p in sorted(new)]
                    )
                    assigned |= new
                next_metadata = time.monotonic() + 1.0
            if not assigned:
                time.sleep(_POLL_S)
                continue
            for message in consumer.consume(_BATCH, timeout=_POLL_S):
                _raise_on_error(message)
                cover(message)
        if assigned:
            ends = _end_offsets(probe, [(staging_topic, p) for p in sorted(assigned)])
            _drain_to(consumer, ends, time.monotonic() + 30.0, decoder.add)
        return decoder.result(staging_topic)
    finally:
        consumer.close()
        probe.close()


def topic_ids(bootstrap: str, topics: Iterable[str]) -> dict[str, bytes]:
    """Each topic's id as 16 raw bytes: most, then least significant bits, big-endian."""
    names = list(topics)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.describe_topics(TopicCollection(names), request_timeout=30)
    return {name: uuid_bytes(futures[name].result(timeout=30).topic_id) for name in names}


def uuid_bytes(uuid: Uuid) -> bytes:
    """A topic Uuid's 16 bytes; its two halves come back as signed 64-bit ints."""
    most = uuid.get_most_significant_bits()
    least = uuid.get_least_significant_bits()
    return most.to_bytes(8, "big", signed=True) + least.to_bytes(8, "big", signed=True)


class _Decoder:
    def __init__(self) -> None:
        self.staged: list[StagedEnvelope] = []
        self.failures: list[tuple[int, int, str]] = []

    def add(self, message: Message) -> StagedEnvelope | None:
        where = (message.partition(), message.offset())
        value = message.value()
        if value is None:
            self.failures.append((*where, "null value (no envelope)"))
            return None
        try:
            staged = StagedEnvelope(*where, envelope.decode(value))
        except EnvelopeError as exc:
            self.failures.append((*where, f"{type(exc).__name__}: {exc}"))
            return None
        self.staged.append(staged)
        return staged

    def result(self, staging_topic: str) -> list[StagedEnvelope]:
        if self.failures:
            raise StagingDecodeError(staging_topic, sorted(self.failures))
        return sorted(self.staged, key=lambda s: (s.partition, s.offset))


def _reader(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": _NO_COMMITS_GROUP,  # assign() only: the group is never joined
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )


def _partition_counts(consumer: Consumer, topics: list[str], *, must_exist: bool) -> dict[str, int]:
    metadata = consumer.list_topics(timeout=10)
    counts = {}
    for topic in topics:
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            if must_exist:
                raise LookupError(f"topic {topic!r} not found: {found.error if found else ''}")
            continue
        counts[topic] = len(found.partitions)
    return counts


def _end_offsets(
    consumer: Consumer, partitions: Iterable[SourcePartition]
) -> dict[SourcePartition, int]:
    ends = {}
    for topic, partition in partitions:
        # Right after a leader moved, its new leader answers OFFSET_NOT_AVAILABLE until its high
        # watermark caught up (retriable): ask again, as a user's tool would.
        wanted = TopicPartition(topic, partition)
        _low, high = call_retrying(
            lambda wanted=wanted: consumer.get_watermark_offsets(wanted, timeout=10, cached=False),
            deadline_s=60,
        )
        ends[(topic, partition)] = high
    return ends


def _assign_from_start(consumer: Consumer, ends: Mapping[SourcePartition, int]) -> None:
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for (t, p), end in ends.items() if end])


def _drain_to(
    consumer: Consumer,
    ends: Mapping[SourcePartition, int],
    deadline: float,
    handle: Callable[[Message], object],
) -> None:
    """Consume until every partition's position reaches its end offset (positions pass aborted
    records and transaction markers too)."""
    pending = {where for where, end in ends.items() if end > 0}
    while pending:
        for position in consumer.position([TopicPartition(t, p) for t, p in pending]):
            if position.offset >= ends[(position.topic, position.partition)]:
                pending.discard((position.topic, position.partition))
        if not pending:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"not read to the end offsets {dict(ends)}: {sorted(pending)}")
        for message in consumer.consume(_BATCH, timeout=_POLL_S):
            _raise_on_error(message)
            handle(message)


def _raise_on_error(message: Message) -> None:
    if message.error():
        raise KafkaException(message.error())


# --- writing: a stand-in for stage 1 (self-tests; stage-2 tests without a replicator) ----------


def lane_of(topic: str, partition: int, staging_partitions: int) -> int:
    """A stable staging partition for a source partition (crc32, like a real lane function)."""
    return zlib.crc32(f"{topic}/{partition}".encode()) % staging_partitions


def make_envelopes(
    source_records: Mapping[SourcePartition, Sequence[SourceRecord]],
    *,
    source_cluster_id: str,
    topic_ids: Mapping[str, bytes],
    max_records: int = 100,
    max_bytes: int = 2_500_000,
) -> dict[SourcePartition, list[Envelope]]:
    """One stage-1 session per source partition: runs of at most `max_records` records and about
    `max_bytes` payload (a single larger record gets an envelope of its own), chained by
    prev_offset."""
    result: dict[SourcePartition, list[Envelope]] = {}
    for (topic, partition), records in source_records.items():
        envelopes: list[Envelope] = []
        for run in _runs_of(records, max_records, max_bytes):
            previous = envelopes[-1].records[-1].offset if envelopes else None
            topic_id = topic_ids[topic]
            envelopes.append(Envelope(source_cluster_id, topic, topic_id, partition, previous, run))
        result[(topic, partition)] = envelopes
    return result


def _runs_of(
    records: Sequence[SourceRecord], max_records: int, max_bytes: int
) -> Iterator[tuple[SourceRecord, ...]]:
    run: list[SourceRecord] = []
    size = 0
    for record in records:
        headers = sum(len(name) + len(value or b"") for name, value in record.headers)
        record_size = len(record.key or b"") + len(record.value or b"") + headers + 32
        if run and (len(run) == max_records or size + record_size > max_bytes):
            yield tuple(run)
            run, size = [], 0
        run.append(record)
        size += record_size
    if run:
        yield tuple(run)


def write_staging(
    bootstrap: str, staging_topic: str, envelopes: Iterable[tuple[int, Envelope]]
) -> None:
    """Produce each (staging partition, envelope) in order with an idempotent producer."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "message.max.bytes": 16 * 1024 * 1024,
        }
    )
    errors: list[str] = []

    def on_delivery(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            errors.append(str(error))

    for partition, env in envelopes:
        producer.produce(
            staging_topic, envelope.encode(env), partition=partition, on_delivery=on_delivery
        )
        producer.poll(0)
    remaining = producer.flush(60)
    if remaining or errors:
        raise RuntimeError(f"staging: {remaining} envelopes undelivered, failures {errors[:3]}")


# --- verifying ----------------------------------------------------------------------------------


@dataclass
class StagingReport:
    """What verify_staging() found; `ok` when no violation of any kind."""

    source_partitions: int = 0
    source_records: int = 0
    envelopes: int = 0
    staged_records: int = 0
    sessions: int = 0
    duplicates: int = 0
    # Source partition -> the staging partitions its envelopes sit in (one, when all is well).
    lanes: dict[SourcePartition, list[int]] = field(default_factory=dict)
    violation_counts: Counter[str] = field(default_factory=Counter)
    # The first few messages of each kind, with coordinates.
    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    max_listed: int = 5

    @property
    def ok(self) -> bool:
        return not self.violation_counts

    def add(self, kind: str, message: str, count: int = 1) -> None:
        self.violation_counts[kind] += count
        if len(self.violations[kind]) < self.max_listed:
            self.violations[kind].append(message)

    def __str__(self) -> str:
        lines = [
            f"staging {'OK' if self.ok else 'VIOLATED'}: {self.source_records} source records in "
            f"{self.source_partitions} partitions; {self.staged_records} staged records in "
            f"{self.envelopes} envelopes, {self.sessions} sessions, {self.duplicates} duplicates"
        ]
        for kind in KINDS:
            if self.violation_counts[kind]:
                lines.append(f"{kind}: {self.violation_counts[kind]}")
                lines.extend(f"  {message}" for message in self.violations[kind])
        return "\n".join(lines)


def verify_staging(
    source_records: Mapping[SourcePartition, Sequence[SourceRecord]],
    staged: Iterable[StagedEnvelope | tuple[int, int, Envelope]],
    *,
    source_cluster_id: str,
    topic_ids: Mapping[str, bytes] | None = None,
    max_listed: int = 5,
) -> StagingReport:
    """Check the staged envelopes (in staging order) against the readable source records.

    (a) every readable source record is in some envelope, byte-identical (MISSING, ALTERED);
    (b) no envelope record is other than a readable source record (NOT_READABLE);
    (c) every envelope holds exactly the readable records from its first to its last (INCOMPLETE);
    (d) prev_offset p jumps over no readable record (GAP), and an earlier envelope of the same
        source partition ends exactly at p (BROKEN_CHAIN);
    (e) all envelopes of a source partition sit in one staging partition (LANE_SPLIT);
    (f) source_cluster_id, and topic_id where `topic_ids` knows the topic (CLUSTER_ID, TOPIC_ID).
    """
    report = StagingReport(max_listed=max_listed)
    by_partition: dict[SourcePartition, list[StagedEnvelope]] = defaultdict(list)
    for item in staged:
        staged_envelope = StagedEnvelope(*item)
        env = staged_envelope.envelope
        report.envelopes += 1
        report.staged_records += len(env.records)
        report.sessions += env.prev_offset is None
        by_partition[(env.topic, env.partition)].append(staged_envelope)
        _check_identity(report, staged_envelope, source_cluster_id, topic_ids)

    report.source_partitions = len(source_records)
    report.source_records = sum(len(records) for records in source_records.values())
    for where in sorted(set(source_records) | set(by_partition)):
        envelopes = by_partition.get(where, [])
        if envelopes:
            report.lanes[where] = sorted({s.partition for s in envelopes})
        if where not in source_records:
            for s in envelopes:
                report.add(
                    NOT_READABLE,
                    f"envelope {_envelope_place(s)}: {where[0]}[{where[1]}] is no source partition"
                    " that was read",
                    len(s.envelope.records),
                )
            continue
        _check_partition(report, where, source_records[where], envelopes)
    return report


def _check_identity(
    report: StagingReport,
    staged: StagedEnvelope,
    source_cluster_id: str,
    topic_ids: Mapping[str, bytes] | None,
) -> None:
    env = staged.envelope
    if env.source_cluster_id != source_cluster_id:
        report.add(
            CLUSTER_ID,
            f"envelope {_envelope_place(staged)}: source_cluster_id {env.source_cluster_id!r},"
            f" the source cluster is {source_cluster_id!r}",
        )
    expected = (topic_ids or {}).get(env.topic)
    if expected is not None and env.topic_id != expected:
        report.add(
            TOPIC_ID,
            f"envelope {_envelope_place(staged)}: topic_id {env.topic_id.hex()},"
            f" the source topic's id is {expected.hex()}",
        )


def _check_partition(
    report: StagingReport,
    where: SourcePartition,
    source: Sequence[SourceRecord],
    envelopes: list[StagedEnvelope],
) -> None:
    topic, partition = where
    offsets = [record.offset for record in source]
    by_offset = {record.offset: record for record in source}
    delivered: set[int] = set()  # offsets that arrived byte-identical
    seen: Counter[int] = Counter()
    ends: set[int] = set()  # last offsets of the envelopes so far, in staging order

    lanes = report.lanes.get(where, [])
    if len(lanes) > 1:
        counts = Counter(s.partition for s in envelopes)
        report.add(
            LANE_SPLIT,
            f"{topic}[{partition}] is spread over staging partitions "
            + ", ".join(f"{p} ({counts[p]} envelopes)" for p in lanes),
        )

    for staged in envelopes:
        env = staged.envelope
        first, last = env.records[0].offset, env.records[-1].offset
        place = f"{_envelope_place(staged)} ({topic}[{partition}]@{first}..{last})"
        for record in env.records:
            seen[record.offset] += 1
            original = by_offset.get(record.offset)
            if original is None:
                report.add(
                    NOT_READABLE,
                    f"{topic}[{partition}]@{record.offset} in {place} is no readable source record",
                )
            elif record == original:
                delivered.add(record.offset)
            else:
                report.add(
                    ALTERED,
                    f"{topic}[{partition}]@{record.offset} in {place}: "
                    + "; ".join(_differences(original, record)),
                )

        inside = set(
            offsets[bisect.bisect_left(offsets, first) : bisect.bisect_right(offsets, last)]
        )
        skipped = sorted(inside - {record.offset for record in env.records})
        if skipped:
            report.add(
                INCOMPLETE,
                f"envelope {place} skips readable offsets {_offset_list(skipped)}",
                len(skipped),
            )

        previous = env.prev_offset
        if previous is not None:
            jumped = offsets[
                bisect.bisect_right(offsets, previous) : bisect.bisect_left(offsets, first)
            ]
            if jumped:
                report.add(
                    GAP,
                    f"envelope {place} with prev_offset {previous} jumps over readable offsets "
                    f"{_offset_list(jumped)}",
                )
            if previous not in ends:
                earlier = ", ".join(str(e) for e in sorted(ends)[-5:]) or "none"
                report.add(
                    BROKEN_CHAIN,
                    f"envelope {place}: prev_offset {previous} is the last offset of no earlier "
                    f"envelope of {topic}[{partition}] (the latest ones end at {earlier})",
                )
        ends.add(last)

    report.duplicates += sum(n - 1 for n in seen.values() if n > 1)
    missing = [offset for offset in offsets if offset not in delivered]
    for run in _runs(missing, offsets):
        label = f"@{run[0]}" if len(run) == 1 else f"@{run[0]}..{run[-1]} ({len(run)} records)"
        report.add(MISSING, f"{topic}[{partition}]{label} in no envelope byte-identical", len(run))


def _runs(missing: list[int], offsets: list[int]) -> list[list[int]]:
    """Split `missing` into runs of records that are consecutive among the readable `offsets`."""
    index = {offset: i for i, offset in enumerate(offsets)}
    runs: list[list[int]] = []
    for offset in missing:
        if runs and index[runs[-1][-1]] + 1 == index[offset]:
            runs[-1].append(offset)
        else:
            runs.append([offset])
    return runs


def _differences(source: SourceRecord, staged: SourceRecord) -> list[str]:
    found = []
    for name in ("timestamp", "timestamp_type", "key", "value", "headers"):
        want, got = getattr(source, name), getattr(staged, name)
        if want != got:
            found.append(f"{name} {_show(got)}, the source has {_show(want)}")
    return found


def _show(value: object) -> str:
    if isinstance(value, bytes):
        shown = value[:_SHOWN_BYTES]
        return repr(shown) + (f"... ({len(value)} bytes)" if len(value) > _SHOWN_BYTES else "")
    if isinstance(value, tuple):
        return "(" + ", ".join(f"({n!r}, {_show(v)})" for n, v in value) + ")"
    return repr(value)


def _offset_list(offsets: Sequence[int]) -> str:
    shown = ", ".join(str(o) for o in offsets[:10])
    return f"[{shown}{', ...' if len(offsets) > 10 else ''}] ({len(offsets)})"


def _envelope_place(staged: StagedEnvelope) -> str:
    return f"staging[{staged.partition}]@{staged.offset}"


def _content(record: SourceRecord) -> tuple[object, ...]:
    headers = [h for h in record.headers if h[0] != HEADER_PROVENANCE]
    return (record.key, record.value, tuple(headers), record.timestamp, record.timestamp_type)


def assert_exactly_once(
    source_cluster: object, source_records: SourceRecords, destination_records: object
) -> None:
    """Every source partition's records on its destination partition, each once, in order and
    byte-identical, with provenance naming ``source_cluster`` (anything with a cluster_id) and
    each record's source offset."""
    problems = []
    for (topic, partition), records in sorted(source_records.items()):
        written = destination_records.get((topic, partition), [])  # type: ignore[attr-defined]
        want = [_content(r) for r in records]
        got = [_content(r) for r in written]
        if got != want:
            problems.append(f"{topic}[{partition}]: {len(want)} source records, {len(got)} written")
            continue
        origins = [decode_provenance(dict(r.headers)[HEADER_PROVENANCE]) for r in written]
        if [(o.source_cluster_id, o.partition, o.offset) for o in origins] != [
            (source_cluster.cluster_id, partition, r.offset)  # type: ignore[attr-defined]
            for r in records
        ]:
            problems.append(f"{topic}[{partition}]: provenance headers do not match")
    assert problems == [], problems[:10]

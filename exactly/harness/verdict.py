"""Source against destination, record by record: the demo's verdict.

For every source partition, the committed records (read_committed, to the end) are compared
with what a read_committed consumer of the same destination partition reads, in order: key,
value, headers, timestamp and its type. The `exactly.origin` header stage 2 adds is no part of
the content; it must name the source cluster, this partition and the offset of the record it
copies, and is what lines the two sides up, so that one lost record shows as one "missing",
not as every later record "changed".

Counts per partition: matched, missing (a source record that never arrived), duplicated (one
that arrived more than once), changed (arrived altered, out of order, with a wrong origin, or
not a committed source record at all: a record of an aborted transaction, say).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from envelope import HEADER_PROVENANCE, Provenance, decode_provenance
from exactly.harness.quiet import QUIET_CLIENT_LOG

Partition = tuple[str, int]
Headers = tuple[tuple[str, bytes | None], ...]
EXAMPLES_PER_PARTITION = 3
_BATCH = 1000
_POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_type: int
    timestamp: int


@dataclass
class Reading:
    """Every readable record per partition; `unread`: partitions not read to their end."""

    records: dict[Partition, list[Record]] = field(default_factory=dict)
    unread: set[Partition] = field(default_factory=set)


# --- reading ------------------------------------------------------------------------------------


def read_committed(bootstrap_servers: str, topics: Iterable[str], timeout_s: float) -> Reading:
    """Every partition of every existing topic in `topics`, from the beginning to the end offsets
    of now, as a read_committed consumer sees it. A topic that does not exist has no entries."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": "exactly-demo-verdict",  # assign() only: the group is never joined
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "logger": QUIET_CLIENT_LOG,
        }
    )
    try:
        reading = Reading()
        ends = _end_offsets(consumer, topics)
        for where in ends:
            reading.records[where] = []
        consumer.assign(
            [TopicPartition(t, p, OFFSET_BEGINNING) for (t, p), end in ends.items() if end > 0]
        )
        pending = {where for where, end in ends.items() if end > 0}
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(_BATCH, timeout=_POLL_S):
                if message.error() is not None:
                    continue  # transient (a leader moving); the position check decides
                where = (message.topic(), message.partition())
                if message.offset() < ends[where]:
                    reading.records[where].append(_record(message))
            # Positions pass aborted records and transaction markers, which are never delivered.
            for position in consumer.position([TopicPartition(t, p) for t, p in pending]):
                if position.offset >= ends[(position.topic, position.partition)]:
                    pending.discard((position.topic, position.partition))
        reading.unread = pending
        return reading
    finally:
        consumer.close()


def _end_offsets(consumer: Consumer, topics: Iterable[str]) -> dict[Partition, int]:
    metadata = consumer.list_topics(timeout=10)
    ends = {}
    for name in topics:
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None:
            continue
        for partition in sorted(topic.partitions):
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(name, partition), timeout=10, cached=False
            )
            ends[(name, partition)] = high
    return ends


def _record(message: Message) -> Record:
    timestamp_type, timestamp = message.timestamp()
    return Record(
        message.offset(),
        message.key(),
        message.value(),
        tuple(message.headers() or ()),
        timestamp_type,
        timestamp,
    )


# --- comparing ----------------------------------------------------------------------------------


@dataclass
class PartitionVerdict:
    topic: str
    partition: int
    source: int = 0  # committed source records
    destination: int = 0  # readable destination records
    matched: int = 0
    missing: int = 0
    duplicated: int = 0
    changed: int = 0
    uncommitted: int = 0  # of `changed`: copies of no committed source record (aborted ones?)
    unread: bool = False  # a side could not be read to its end: the counts are incomplete
    examples: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.missing or self.duplicated or self.changed or self.unread)

    @property
    def name(self) -> str:
        return f"{self.topic}[{self.partition}]"

    def note(self, text: str) -> None:
        if len(self.examples) < EXAMPLES_PER_PARTITION:
            self.examples.append(f"{self.name} {text}")


def compare_partition(
    source_cluster_id: str,
    topic: str,
    partition: int,
    source: Sequence[Record],
    destination: Sequence[Record],
) -> PartitionVerdict:
    """Walk the destination in order, lining each record up with the source record its origin
    header names."""
    verdict = PartitionVerdict(topic, partition, len(source), len(destination))
    index = {record.offset: i for i, record in enumerate(source)}
    arrived: dict[int, int] = {}  # source index -> destination offset of its first copy
    next_index = 0  # every source index below this one has been passed
    for copy in destination:
        origin = _origin(copy)
        if isinstance(origin, str):
            verdict.changed += 1
            verdict.note(f"destination offset {copy.offset}: {origin}")
            continue
        problem = _wrong_origin(source_cluster_id, partition, origin)
        if problem:
            verdict.changed += 1
            verdict.note(f"destination offset {copy.offset}: {problem}")
            continue
        i = index.get(origin.offset)
        if i is None:
            verdict.changed += 1
            verdict.uncommitted += 1
            verdict.note(
                f"destination offset {copy.offset} copies source offset {origin.offset}, "
                "which is no committed source record (of an aborted transaction?)"
            )
            continue
        if i in arrived:
            verdict.duplicated += 1
            verdict.note(
                f"source offset {origin.offset} arrived again (destination offsets "
                f"{arrived[i]} and {copy.offset})"
            )
            continue
        arrived[i] = copy.offset
        differences = _differences(source[i], copy)
        if differences:
            verdict.changed += 1
            verb = "differs" if len(differences) == 1 else "differ"
            verdict.note(f"source offset {origin.offset}: {', '.join(differences)} {verb}")
        elif i < next_index:
            verdict.changed += 1
            verdict.note(f"source offset {origin.offset} arrived out of order")
        else:
            verdict.matched += 1
        next_index = max(next_index, i + 1)
    _note_missing(verdict, source, arrived)
    return verdict


def _note_missing(
    verdict: PartitionVerdict, source: Sequence[Record], arrived: Mapping[int, int]
) -> None:
    missing = [record.offset for i, record in enumerate(source) if i not in arrived]
    verdict.missing = len(missing)
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        verdict.note(f"source offset {missing[0]}{more} never arrived")


def _origin(record: Record) -> Provenance | str:
    """The origin a destination record names, or what is wrong with its header."""
    values = [value for name, value in record.headers if name == HEADER_PROVENANCE]
    if not values or values[-1] is None:
        return f"no {HEADER_PROVENANCE} header"
    try:
        return decode_provenance(values[-1])
    except (ValueError, UnicodeDecodeError):
        return f"unreadable {HEADER_PROVENANCE} header {values[-1]!r}"


def _wrong_origin(source_cluster_id: str, partition: int, origin: Provenance) -> str | None:
    if origin.source_cluster_id != source_cluster_id:
        return f"{HEADER_PROVENANCE} names cluster {origin.source_cluster_id}, not the source"
    if origin.partition != partition:
        return f"{HEADER_PROVENANCE} names source partition {origin.partition}"
    return None


def _differences(original: Record, copy: Record) -> list[str]:
    headers = tuple(h for h in copy.headers if h[0] != HEADER_PROVENANCE)
    fields = {
        "key": (original.key, copy.key),
        "value": (original.value, copy.value),
        "headers": (original.headers, headers),
        "timestamp": (
            (original.timestamp_type, original.timestamp),
            (copy.timestamp_type, copy.timestamp),
        ),
    }
    return [name for name, (want, got) in fields.items() if want != got]


@dataclass
class Verdict:
    partitions: list[PartitionVerdict]

    @property
    def clean(self) -> bool:
        return bool(self.partitions) and all(p.clean for p in self.partitions)

    def total(self, counter: str) -> int:
        return sum(getattr(p, counter) for p in self.partitions)

    def headline(self) -> str:
        counts = (
            f"{self.total('missing')} missing, {self.total('duplicated')} duplicated, "
            f"{self.total('changed')} changed"
        )
        where = f"{self.total('source')} records in {len(self.partitions)} partitions"
        if self.clean:
            return f"EXACTLY ONCE: {where}, {counts}"
        unread = sum(p.unread for p in self.partitions)
        if unread:
            counts += f", {unread} partitions not read to their end"
        return f"NOT EXACTLY ONCE: {where}, {counts}"

    def examples(self, limit: int = 12) -> list[str]:
        return [text for p in self.partitions for text in p.examples][:limit]


def judge(source_cluster_id: str, source: Reading, destination: Reading) -> Verdict:
    """Compare every source partition with its destination partition."""
    verdicts = []
    for topic, partition in sorted(source.records):
        verdict = compare_partition(
            source_cluster_id,
            topic,
            partition,
            source.records[(topic, partition)],
            destination.records.get((topic, partition), []),
        )
        for side, reading in (("source", source), ("destination", destination)):
            if (topic, partition) in reading.unread:
                verdict.unread = True
                verdict.note(f"the {side} partition could not be read to its end")
        verdicts.append(verdict)
    for topic, partition in sorted(set(destination.records) - set(source.records)):
        records = len(destination.records[(topic, partition)])
        if records:
            extra = PartitionVerdict(topic, partition, destination=records, changed=records)
            extra.note("is a destination partition without a source partition")
            verdicts.append(extra)
    return Verdict(verdicts)

"""offsetsync.translate against real Kafka: a group's committed source offset becomes the
destination offset from which it reads exactly the records it had not processed (issue 7)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from envelope import HEADER_PROVENANCE, encode_provenance
from offsetsync.reading import ClusterReader
from offsetsync.translate import (
    BehindRetention,
    Request,
    Translated,
    Waiting,
    translate,
    translate_all,
)
from tests.kafka_helpers import create_topic, read_all
from tests.validator.planting import PARTITIONS, copy_to_destination, create_source


@pytest.fixture(scope="module")
def flow(source_cluster, target_cluster):
    """A source topic with markers, aborted records and an out-of-order timestamp (planting's),
    and three copies: with the provenance header, without it, and the first 10 records only."""
    topic = f"offsetsync.{uuid.uuid4().hex[:8]}"
    records = create_source(source_cluster.bootstrap_servers, topic)
    copies = {}
    for name, header, subset in (
        ("header", True, records),
        ("plain", False, records),
        ("partial", True, [r for r in records if r.offset < 10]),
    ):
        copies[name] = f"{topic}.{name}"
        copy_to_destination(
            target_cluster.bootstrap_servers,
            copies[name],
            subset,
            source_cluster_id=source_cluster.cluster_id if header else None,
            faults=False,
        )
    return topic, records, copies


@pytest.fixture(scope="module")
def readers(source_cluster, target_cluster):
    source, destination = (
        ClusterReader(config, AdminClient(config))
        for config in (
            {"bootstrap.servers": cluster.bootstrap_servers}
            for cluster in (source_cluster, target_cluster)
        )
    )
    yield source, destination
    source.close()
    destination.close()


def _translate(
    readers, source_cluster, topic, destination_topic, committed, partition=0, *, header=True
):
    source, destination = readers
    return translate(
        source,
        destination,
        source_topic=topic,
        destination_topic=destination_topic,
        partition=partition,
        committed=committed,
        source_cluster_id=source_cluster.cluster_id,
        header=header,
    )


def _resumes_exactly(target_cluster, records, destination_topic, committed, answer, partition=0):
    """What the moved group reads on the destination from `answer` is what it had not yet
    read on the source from `committed`: nothing again, nothing skipped."""
    unread = [r.value for r in records if r.partition == partition and r.offset >= committed]
    copies = read_all(target_cluster.bootstrap_servers, destination_topic, PARTITIONS)
    resumed = [r.value for r in copies if r.partition == partition and r.offset >= answer]
    assert resumed == unread


# Partition 0 of the source: readable 0-14, a commit marker at 15, aborted records 16-25, a
# marker at 26, readable 27-41 (41 carries the timestamp of 12: out of order), a marker at 42.
@pytest.mark.parametrize(
    ("case", "committed"),
    [
        ("at the start", 0),
        ("mid-stream", 5),
        ("on a commit marker", 15),
        ("inside an aborted transaction", 20),
        ("before a record with an out-of-order timestamp", 41),
        ("on the last marker: caught up", 42),
        ("at the end: caught up", 43),
    ],
)
def test_a_committed_offset_resumes_exactly_with_the_header(
    flow, readers, source_cluster, target_cluster, case, committed
):
    topic, records, copies = flow
    answer = _translate(readers, source_cluster, topic, copies["header"], committed)
    assert isinstance(answer, Translated), (case, answer)
    assert answer.exact
    _resumes_exactly(
        target_cluster, records, copies["header"], committed, answer.destination_offset
    )


@pytest.mark.parametrize("committed", [0, 5, 15, 41, 43])
def test_without_the_header_the_timestamp_may_re_read_but_never_skips(
    flow, readers, source_cluster, target_cluster, committed
):
    topic, records, copies = flow
    answer = _translate(readers, source_cluster, topic, copies["plain"], committed, header=False)
    assert isinstance(answer, Translated)
    assert not answer.exact
    unread = [r.value for r in records if r.partition == 0 and r.offset >= committed]
    copies_read = read_all(target_cluster.bootstrap_servers, copies["plain"], PARTITIONS)
    resumed = [
        r.value for r in copies_read if r.partition == 0 and r.offset >= answer.destination_offset
    ]
    # Everything unread is there, in order, after whatever is read again.
    assert resumed[len(resumed) - len(unread) :] == unread


def test_a_group_ahead_of_replication_waits(flow, readers, source_cluster):
    topic, _records, copies = flow
    assert _translate(readers, source_cluster, topic, copies["partial"], 12) == Waiting(12)
    assert _translate(readers, source_cluster, topic, copies["partial"], 10) == Waiting(10)
    reached = _translate(readers, source_cluster, topic, copies["partial"], 9)
    assert reached == Translated(9, exact=True)


def test_records_of_one_millisecond_are_told_apart_by_the_header(
    readers, source_cluster, target_cluster
):
    topic = f"offsetsync.samems.{uuid.uuid4().hex[:8]}"
    create_topic(source_cluster.bootstrap_servers, topic, 1)
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    moment = int(time.time() * 1000)
    for i in range(10):
        producer.produce(topic, value=b"%d" % i, partition=0, timestamp=moment)
    assert producer.flush(30) == 0
    records = read_all(source_cluster.bootstrap_servers, topic, 1)
    for name, header in (("header", True), ("plain", False)):
        copy_to_destination(
            target_cluster.bootstrap_servers,
            f"{topic}.{name}",
            records,
            source_cluster_id=source_cluster.cluster_id if header else None,
            faults=False,
            partitions=1,
        )
    exact = _translate(readers, source_cluster, topic, f"{topic}.header", 5)
    assert exact == Translated(5, exact=True)
    # The timestamp alone points at the first of the millisecond: 5 records read again.
    plain = _translate(readers, source_cluster, topic, f"{topic}.plain", 5, header=False)
    assert plain == Translated(0, exact=False)


def test_a_group_behind_source_retention_is_not_translated(readers, source_cluster):
    topic = f"offsetsync.retention.{uuid.uuid4().hex[:8]}"
    create_topic(source_cluster.bootstrap_servers, topic, 1)
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    for i in range(10):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": source_cluster.bootstrap_servers})
    [deleted] = admin.delete_records([TopicPartition(topic, 0, 5)]).values()
    deleted.result(30)
    # The records it would read next are gone from the source: no exact answer exists.
    answer = _translate(readers, source_cluster, topic, f"{topic}.copy", 2)
    assert answer == BehindRetention(5)


@pytest.mark.parametrize("gap", [500, 3])
def test_a_whole_cycle_at_once_gives_each_offset_its_own_answer(
    flow, readers, source_cluster, target_cluster, monkeypatch, gap
):
    """Every committed offset of every partition in one call, as a sync cycle asks: each
    answer resumes exactly. A gap of 3, with one record per poll, makes the readers seek over
    every longer stretch instead of finding it in a batch already fetched."""
    monkeypatch.setattr("offsetsync.translate._GAP", gap)
    if gap < 500:
        monkeypatch.setattr("offsetsync.reading._BATCH", 1)
    topic, records, copies = flow
    requests = [
        Request(topic, copies["header"], partition, committed)
        for partition in range(PARTITIONS)
        for committed in range(0, 44, 1 + partition % 4)
    ]
    answers = translate_all(*readers, requests, source_cluster.cluster_id)
    assert answers.keys() == set(requests)
    copied = read_all(target_cluster.bootstrap_servers, copies["header"], PARTITIONS)
    for request in requests:
        answer = answers[request]
        assert isinstance(answer, Translated), (request, answer)
        assert answer.exact
        unread = [
            r.value
            for r in records
            if r.partition == request.partition and r.offset >= request.committed
        ]
        resumed = [
            r.value
            for r in copied
            if r.partition == request.partition and r.offset >= answer.destination_offset
        ]
        assert resumed == unread, request


def test_a_compacted_away_offset_resumes_at_the_next_surviving_record(
    readers, source_cluster, target_cluster
):
    topic = f"offsetsync.compacted.{uuid.uuid4().hex[:8]}"
    create_topic(
        source_cluster.bootstrap_servers,
        topic,
        1,
        {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"},
    )
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    for key, value in ((b"a", b"a1"), (b"b", b"b1"), (b"a", b"a2"), (b"b", b"b2"), (b"c", b"c1")):
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0
    # Copied before the cleaner ran, as replication usually is.
    before = read_all(source_cluster.bootstrap_servers, topic, 1)
    time.sleep(0.2)
    # A record after segment.ms rolls the segment: offsets 0 and 1 become compactable.
    producer.produce(topic, key=b"d", value=b"d1", partition=0)
    assert producer.flush(30) == 0
    deadline = time.monotonic() + 60
    while {r.offset for r in read_all(source_cluster.bootstrap_servers, topic, 1)} != {2, 3, 4, 5}:
        assert time.monotonic() < deadline, "the log cleaner did not compact offsets 0 and 1"
        time.sleep(0.5)
    last = [r for r in read_all(source_cluster.bootstrap_servers, topic, 1) if r.offset == 5]
    copy = f"{topic}.copy"
    copy_to_destination(
        target_cluster.bootstrap_servers,
        copy,
        before + last,
        source_cluster_id=source_cluster.cluster_id,
        faults=False,
        partitions=1,
    )
    # Committed 1: the group processed a1; b1 is compacted away on the source (b2 replaced it),
    # so the next record a source consumer would read is a2, at offset 2, copied at 2.
    answer = _translate(readers, source_cluster, topic, copy, 1)
    assert answer == Translated(2, exact=True)


def test_a_hint_far_behind_the_copy_is_asked_for_once_not_for_every_record_read(
    readers, source_cluster, target_cluster, monkeypatch
):
    """A zombie stage 2 wrote a copy of a late record and was aborted, before the committed
    copies: the destination's time index then points the late record's timestamp at the
    zombie's write, thousands of records before its committed copy."""
    topic = f"offsetsync.zombiehint.{uuid.uuid4().hex[:8]}"
    count, committed = 3000, 2900
    create_topic(source_cluster.bootstrap_servers, topic, 1)
    create_topic(target_cluster.bootstrap_servers, topic, 1)
    base = int(time.time() * 1000) - count
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    for i in range(count):
        producer.produce(topic, value=b"%d" % i, partition=0, timestamp=base + i)
    assert producer.flush(30) == 0

    def copy(producer: Producer, offset: int) -> None:
        origin = encode_provenance(source_cluster.cluster_id, 0, offset)
        producer.produce(
            topic,
            value=b"%d" % offset,
            partition=0,
            timestamp=base + offset,
            headers=[(HEADER_PROVENANCE, origin)],
        )

    stage_2 = Producer(
        {"bootstrap.servers": target_cluster.bootstrap_servers, "transactional.id": topic}
    )
    stage_2.init_transactions(30)
    stage_2.begin_transaction()
    copy(stage_2, count - 1)  # the zombie's write: in the log, then aborted
    assert stage_2.flush(30) == 0
    stage_2.abort_transaction(30)
    stage_2.begin_transaction()
    for offset in range(count):
        copy(stage_2, offset)
    stage_2.commit_transaction(30)

    _source, destination = readers
    asked = []
    ask = destination.offsets_for_times

    def counted(timestamps):
        asked.append(timestamps)
        return ask(timestamps)

    monkeypatch.setattr(destination, "offsets_for_times", counted)
    answer = _translate(readers, source_cluster, topic, topic, committed)
    # Copies start after the aborted write and its marker (offsets 0 and 1).
    assert answer == Translated(committed + 2, exact=True)
    assert len(asked) <= 3, f"{len(asked)} hints asked for one record"


def test_records_produced_on_the_destination_itself_are_passed_over(
    flow, readers, source_cluster, target_cluster
):
    """Active-active: the destination partition holds its own producers' records (no header)
    beside the copies. They are copies of nothing: the translation walks past them to the copy
    of the first record the group had not read, where a header-less record used to be taken
    for a copy made with the header off (the timestamp's answer, 20 records too early)."""
    topic, records, _copies = flow
    interleaved = f"{topic}.interleaved"
    mine = [r for r in records if r.partition == 0]
    committed = 5
    create_topic(target_cluster.bootstrap_servers, interleaved, 1)
    producer = Producer({"bootstrap.servers": target_cluster.bootstrap_servers})
    # Local records with the timestamp of the record the group reads next: the timestamp index
    # points the translation at the first of them.
    moment = next(r for r in mine if r.offset >= committed).timestamp[1]
    for i in range(20):
        producer.produce(interleaved, value=b"local-%d" % i, partition=0, timestamp=moment)
    for record in mine:
        origin = encode_provenance(source_cluster.cluster_id, 0, record.offset)
        producer.produce(
            interleaved,
            value=record.value,
            key=record.key,
            partition=0,
            headers=[*record.headers, (HEADER_PROVENANCE, origin)],
            timestamp=record.timestamp[1],
        )
    assert producer.flush(30) == 0
    answer = _translate(readers, source_cluster, topic, interleaved, committed)
    assert answer == Translated(20 + sum(r.offset < committed for r in mine), exact=True)
    resumed = read_all(target_cluster.bootstrap_servers, interleaved, 1)[
        answer.destination_offset :
    ]
    assert [r.value for r in resumed] == [r.value for r in mine if r.offset >= committed]


def test_a_copy_written_with_the_header_off_is_never_skipped_when_the_header_comes_on(
    flow, readers, source_cluster, target_cluster
):
    """A flow that ran with the header off, then on: the first copies carry no header. Past them
    the header names only later records, so the translation cannot vouch for the copy of the
    group's next record and takes the timestamp's answer: it may re-read, it never skips."""
    topic, records, _copies = flow
    mixed = f"{topic}.mixed"
    mine = [r for r in records if r.partition == 0]
    create_topic(target_cluster.bootstrap_servers, mixed, 1)
    producer = Producer({"bootstrap.servers": target_cluster.bootstrap_servers})
    for number, record in enumerate(mine):
        headers = list(record.headers)
        if number >= 10:
            origin = encode_provenance(source_cluster.cluster_id, 0, record.offset)
            headers.append((HEADER_PROVENANCE, origin))
        producer.produce(
            mixed,
            value=record.value,
            key=record.key,
            partition=0,
            headers=headers,
            timestamp=record.timestamp[1],
        )
    assert producer.flush(30) == 0
    committed = mine[5].offset
    answer = _translate(readers, source_cluster, topic, mixed, committed)
    assert isinstance(answer, Translated)
    assert not answer.exact
    resumed = [r.value for r in read_all(target_cluster.bootstrap_servers, mixed, 1)]
    unread = [r.value for r in mine if r.offset >= committed]
    assert resumed[answer.destination_offset :][-len(unread) :] == unread
    assert answer.destination_offset <= 5


def _one_partition_pair(source_cluster, target_cluster, prefix: str) -> tuple[str, str]:
    """A new one-partition source topic and its destination topic, both empty."""
    source_topic = f"{prefix}.{uuid.uuid4().hex[:8]}"
    destination_topic = f"{source_topic}.copy"
    create_topic(source_cluster.bootstrap_servers, source_topic, 1)
    create_topic(target_cluster.bootstrap_servers, destination_topic, 1)
    return source_topic, destination_topic


def test_a_group_whose_next_records_are_copies_from_another_flow_is_not_left_waiting(
    readers, source_cluster, target_cluster
):
    """Active-active: the source partition ends in copies the other direction wrote there, which
    this flow never copies (loop prevention). A group past the source's last own record used to
    wait for their copies for ever (CI's active-active test, its offsets never synced); it
    resumes right after the copy of that last own record, and once the source has own records
    again, at the copy of the first of them. Exact for the source's own records only."""
    source_topic, destination_topic = _one_partition_pair(source_cluster, target_cluster, "looped")
    source = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    destination = Producer({"bootstrap.servers": target_cluster.bootstrap_servers})
    moment = int(time.time() * 1000)

    def own_records_and_their_copies(first: int, count: int) -> None:
        for offset in range(first, first + count):
            origin = encode_provenance(source_cluster.cluster_id, 0, offset)
            source.produce(source_topic, value=b"own-%d" % offset, timestamp=moment + offset)
            destination.produce(
                destination_topic,
                value=b"own-%d" % offset,
                headers=[(HEADER_PROVENANCE, origin)],
                timestamp=moment + offset,
            )
        assert source.flush(30) == 0
        assert destination.flush(30) == 0

    own_records_and_their_copies(0, 10)  # source 0-9, destination 0-9
    for i in range(10):  # source 10-19: copies the reverse flow wrote
        looped = encode_provenance("the-other-cluster", 0, 100 + i)
        source.produce(source_topic, value=b"looped-%d" % i, headers=[(HEADER_PROVENANCE, looped)])
    for i in range(5):  # destination 10-14: its own records (the originals of those copies)
        destination.produce(destination_topic, value=b"local-%d" % i)
    assert source.flush(30) == 0
    assert destination.flush(30) == 0

    def answer(committed: int) -> object:
        return _translate(readers, source_cluster, source_topic, destination_topic, committed)

    assert answer(5) == Translated(5, exact=True)
    # Past the last own record (9): right after its copy, before the destination's own records.
    assert answer(12) == Translated(10, exact=False)
    assert answer(20) == Translated(10, exact=False)  # caught up
    own_records_and_their_copies(20, 3)  # source 20-22, destination 15-17
    assert answer(12) == Translated(15, exact=False)
    assert answer(20) == Translated(15, exact=True)


class _CountingReader:
    """A real reader that counts its reads (``scan``) of the source."""

    def __init__(self, reader: ClusterReader) -> None:
        self._reader = reader
        self.scans = 0

    def scan(self, ranges, cursors):
        self.scans += 1
        return self._reader.scan(ranges, cursors)

    def __getattr__(self, name):
        return getattr(self._reader, name)


def test_a_long_run_of_copies_after_the_last_own_record_is_read_in_a_few_reads(
    readers, source_cluster, target_cluster
):
    """One side quiet, the other busy: the source partition ends in 20,000 copies of the reverse
    flow. A caught-up group resumes right after the copy of the last own record, found in a few
    reads of growing length, not one read of 64 records per step (313 of them)."""
    source_topic, destination_topic = _one_partition_pair(source_cluster, target_cluster, "quiet")
    source = Producer({"bootstrap.servers": source_cluster.bootstrap_servers, "linger.ms": 20})
    destination = Producer({"bootstrap.servers": target_cluster.bootstrap_servers})
    for offset in range(3):
        origin = encode_provenance(source_cluster.cluster_id, 0, offset)
        source.produce(source_topic, value=b"own-%d" % offset)
        destination.produce(
            destination_topic, value=b"own-%d" % offset, headers=[(HEADER_PROVENANCE, origin)]
        )
    for i in range(20_000):
        looped = encode_provenance("the-other-cluster", 0, i)
        source.produce(source_topic, value=b"looped-%d" % i, headers=[(HEADER_PROVENANCE, looped)])
        if i % 5_000 == 0:
            source.poll(0)
    assert source.flush(60) == 0
    assert destination.flush(30) == 0
    source_reader, destination_reader = readers
    counting = _CountingReader(source_reader)
    answer = translate(
        counting,  # type: ignore[arg-type]
        destination_reader,
        source_topic=source_topic,
        destination_topic=destination_topic,
        partition=0,
        committed=20_003,
        source_cluster_id=source_cluster.cluster_id,
    )
    assert answer == Translated(3, exact=False)
    assert counting.scans <= 12, counting.scans

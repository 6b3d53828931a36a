"""A source topic worth auditing, and a copy of it on the destination, clean or with one fault of
each kind planted where the test knows it is.

The copy is written by this helper, not by the pipeline, so that a fault can sit exactly where a
test expects it: record by record to the same partition with the same key, value, headers and
timestamp, plus (optionally) the provenance header the deduplicator writes.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, replace

from confluent_kafka import Producer

from envelope import HEADER_PROVENANCE, encode_provenance
from tests.kafka_helpers import ReadRecord, create_topic, read_all

PARTITIONS = 12
PER_PARTITION = 30


@dataclass(frozen=True)
class Planted:
    """Where one fault sits: the source record it concerns and the destination offset of its
    copy (None when the fault is that there is none)."""

    kind: str
    partition: int
    source_offset: int
    destination_partition: int | None
    destination_offset: int | None
    # A swapped pair is reported at one of its two records, depending on the matching: the
    # other one's (source offset, destination offset).
    or_at: tuple[int, int] | None = None


def create_source(bootstrap: str, topic: str) -> list[ReadRecord]:
    """12 partitions of 30 readable records, and what a read_committed reader sees of them.

    Each partition holds null keys, a tombstone, repeated header names, an aborted transaction
    whose offsets the source skips, and one pair of records identical in every field (indexes 12
    and 29: without the provenance header they are interchangeable, so no fault is planted near
    them; every other record is unique across the topic).
    """
    create_topic(bootstrap, topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}.seed"})
    producer.init_transactions()
    base = int(time.time() * 1000) - 60_000
    half = PER_PARTITION // 2
    for batch, numbers in enumerate(
        (range(half), range(1000, 1010), [*range(half, PER_PARTITION - 1), 12])
    ):
        aborted = batch == 1
        producer.begin_transaction()
        for partition in range(PARTITIONS):
            for n in numbers:
                producer.produce(
                    topic,
                    partition=partition,
                    key=None if n % 7 == 6 else b"key-%d" % (n % 5),
                    # The one tombstone (n=10) is the only record shared by all partitions.
                    value=None if n == 10 else b"value-%d-%d" % (partition, n),
                    headers=[("h", b"1"), ("h", b"%d" % n)] if n % 2 else [],
                    timestamp=base + n,
                )
        producer.flush()
        if aborted:
            producer.abort_transaction()
        else:
            producer.commit_transaction()
    records = read_all(bootstrap, topic, PARTITIONS)
    assert len(records) == PARTITIONS * PER_PARTITION
    return records


def copy_to_destination(
    bootstrap: str,
    topic: str,
    records: list[ReadRecord],
    *,
    source_cluster_id: str | None,
    faults: bool,
    partitions: int = PARTITIONS,
) -> list[Planted]:
    """Write ``records`` to ``topic`` as the pipeline would; with ``faults``, one of each kind.

    ``source_cluster_id`` None leaves the provenance header off.
    """
    by_partition: dict[int, list[ReadRecord]] = defaultdict(list)
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        by_partition[record.partition].append(record)
    lanes = {p: list(rs) for p, rs in by_partition.items()}
    planted = _plant(lanes) if faults else []
    create_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, lane in sorted(lanes.items()):
        for record in lane:
            headers = list(record.headers)
            if source_cluster_id is not None:
                origin = encode_provenance(source_cluster_id, record.partition, record.offset)
                headers.append((HEADER_PROVENANCE, origin))
            producer.produce(
                topic,
                partition=partition,
                key=record.key,
                value=record.value,
                headers=headers,
                timestamp=record.timestamp[1],
            )
    assert producer.flush(30) == 0
    return planted


def _plant(lanes: dict[int, list[ReadRecord]]) -> list[Planted]:
    """One fault per partition 0-6 (7 is the wrong partition's landing place); positions are
    list indexes, which are destination offsets because the copy is not transactional."""
    planted = []

    duplicated = lanes[0][5]
    lanes[0].insert(6, duplicated)
    planted.append(Planted("duplicated", 0, duplicated.offset, 0, 6))

    missing = lanes[1].pop(7)
    planted.append(Planted("missing", 1, missing.offset, None, None))

    lanes[2][3], lanes[2][4] = lanes[2][4], lanes[2][3]
    # Which of the two is reported depends on the matching; both name the pair's offsets.
    planted.append(
        Planted("out_of_order", 2, lanes[2][4].offset, 2, 4, or_at=(lanes[2][3].offset, 3))
    )

    changed = lanes[3][6]
    lanes[3][6] = replace(changed, headers=[*changed.headers, ("planted", b"x")])
    planted.append(Planted("headers_mismatch", 3, changed.offset, 3, 6))

    changed = lanes[4][2]
    lanes[4][2] = replace(changed, timestamp=(changed.timestamp[0], changed.timestamp[1] + 1))
    planted.append(Planted("timestamp_mismatch", 4, changed.offset, 4, 2))

    changed = lanes[5][8]
    lanes[5][8] = replace(changed, key=b"planted-key")
    planted.append(Planted("key_mismatch", 5, changed.offset, 5, 8))

    moved = lanes[6].pop(4)
    lanes[7].insert(3, moved)
    planted.append(Planted("wrong_partition", 6, moved.offset, 7, 3))
    return planted

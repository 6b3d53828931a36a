"""`exactly validate` in active-active topologies (issue 19), against real Kafka and local Spark.

Stage 1 never copies a source record that carries exactly.origin: it is a copy some stage 2 wrote
(here: the reverse flow's). The audit counts such records as looped, never as missing, and fails
when one was copied all the same; one way, destination records without the header are
unexpected. With --two-way they are local (produced on the destination cluster): that audit runs
on a real active-active pair in tests/replication/test_topologies.py.
"""

from __future__ import annotations

import io
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer
from rich.console import Console

from envelope import HEADER_PROVENANCE
from tests.kafka_helpers import ReadRecord, read_all
from tests.validator.planting import PARTITIONS, PER_PARTITION, copy_to_destination, create_source
from tests.validator.running import Validation, run_validate
from validator import audit
from validator.audit import AuditOptions
from validator.errors import InputError
from validator.kinds import DISCREPANCY_KINDS, IN_FLIGHT, NOT_COPIED_KINDS
from validator.progress import Progress
from validator.snapshot import ClusterInfo, OffsetRange, Snapshot, TopicPair

pytestmark = pytest.mark.timeout(900)

# What the reverse flow's stage 2 writes: the other cluster's id, a partition and an offset there.
REVERSE_ORIGIN = b"B-cluster-id/0/5"
# Per partition, after create_source's 30 records: the looped twin, the ordinary twin, the record
# with a header of that name but no value, the looped record with a malformed value.
LOOPED_PER_PARTITION = 2
# Records produced on a destination cluster itself, by partition.
LOCAL = {0: 2, 5: 1, 11: 3}
TWO_WAY_REFUSED = (
    "exactly validate: a two-way audit needs the provenance header (loop prevention relies on it)"
)
_COUNTERS = (
    "source_records",
    "destination_records",
    "matched",
    *DISCREPANCY_KINDS,
    IN_FLIGHT,
    *NOT_COPIED_KINDS,
)


def _topic(label: str) -> str:
    return f"validate.{label}.{uuid.uuid4().hex[:8]}"


def _carries_origin(record: ReadRecord) -> bool:
    """The rule under test: a header of that name with a value, well-formed or not."""
    return any(name == HEADER_PROVENANCE and value is not None for name, value in record.headers)


def _create_source_with_looped(bootstrap: str, topic: str) -> list[ReadRecord]:
    """create_source's topic, then in every partition: a record the reverse flow copied here
    (with exactly.origin), a record identical to it in every other field (ordinary: the looped
    one comes first, so pairing by content must not take it for the copied one), a record with
    an exactly.origin header without value (ordinary: no value, no origin), and a looped record
    whose exactly.origin is not well-formed, last (beyond every copy: looped, not in flight)."""
    create_source(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    base = int(time.time() * 1000) - 30_000
    for partition in range(PARTITIONS):
        twin = {"key": b"twin-%d" % partition, "value": b"twin", "timestamp": base}
        for looped in (True, False):
            origin = [(HEADER_PROVENANCE, REVERSE_ORIGIN)] if looped else []
            producer.produce(topic, partition=partition, headers=[("h", b"t"), *origin], **twin)
        producer.produce(
            topic,
            partition=partition,
            key=b"no-value-%d" % partition,
            value=b"ordinary",
            headers=[(HEADER_PROVENANCE, None)],
            timestamp=base + 1,
        )
        producer.produce(
            topic,
            partition=partition,
            key=b"malformed-%d" % partition,
            value=b"looped",
            headers=[(HEADER_PROVENANCE, b"not a provenance")],
            timestamp=base + 2,
        )
    assert producer.flush(30) == 0
    records = read_all(bootstrap, topic, PARTITIONS)
    assert len(records) == PARTITIONS * (PER_PARTITION + 4)
    assert sum(map(_carries_origin, records)) == PARTITIONS * LOOPED_PER_PARTITION
    return records


@pytest.fixture(scope="module")
def sources(source_cluster) -> dict[str, tuple[str, list[ReadRecord]]]:
    """Such source topics by what the tests copy of them: their ordinary records with the
    provenance header and without it (`exact-`), those and one looped record (`loop-`), and
    those with the header, then records produced on the destination cluster (`local`). Each test
    copies them to destinations of its own."""
    names = ("exact-provenance", "exact-content", "loop-provenance", "loop-content", "local")
    return {
        name: (topic, _create_source_with_looped(source_cluster.bootstrap_servers, topic))
        for name in names
        for topic in [_topic(name)]
    }


def _copy(target_cluster, source_cluster, source, suffix: str, records=None, *, header: bool):
    """The ordinary records of ``source`` (or ``records``) copied to `<topic><suffix>`."""
    topic, all_records = source
    copy_to_destination(
        target_cluster.bootstrap_servers,
        topic + suffix,
        [r for r in all_records if not _carries_origin(r)] if records is None else records,
        source_cluster_id=source_cluster.cluster_id if header else None,
        faults=False,
    )


def _copy_with_a_looped_one(
    target_cluster, source_cluster, source, suffix: str, partition: int, *, header: bool
) -> tuple[int, int, int]:
    """The ordinary records and, in ``partition``, the looped twin copied; (partition, the
    twin's offset, the destination offset its copy pairs with)."""
    _topic_name, records = source
    twin = next(r for r in records if r.partition == partition and _carries_origin(r))
    chosen = [r for r in records if not _carries_origin(r) or r == twin]
    lane = sorted((r for r in chosen if r.partition == partition), key=lambda r: r.offset)
    # By content the two twins' copies are alike, and the looped twin pairs last: with the
    # second one, the ordinary twin's copy.
    at = lane.index(twin) + (not header)
    _copy(target_cluster, source_cluster, source, suffix, chosen, header=header)
    return partition, twin.offset, at


def _produce_local(target_cluster, topic: str) -> None:
    """LOCAL records produced on the destination cluster itself, after the copies, without the
    header."""
    producer = Producer({"bootstrap.servers": target_cluster.bootstrap_servers})
    for partition, count in LOCAL.items():
        for n in range(count):
            producer.produce(topic, partition=partition, value=b"local-%d" % n)
    assert producer.flush(30) == 0


def _validate(source_cluster, target_cluster, tmp_path, suffix: str, *topics: str, args=()):
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "REPLICATION_DESTINATION_TOPIC": "{topic}" + suffix,
    }
    topic_args = [arg for topic in topics for arg in ("--topic", topic)]
    return run_validate(env, tmp_path, *topic_args, *args)


def _sums(result: Validation, topic: str) -> dict[str, int]:
    assert result.report is not None, result.stdout + result.stderr
    rows = [p for p in result.report["partitions"] if p["source_topic"] == topic]
    assert len(rows) == PARTITIONS
    return {counter: sum(p[counter] for p in rows) for counter in _COUNTERS}


def _only(sums: dict[str, int], **expected: int) -> None:
    """Every discrepancy, in flight and not-copied count is 0 but those named."""
    for counter in (*DISCREPANCY_KINDS, IN_FLIGHT, *NOT_COPIED_KINDS):
        assert sums[counter] == expected.get(counter, 0), (counter, sums)


def _unclean_partitions(result: Validation, topic: str) -> set[int]:
    assert result.report is not None
    return {
        p["partition"]
        for p in result.report["partitions"]
        if p["source_topic"] == topic and not p["clean"]
    }


def _match_modes(result: Validation) -> dict[str, str]:
    assert result.report is not None
    return {t["source_topic"]: t["match"] for t in result.report["topics"]}


@pytest.mark.slow
def test_one_way_looped_records_are_counted_their_copies_fail_and_local_records_are_unexpected(
    source_cluster, target_cluster, sources, tmp_path
):
    """One audit (one Spark run) over every case, in both match modes."""
    suffix = ".one-way"
    topics = {name: topic for name, (topic, _records) in sources.items()}
    for name in ("exact-provenance", "exact-content", "local"):
        _copy(target_cluster, source_cluster, sources[name], suffix, header=name != "exact-content")
    # A copy of the looped twin: by provenance in partition 2 (its exactly.origin headers are
    # the reverse flow's, then this flow's: the last one names the source record), by content
    # in partition 4.
    copied = {
        topics[f"loop-{match}"]: _copy_with_a_looped_one(
            target_cluster,
            source_cluster,
            sources[f"loop-{match}"],
            suffix,
            partition,
            header=match == "provenance",
        )
        for match, partition in (("provenance", 2), ("content", 4))
    }
    _produce_local(target_cluster, topics["local"] + suffix)
    result = _validate(source_cluster, target_cluster, tmp_path, suffix, *topics.values())

    assert result.status == 1, result.stdout + result.stderr
    assert result.report["verdict"] == "discrepancy"
    assert result.report["two_way"] is False
    assert _match_modes(result) == {
        topic: "content" if name.endswith("content") else "provenance"
        for name, topic in topics.items()
    }
    looped = PARTITIONS * LOOPED_PER_PARTITION
    # Looped records, never copied: counted, not missing.
    for name in ("exact-provenance", "exact-content"):
        topic, records = sources[name]
        sums = _sums(result, topic)
        _only(sums, looped=looped)
        assert sums["source_records"] == len(records)
        assert sums["matched"] == sums["destination_records"] == len(records) - looped
        assert _unclean_partitions(result, topic) == set()
    looped_records = {
        (topic, r.partition, r.offset)
        for topic, records in sources.values()
        for r in records
        if _carries_origin(r)
    }
    examples = {
        (e["source_topic"], e["partition"], e["source_offset"]) for e in result.examples("looped")
    }
    assert examples
    assert examples <= looped_records
    # A looped record copied all the same: loop_copied. The ordinary twin still pairs with a
    # copy: one finding, not a duplicate too.
    reported = {
        e["source_topic"]: (e["partition"], e["source_offset"], e["destination_offset"])
        for e in result.examples("loop_copied")
    }
    assert reported == copied
    for topic in copied:
        _only(_sums(result, topic), loop_copied=1, looped=looped - 1)
    # Local records, one way: unexpected, each without the header.
    _only(_sums(result, topics["local"]), unexpected=sum(LOCAL.values()), looped=looped)
    assert _unclean_partitions(result, topics["local"]) == set(LOCAL)
    assert {e["detail"] for e in result.examples("unexpected")} == {"no exactly.origin header"}

    all_looped = len(sources) * looped - len(copied)
    assert result.report["totals"]["looped"] == all_looped
    assert result.report["totals"]["missing"] == 0
    assert f"({all_looped} looped: source records that are copies" in result.stdout
    assert f"DISCREPANCY: {sum(LOCAL.values())} unexpected, 2 loop copied" in result.stdout


def test_a_two_way_audit_by_content_is_refused_before_spark_starts(
    source_cluster, target_cluster, sources, tmp_path
):
    match = "content"
    topic, _records = sources["exact-content"]
    suffix = f".refused-{match}"
    _copy(target_cluster, source_cluster, sources["exact-content"], suffix, header=False)
    result = _validate(
        source_cluster,
        target_cluster,
        tmp_path,
        suffix,
        topic,
        args=["--two-way", "--match", match],
    )

    assert result.status == 2, result.stdout + result.stderr
    assert result.report is None
    lines = result.stderr.strip().splitlines()
    assert [line for line in lines if line.startswith(TWO_WAY_REFUSED)] == [lines[-1]], lines
    assert "--match content" in lines[-1]
    assert not any("starting Spark" in line for line in lines), lines


# -- how --match auto decides with --two-way (no Kafka: the sample is given) --------------------


def _snapshot(topics: int) -> Snapshot:
    return Snapshot(
        source=ClusterInfo("s:9092", "S"),
        destination=ClusterInfo("d:9092", "D"),
        pairs=tuple(
            TopicPair(
                f"t{n}",
                f"t{n}",
                {0: OffsetRange(0, 5, 0)},
                {0: OffsetRange(0, 5, 0)},
                source_compacted=False,
            )
            for n in range(topics)
        ),
    )


def _modes(monkeypatch, sampled: dict[str, tuple[int, int]], **options: Any) -> dict[str, str]:
    monkeypatch.setattr(audit, "first_records_with_origin", lambda _settings, _snapshot: sampled)
    progress = Progress(Console(file=io.StringIO()))
    # No settings: only the sample, replaced here, would read them.
    return audit._modes(None, _snapshot(len(sampled)), AuditOptions(**options), progress)


def test_two_way_auto_pairs_by_provenance_whatever_the_first_records(monkeypatch):
    # Not one first record with the header: in an active-active pair they may all be local.
    sampled = {"t0": (12, 0), "t1": (12, 12)}
    assert _modes(monkeypatch, sampled, two_way=True) == {"t0": "provenance", "t1": "provenance"}
    # One way, the same sample means the header is off on t0: pair it by content.
    assert _modes(monkeypatch, sampled) == {"t0": "content", "t1": "provenance"}


def test_two_way_refuses_content_matching(monkeypatch):
    sampled = {"t0": (12, 12), "t1": (12, 0)}
    with pytest.raises(InputError) as refused:
        _modes(monkeypatch, sampled, two_way=True, match="content")
    message = str(refused.value)
    assert message.startswith(TWO_WAY_REFUSED.removeprefix("exactly validate: "))
    assert "--match content" in message
    assert "\n" not in message

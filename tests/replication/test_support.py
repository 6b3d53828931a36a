"""Self-tests of the replication test support, without a replicator: the data mix, the staging
verifier (a correct staging topic passes, each planted fault fails), the continuous producer
and RoleProcess."""

from __future__ import annotations

import base64
import dataclasses
import re
import sys
import threading
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Producer, TopicCollection
from confluent_kafka.admin import AdminClient

from envelope import Envelope, SourceRecord
from runtime.names import FlowNames
from runtime.settings import role_environment
from tests.kafka_helpers import create_topic, read_all
from tests.replication.datamix import (
    ABORTED_MARK,
    LARGE_VALUE_BYTES,
    OLD_TIMESTAMP_2021,
    ContinuousProducer,
    create_data_mix,
)
from tests.replication.processes import RoleProcess, role_processes
from tests.replication.staging import (
    ALTERED,
    BROKEN_CHAIN,
    CLUSTER_ID,
    GAP,
    INCOMPLETE,
    LANE_SPLIT,
    MISSING,
    NOT_READABLE,
    TOPIC_ID,
    StagedEnvelope,
    StagingDecodeError,
    await_staging_complete,
    lane_of,
    make_envelopes,
    read_source,
    read_staging,
    topic_ids,
    verify_staging,
    write_staging,
)

STAGING_PARTITIONS = 4
STAGING_CONFIG = {"max.message.bytes": str(8 * 1024 * 1024)}


# --- shared data: one mix, one correct staging topic for the whole module ----------------------


@pytest.fixture(scope="module")
def mix(source_cluster):
    return create_data_mix(source_cluster.bootstrap_servers, f"mix.support.{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def source(mix, source_cluster):
    return read_source(source_cluster.bootstrap_servers, mix.topics)


@pytest.fixture(scope="module")
def ids(mix, source_cluster):
    return topic_ids(source_cluster.bootstrap_servers, mix.topics)


@pytest.fixture(scope="module")
def envelopes(source, ids, source_cluster):
    return make_envelopes(source, source_cluster_id=source_cluster.cluster_id, topic_ids=ids)


@pytest.fixture(scope="module")
def staging_topic(envelopes, target_cluster):
    """A correct staging topic on the target, as stage 1 would write it in one session."""
    topic = FlowNames(f"support-{uuid.uuid4().hex[:8]}").staging
    create_topic(target_cluster.bootstrap_servers, topic, STAGING_PARTITIONS, STAGING_CONFIG)
    write_staging(target_cluster.bootstrap_servers, topic, _laned(envelopes))
    return topic


@pytest.fixture(scope="module")
def staged(staging_topic, target_cluster):
    return read_staging(target_cluster.bootstrap_servers, staging_topic)


def _laned(envelopes):
    """(staging partition, envelope) for all source partitions, interleaved like stage 1 would."""
    rounds = max(len(runs) for runs in envelopes.values())
    return [
        (lane_of(topic, partition, STAGING_PARTITIONS), runs[i])
        for i in range(rounds)
        for (topic, partition), runs in envelopes.items()
        if i < len(runs)
    ]


def _verify(source, staged, source_cluster, ids):
    return verify_staging(
        source, staged, source_cluster_id=source_cluster.cluster_id, topic_ids=ids
    )


# --- the data mix ---------------------------------------------------------------------------------


def test_data_mix_holds_every_kind_of_record(mix, source, source_cluster):
    assert len(mix.topics) >= 3
    assert mix.total_partitions >= 24
    assert set(source) == {(t, p) for t, n in mix.partitions.items() for p in range(n)}
    records = [r for runs in source.values() for r in runs]
    assert len(records) == mix.readable_records
    assert 2000 <= len(records) <= 5000

    assert {r.key for r in records} >= {None, b""}
    assert {r.value for r in records} >= {None, b""}
    assert any(len({name for name, _ in r.headers}) < len(r.headers) for r in records)
    assert any(value is None for r in records for _, value in r.headers)
    assert any(value == bytes(range(256)) for r in records for _, value in r.headers)
    large = [r for r in source[(mix.large_topic, 0)] if len(r.value or b"") >= LARGE_VALUE_BYTES]
    assert len(large) == 3
    history = [r for p in range(6) for r in source[(mix.history_topic, p)]]
    assert all(r.timestamp < OLD_TIMESTAMP_2021 + 30 * 86_400_000 for r in history)
    assert all(r.timestamp_type == TIMESTAMP_CREATE_TIME for r in records)
    compacted_keys = [r.key for r in source[(mix.compacted_topic, 0)]]
    assert len(set(compacted_keys)) < len(compacted_keys) / 5

    # Aborted records are in the log but never readable; their markers leave offset gaps.
    assert not any((r.value or b"").startswith(ABORTED_MARK) for r in records)
    uncommitted = read_all(
        source_cluster.bootstrap_servers,
        mix.mixed_topic,
        mix.partitions[mix.mixed_topic],
        isolation_level="read_uncommitted",
    )
    aborted = [r for r in uncommitted if (r.value or b"").startswith(ABORTED_MARK)]
    assert len(aborted) == mix.aborted_records > 0
    partition0 = source[(mix.mixed_topic, 0)]
    assert partition0[-1].offset + 1 > len(partition0)
    # Transactional and plain records interleave within one partition.
    kinds = [(r.value or b"").startswith(b"txn1") for r in partition0]
    assert kinds.index(False, kinds.index(True)) < len(kinds) - kinds[::-1].index(True)


def test_include_regex_matches_exactly_the_mix(mix):
    assert all(re.fullmatch(mix.include_regex, topic) for topic in mix.topics)
    for other in (f"{mix.prefix}.other", f"{mix.mixed_topic}x", f"x{mix.mixed_topic}"):
        assert not re.fullmatch(mix.include_regex, other)
    assert "," not in mix.include_regex  # REPLICATION_TOPICS_INCLUDE is comma-separated


def test_topic_ids_are_the_brokers_uuids(mix, ids, source_cluster):
    admin = AdminClient({"bootstrap.servers": source_cluster.bootstrap_servers})
    described = admin.describe_topics(TopicCollection([mix.mixed_topic]))[mix.mixed_topic]
    # Kafka prints a Uuid as url-safe base64 of its 16 bytes.
    text = str(described.result(timeout=30).topic_id)
    assert ids[mix.mixed_topic] == base64.urlsafe_b64decode(text + "==")
    assert all(len(topic_id) == 16 for topic_id in ids.values())
    assert len(set(ids.values())) == len(ids)


# --- a correct staging topic passes ---------------------------------------------------------------


def test_correct_staging_verifies(source, staged, envelopes, source_cluster, ids):
    report = _verify(source, staged, source_cluster, ids)
    assert report.ok, report
    assert report.envelopes == sum(len(runs) for runs in envelopes.values()) == len(staged)
    assert report.staged_records == report.source_records == sum(map(len, source.values()))
    assert report.sessions == len(envelopes)
    assert report.duplicates == 0
    assert all(len(lanes) == 1 for lanes in report.lanes.values())
    assert "staging OK" in str(report)


def test_a_restarted_session_repeating_records_is_fine(source, staged, source_cluster, ids):
    last = staged[-1]
    repeat = Envelope(**{**_fields(last.envelope), "prev_offset": None})
    report = _verify(
        source, [*staged, StagedEnvelope(last.partition, 10**9, repeat)], source_cluster, ids
    )
    assert report.ok, report
    assert report.duplicates == len(repeat.records)
    assert report.sessions == len(source) + 1


def test_await_staging_complete_returns_at_once_when_covered(
    source, staged, staging_topic, target_cluster
):
    started = time.monotonic()
    again = await_staging_complete(target_cluster.bootstrap_servers, staging_topic, source, 30)
    assert again == staged
    assert time.monotonic() - started < 10


def test_await_staging_complete_waits_for_a_topic_that_appears_later(
    source, envelopes, target_cluster, source_cluster, ids
):
    topic = FlowNames(f"late-{uuid.uuid4().hex[:8]}").staging
    laned = _laned(envelopes)

    def stage_later():
        time.sleep(1.0)
        create_topic(target_cluster.bootstrap_servers, topic, STAGING_PARTITIONS, STAGING_CONFIG)
        write_staging(target_cluster.bootstrap_servers, topic, laned[: len(laned) // 2])
        time.sleep(1.0)
        write_staging(target_cluster.bootstrap_servers, topic, laned[len(laned) // 2 :])

    writer = threading.Thread(target=stage_later)
    writer.start()
    try:
        staged = await_staging_complete(target_cluster.bootstrap_servers, topic, source, 45)
    finally:
        writer.join(60)
    report = _verify(source, staged, source_cluster, ids)
    assert report.ok, report


def test_await_staging_complete_gives_up_and_shows_what_is_missing(
    source, envelopes, target_cluster, source_cluster, ids
):
    topic = FlowNames(f"partial-{uuid.uuid4().hex[:8]}").staging
    create_topic(target_cluster.bootstrap_servers, topic, STAGING_PARTITIONS, STAGING_CONFIG)
    laned = _laned(envelopes)
    (_, dropped), kept = laned[-1], laned[:-1]
    write_staging(target_cluster.bootstrap_servers, topic, kept)

    started = time.monotonic()
    staged = await_staging_complete(target_cluster.bootstrap_servers, topic, source, 2)
    assert time.monotonic() - started < 10
    assert len(staged) == len(kept)
    report = _verify(source, staged, source_cluster, ids)
    assert set(report.violation_counts) == {MISSING}
    assert report.violation_counts[MISSING] == len(dropped.records)
    first, last = dropped.records[0].offset, dropped.records[-1].offset
    span = f"@{first}" if first == last else f"@{first}..{last}"
    assert f"{dropped.topic}[{dropped.partition}]{span}" in str(report)


# --- each planted fault fails, with its coordinates ----------------------------------------------


def test_missing_record_inside_an_envelope(source, staged, source_cluster, ids):
    index, victim = _an_envelope_with_a_successor(staged)
    env = victim.envelope
    dropped = env.records[len(env.records) // 2]
    faulty = _replace(staged, index, records=tuple(r for r in env.records if r is not dropped))

    report = _verify(source, faulty, source_cluster, ids)
    assert set(report.violation_counts) == {MISSING, INCOMPLETE}
    assert f"{env.topic}[{env.partition}]@{dropped.offset} in no envelope" in str(report)
    assert f"skips readable offsets [{dropped.offset}]" in str(report)


def test_missing_envelope_breaks_the_chain(source, staged, source_cluster, ids):
    index, victim = _an_envelope_with_a_successor(staged)
    faulty = staged[:index] + staged[index + 1 :]
    env = victim.envelope
    first, last = env.records[0].offset, env.records[-1].offset

    report = _verify(source, faulty, source_cluster, ids)
    # The next envelope's prev_offset still names the dropped one's last record: no readable
    # record lies between, so no GAP, but the chain links to nothing delivered.
    assert set(report.violation_counts) == {MISSING, BROKEN_CHAIN}
    text = str(report)
    assert f"{env.topic}[{env.partition}]@{first}..{last} ({len(env.records)} records)" in text
    assert f"prev_offset {last} is the last offset of no earlier envelope" in text


def test_prev_offset_jumping_over_records_is_a_gap(source, staged, source_cluster, ids):
    # Envelopes A, B, C of one partition; C claims to follow A: nothing is missing, but a
    # deduplicator would accept C before B arrived.
    index, b = _an_envelope_with_a_successor(staged)
    a = next(s for s in reversed(staged[:index]) if _same_partition(s, b))
    c_index = next(i for i in range(index + 1, len(staged)) if _same_partition(staged[i], b))
    faulty = _replace(staged, c_index, prev_offset=a.envelope.records[-1].offset)

    report = _verify(source, faulty, source_cluster, ids)
    assert set(report.violation_counts) == {GAP}
    first = b.envelope.records[0].offset
    assert f"with prev_offset {a.envelope.records[-1].offset} jumps over readable offsets" in str(
        report
    )
    assert f"[{first}, " in str(report)


def test_prev_offset_linking_to_a_later_envelope_breaks_the_chain(
    source, staged, source_cluster, ids
):
    index, victim = _an_envelope_with_a_successor(staged)
    successor = next(i for i in range(index + 1, len(staged)) if _same_partition(staged[i], victim))
    swapped = list(staged)
    swapped[index], swapped[successor] = swapped[successor], swapped[index]

    report = _verify(source, swapped, source_cluster, ids)
    assert set(report.violation_counts) == {BROKEN_CHAIN}
    assert f"prev_offset {victim.envelope.records[-1].offset} is the last offset of no" in str(
        report
    )


def test_aborted_record_in_an_envelope(mix, source, staged, source_cluster, ids):
    uncommitted = read_all(
        source_cluster.bootstrap_servers, mix.mixed_topic, 10, isolation_level="read_uncommitted"
    )
    aborted = next(r for r in uncommitted if (r.value or b"").startswith(ABORTED_MARK))
    record = SourceRecord(
        aborted.offset,
        aborted.timestamp[1],
        aborted.timestamp[0],
        aborted.key,
        aborted.value,
        tuple(aborted.headers),
    )
    lane = lane_of(mix.mixed_topic, aborted.partition, STAGING_PARTITIONS)
    bad = Envelope(
        source_cluster.cluster_id,
        mix.mixed_topic,
        ids[mix.mixed_topic],
        aborted.partition,
        None,
        (record,),
    )
    report = _verify(source, [*staged, StagedEnvelope(lane, 10**9, bad)], source_cluster, ids)
    assert set(report.violation_counts) == {NOT_READABLE}
    assert f"{mix.mixed_topic}[{aborted.partition}]@{aborted.offset} in staging[{lane}]@" in str(
        report
    )


def test_records_of_an_unread_partition(source, staged, source_cluster, ids):
    env = staged[0].envelope
    stranger = Envelope(**{**_fields(env), "topic": "not-in-the-source", "prev_offset": None})
    report = _verify(source, [*staged, StagedEnvelope(0, 10**9, stranger)], source_cluster, ids)
    assert set(report.violation_counts) == {NOT_READABLE}
    assert f"not-in-the-source[{env.partition}] is no source partition" in str(report)


def test_envelope_that_skips_a_record_delivered_elsewhere(source, staged, source_cluster, ids):
    index, victim = _an_envelope_with_a_successor(staged)
    env = victim.envelope
    moved = env.records[1]
    faulty = _replace(staged, index, records=tuple(r for r in env.records if r is not moved))
    elsewhere = Envelope(**{**_fields(env), "prev_offset": None, "records": (moved,)})
    faulty.append(StagedEnvelope(victim.partition, 10**9, elsewhere))

    report = _verify(source, faulty, source_cluster, ids)
    assert set(report.violation_counts) == {INCOMPLETE}
    assert f"({env.topic}[{env.partition}]@{env.records[0].offset}.." in str(report)
    assert f"skips readable offsets [{moved.offset}]" in str(report)


def test_changed_header(source, staged, source_cluster, ids):
    index, record_index = next(
        (i, j)
        for i, s in enumerate(staged)
        for j, r in enumerate(s.envelope.records)
        if r.headers != r.headers[::-1]
    )
    env = staged[index].envelope
    original = env.records[record_index]
    changed = dataclasses.replace(original, headers=original.headers[::-1])
    assert changed.headers != original.headers
    records = (*env.records[:record_index], changed, *env.records[record_index + 1 :])

    report = _verify(source, _replace(staged, index, records=records), source_cluster, ids)
    assert set(report.violation_counts) == {ALTERED, MISSING}
    coordinates = f"{env.topic}[{env.partition}]@{original.offset}"
    assert f"{coordinates} in staging[{staged[index].partition}]@" in str(report)
    assert "headers (" in str(report)
    assert f"{coordinates} in no envelope byte-identical" in str(report)


@pytest.mark.parametrize("field", ["key", "value", "timestamp", "timestamp_type"])
def test_changed_bytes_or_timestamp(source, staged, source_cluster, ids, field):
    env = staged[1].envelope
    original = env.records[0]
    new = {"key": b"other", "value": b"other", "timestamp": 1, "timestamp_type": 2}[field]
    changed = dataclasses.replace(original, **{field: new})
    faulty = _replace(staged, 1, records=(changed, *env.records[1:]))

    report = _verify(source, faulty, source_cluster, ids)
    assert set(report.violation_counts) == {ALTERED, MISSING}
    assert f"{env.topic}[{env.partition}]@{original.offset} in staging[" in str(report)
    assert f"{field} {new!r}, the source has" in str(report)


def test_wrong_cluster_and_topic_id(source, staged, source_cluster, ids):
    faulty = _replace(staged, 0, source_cluster_id="someone-else")
    faulty = _replace(faulty, 2, topic_id=bytes(16))
    report = _verify(source, faulty, source_cluster, ids)
    assert set(report.violation_counts) == {CLUSTER_ID, TOPIC_ID}
    assert (
        f"staging[{staged[0].partition}]@{staged[0].offset}: source_cluster_id 'someone-else'"
        in str(report)
    )
    assert f"staging[{staged[2].partition}]@{staged[2].offset}: topic_id {'00' * 16}" in str(report)


def test_lane_split_over_two_staging_partitions(
    source, envelopes, target_cluster, source_cluster, ids
):
    """Planted in a real staging topic: one envelope produced to the wrong partition."""
    topic = FlowNames(f"split-{uuid.uuid4().hex[:8]}").staging
    create_topic(target_cluster.bootstrap_servers, topic, STAGING_PARTITIONS, STAGING_CONFIG)
    laned = _laned(envelopes)
    index = max(range(len(laned)), key=lambda i: laned[i][1].prev_offset or -1)
    lane, env = laned[index]
    laned[index] = ((lane + 1) % STAGING_PARTITIONS, env)
    write_staging(target_cluster.bootstrap_servers, topic, laned)

    staged = read_staging(target_cluster.bootstrap_servers, topic)
    report = _verify(source, staged, source_cluster, ids)
    assert not report.ok
    assert LANE_SPLIT in report.violation_counts
    expected = sorted([lane, (lane + 1) % STAGING_PARTITIONS])
    assert report.lanes[(env.topic, env.partition)] == expected
    assert f"{env.topic}[{env.partition}] is spread over staging partitions" in str(report)


def test_undecodable_staging_records_are_reported(target_cluster):
    topic = FlowNames(f"garbage-{uuid.uuid4().hex[:8]}").staging
    create_topic(target_cluster.bootstrap_servers, topic, 2)
    producer = Producer({"bootstrap.servers": target_cluster.bootstrap_servers})
    producer.produce(topic, b"not msgpack at all", partition=1)
    producer.produce(topic, None, partition=0)
    assert producer.flush(30) == 0

    with pytest.raises(StagingDecodeError) as raised:
        read_staging(target_cluster.bootstrap_servers, topic)
    assert [(p, o) for p, o, _ in raised.value.failures] == [(0, 0), (1, 0)]
    assert "staging[1]@0: MalformedEnvelopeError" in str(raised.value)
    assert "staging[0]@0: null value" in str(raised.value)


def _fields(env):
    return {f.name: getattr(env, f.name) for f in dataclasses.fields(env)}


def _replace(staged, index, **changes):
    faulty = list(staged)
    item = faulty[index]
    faulty[index] = item._replace(envelope=dataclasses.replace(item.envelope, **changes))
    return faulty


def _same_partition(a, b):
    return (a.envelope.topic, a.envelope.partition) == (b.envelope.topic, b.envelope.partition)


def _an_envelope_with_a_successor(staged):
    """An envelope of several records with a predecessor and a successor in its partition."""
    for index, item in enumerate(staged):
        before = any(_same_partition(s, item) for s in staged[:index])
        after = any(_same_partition(s, item) for s in staged[index + 1 :])
        if before and after and len(item.envelope.records) >= 3:
            return index, item
    raise AssertionError("the data mix should give some partition three or more envelopes")


# --- the continuous producer ----------------------------------------------------------------------


def test_continuous_producer_counts_what_it_wrote(source_cluster, unique_topic):
    topics = {unique_topic("cont-a"): 3, unique_topic("cont-b"): 2}
    for topic, partitions in topics.items():
        create_topic(source_cluster.bootstrap_servers, topic, partitions)
    producer = ContinuousProducer(source_cluster.bootstrap_servers, topics).start()
    time.sleep(1.0)
    started = time.monotonic()
    produced = producer.stop()
    assert time.monotonic() - started < 5
    assert not any(t.name == "continuous-producer" for t in threading.enumerate())

    records = read_source(source_cluster.bootstrap_servers, topics)
    values = [r.value for runs in records.values() for r in runs]
    assert 100 <= produced == len(values) == len(set(values))
    assert all(runs for runs in records.values())  # every partition got some
    assert producer.failures == []


def test_continuous_producer_with_transactions(source_cluster, unique_topic):
    topic = unique_topic("cont-txn")
    create_topic(source_cluster.bootstrap_servers, topic, 2)
    with ContinuousProducer(
        source_cluster.bootstrap_servers, {topic: 2}, transactional_id=topic, abort_every=3
    ) as producer:
        time.sleep(1.5)
    committed = producer.acknowledged
    records = read_source(source_cluster.bootstrap_servers, [topic])
    assert committed == sum(map(len, records.values())) > 0
    assert producer.aborted > 0
    everything = read_all(
        source_cluster.bootstrap_servers, topic, 2, isolation_level="read_uncommitted"
    )
    assert len(everything) == committed + producer.aborted


# --- RoleProcess ----------------------------------------------------------------------------------

HTTP_READY = r"Serving HTTP on 127\.0\.0\.1 port (\d+)"


def test_role_process_lifecycle(tmp_path):
    server = RoleProcess("http.server", {}, tmp_path, args=["--bind", "127.0.0.1", "0"])
    with server:
        port = int(server.wait_for_log(HTTP_READY, 20).group(1))
        assert server.is_running()
        assert server.returncode is None
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
            assert response.status == 200
        server.wait_for_log(r'"GET / HTTP/1\.1" 200', 10)
        assert server.terminate(10) == -15
        assert not server.is_running()

        server.start()  # a restart appends to the same log
        server.wait_for_log(HTTP_READY, 20)
        server.kill()
        assert server.returncode == -9
    text = server.log_text()
    assert text.count("=== start ") == 2
    assert "GET /" in text
    assert "GET /" not in server.log_text(since_start=True)
    assert "Serving HTTP" in server.log_tail(5)


def test_role_environment_drops_the_products_variables(monkeypatch):
    monkeypatch.setenv("REPLICATION_FLOW", "leaked")
    monkeypatch.setenv("kafka_clusters_source_bootstrap_servers", "leaked")
    monkeypatch.setenv("EXACTLY_LOG_LEVEL", "leaked")
    monkeypatch.setenv("OFFSETSYNC_GROUPS_INCLUDE", "leaked")
    monkeypatch.setenv("UNRELATED_SETTING", "kept")
    env = role_environment({"REPLICATION_FLOW": "mine"})
    assert env["REPLICATION_FLOW"] == "mine"
    assert env["UNRELATED_SETTING"] == "kept"
    assert "leaked" not in env.values()


def test_terminate_kills_and_fails_when_sigterm_is_ignored(tmp_path):
    stubborn = RoleProcess("stubborn", {}, tmp_path)
    stubborn.command = [
        sys.executable,
        "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)",
    ]
    with stubborn:
        stubborn.wait_for_log("^ready$", 20)
        with pytest.raises(AssertionError, match=r"did not exit within 0\.5 s of SIGTERM"):
            stubborn.terminate(0.5)
        assert not stubborn.is_running()
        assert stubborn.returncode == -9


def test_wait_for_log_fails_fast_when_the_process_exits(tmp_path):
    short = RoleProcess("short", {}, tmp_path)
    short.command = [sys.executable, "-c", "print('bye')"]
    with short, pytest.raises(TimeoutError, match="exited with 0 before logging"):
        short.wait_for_log("never", 20)


def test_role_processes_kills_everything_at_exit(tmp_path):
    with role_processes(tmp_path) as roles:
        first = roles.start("http.server", {}, args=["--bind", "127.0.0.1", "0"])
        second = roles.start("http.server", {}, args=["--bind", "127.0.0.1", "0"])
        assert second.name == "http.server-2"
        first.wait_for_log(HTTP_READY, 20)
        second.wait_for_log(HTTP_READY, 20)
    assert first.returncode == second.returncode == -9
    assert (tmp_path / "http.server.log").exists()
    assert (tmp_path / "http.server-2.log").exists()

"""What a sync cycle leaves out, and says so, without failing the rest:

- a partition without a leader on the source or the target (or whose offset lookup fails with a
  retriable error of its own) is left for the next cycle while the group's other partitions,
  and the other groups, are committed; it is warned about once and counted;
- a source topic stage 1 left out (its destination name collides with another topic's, recorded
  in the flow's meta topic as `left-out:<name>`) is not translated onto the other topic's copies;
  nor is one deleted and recreated since stage 1 recorded its id, onto the old topic's copies;
  nor are two topics stage 1 took in that the naming settings now give one destination;
- a group whose commit the target refused is not counted as synced.

A leaderless partition needs a broker down under a topic of replication factor 1 on a cluster of
several nodes; the session's clusters have one node each, so the lookup's answer is given at the
admin client: exactly what librdkafka answers then (LEADER_NOT_AVAILABLE for that partition, or
_NOENT for each when not one of those asked has a leader), everything else real Kafka."""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from offsetsync.app import assemble
from offsetsync.clients import SyncClients, connect
from offsetsync.errors import StaleLeadershipError
from offsetsync.metrics import OffsetSyncMetrics
from offsetsync.reading import ClusterReader
from runtime import Settings, load_settings
from tests.kafka_helpers import create_topic, delete_topic, produce_numbered, read_all
from tests.offsetsync.copied import copied_topic, record_taken_in, stage_1_records
from tests.offsetsync.groups import committed_offsets, process_and_stop
from tests.replication.scrape import free_port

PARTITIONS = 3
PROCESSED = 4  # records of each partition a source group processed before it stopped
RECORDS = 30


class _LeaderlessAdmin:
    """An admin client whose offset lookups of the partitions in ``faults`` fail with the
    error librdkafka gives for a partition without a leader; the rest is the real client."""

    def __init__(self, admin: object) -> None:
        self._admin = admin
        self.faults: dict[tuple[str, int], int] = {}  # partition -> KafkaError code

    def __getattr__(self, name: str) -> object:
        return getattr(self._admin, name)

    def list_offsets(self, requests: Mapping[TopicPartition, object], **options: object) -> dict:
        asked = {
            tp: spec for tp, spec in requests.items() if (tp.topic, tp.partition) not in self.faults
        }
        futures = dict(self._admin.list_offsets(asked, **options)) if asked else {}
        for tp in requests:
            code = self.faults.get((tp.topic, tp.partition))
            if code is not None:
                failed: Future = Future()
                failed.set_exception(KafkaException(KafkaError(code)))
                futures[tp] = failed
        return futures


@dataclass
class _Flow:
    topic: str
    copy: str
    group: str
    synced: dict  # where the group belongs on the target
    settings: Settings
    metrics: OffsetSyncMetrics
    closing: list


def _synced_offsets(target_bootstrap: str, source: list, copy: str, processed: int) -> dict:
    copies = {r.value: r.offset for r in read_all(target_bootstrap, copy, PARTITIONS)}
    return {
        (copy, p): copies[[r.value for r in source if r.partition == p][processed]]
        for p in range(PARTITIONS)
    }


def _settings(source_cluster, target_cluster, flow: str, groups: str, **extra: str) -> Settings:
    return load_settings(
        {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
            "REPLICATION_DESTINATION_TOPIC": "{topic}.copy",
            "REPLICATION_FLOW": flow.replace(".", "-")[-90:],
            "OFFSETSYNC_GROUPS_INCLUDE": f"{re.escape(groups)}.*",
            "METRICS_PORT": str(free_port()),
            **extra,
        }
    )


def _copied_and_stopped(source_cluster, target_cluster, topic: str, group: str, **extra: str):
    """``topic`` copied to the target with the provenance header, ``group`` stopped on the
    source after PROCESSED records of each partition, and a flow over them (nothing recorded
    in its meta topic yet): the topic, its records, the copy, the group and the settings."""
    source, copy = copied_topic(source_cluster, target_cluster, topic, PARTITIONS, RECORDS)
    process_and_stop(
        source_cluster.bootstrap_servers, group, topic, dict.fromkeys(range(PARTITIONS), PROCESSED)
    )
    settings = _settings(
        source_cluster,
        target_cluster,
        group,
        group,
        REPLICATION_TOPICS_INCLUDE=re.escape(topic),
        **extra,
    )
    return topic, source, copy, group, settings


@contextmanager
def _closed_after(flow: _Flow) -> Iterator[None]:
    """The offset sync clients made for ``flow`` (by _sync) closed when the block ends."""
    try:
        yield
    finally:
        for close in reversed(flow.closing):
            close()


@pytest.fixture
def quiet(source_cluster, target_cluster, unique_topic, unique_group):
    """A topic copied to the target with the provenance header, and a group that processed
    PROCESSED records of each partition on the source and stopped."""
    topic, source, copy, group, settings = _copied_and_stopped(
        source_cluster, target_cluster, unique_topic("partial"), unique_group("partial")
    )
    synced = _synced_offsets(target_cluster.bootstrap_servers, source, copy, PROCESSED)
    record_taken_in(source_cluster, target_cluster, settings, [topic])
    flow = _Flow(topic, copy, group, synced, settings, OffsetSyncMetrics(), [])
    with _closed_after(flow):
        yield flow


def _sync(flow: _Flow, connect_clients: Callable[[], SyncClients] | None = None):
    sync, checkpoints = assemble(
        flow.settings,
        flow.metrics,
        connect_clients or (lambda: connect(flow.settings, flow.metrics)),
        should_stop=lambda: False,
        wait=lambda _s: None,
    )
    flow.closing.extend([checkpoints.close, sync.close])
    return sync


def _sync_with_leaderless(flow: _Flow, cluster: str) -> tuple[object, _LeaderlessAdmin]:
    """Offset sync whose ``cluster`` ("source" or "target") reader looks offsets up through a
    _LeaderlessAdmin."""
    admins: list[_LeaderlessAdmin] = []

    def connect_leaderless() -> SyncClients:
        clients = connect(flow.settings, flow.metrics)
        field, config = (
            ("source_reader", flow.settings.source.client_config())
            if cluster == "source"
            else ("destination_reader", flow.settings.destination.client_config())
        )
        admin = _LeaderlessAdmin(
            clients.source_admin if cluster == "source" else clients.target_admin
        )
        admins.append(admin)
        getattr(clients, field).close()
        reader = ClusterReader(config, admin, cluster=cluster)  # type: ignore[arg-type]
        return dataclasses.replace(clients, **{field: reader})

    sync = _sync(flow, connect_leaderless)
    return sync, admins[0]


def _sample(metrics: OffsetSyncMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize("cluster", ["source", "target"])
def test_a_partition_without_a_leader_is_left_for_the_next_cycle_and_the_others_are_synced(
    quiet, source_cluster, target_cluster, cluster, caplog
):
    sync, admin = _sync_with_leaderless(quiet, cluster)
    leaderless = (quiet.topic if cluster == "source" else quiet.copy, 1)
    admin.faults[leaderless] = KafkaError.LEADER_NOT_AVAILABLE
    target = target_cluster.bootstrap_servers
    with caplog.at_level(logging.INFO, logger="offsetsync"):
        sync.cycle()  # raised LEADER_NOT_AVAILABLE: the cycle failed for every partition
        sync.cycle()
        # The other partitions are where they belong; nothing is committed for the leaderless.
        expected = {key: offset for key, offset in quiet.synced.items() if key[1] != 1}
        assert committed_offsets(target, quiet.group, quiet.copy) == expected
        warned = [r for r in caplog.records if "partition could not be read" in r.getMessage()]
        assert len(warned) == 1, caplog.records  # once while it lasts, not once a cycle
        assert warned[0].levelno == logging.WARNING
        assert warned[0].event_fields == {  # type: ignore[attr-defined]
            "cluster": cluster,
            "topic": leaderless[0],
            "partition": 1,
            "reason": KafkaError(KafkaError.LEADER_NOT_AVAILABLE).str(),
        }
        metrics = quiet.metrics
        name = "exactly_offsetsync_partitions_unavailable_total"
        assert _sample(metrics, name, cluster=cluster) == 2  # one group partition, two cycles
        assert _sample(metrics, "exactly_offsetsync_groups", state="unavailable") == 1
        assert _sample(metrics, "exactly_offsetsync_groups", state="synced") == 0

        # Its leader back: the next cycle commits it, and says so.
        admin.faults.clear()
        sync.cycle()
    assert committed_offsets(target, quiet.group, quiet.copy) == quiet.synced
    assert any("partition readable again" in r.getMessage() for r in caplog.records)
    assert _sample(quiet.metrics, "exactly_offsetsync_groups", state="synced") == 1


def test_a_step_whose_every_partition_has_no_leader_fails_nothing_and_commits_nothing(
    quiet, target_cluster
):
    """librdkafka answers _NOENT ("No leaders found") for each partition when not one of those
    asked has a leader: that ended the role (exit 1, a code it did not know) at every start."""
    sync, admin = _sync_with_leaderless(quiet, "source")
    for partition in range(PARTITIONS):
        admin.faults[(quiet.topic, partition)] = KafkaError._NOENT
    sync.cycle()
    assert committed_offsets(target_cluster.bootstrap_servers, quiet.group, quiet.copy) == {}
    name = "exactly_offsetsync_partitions_unavailable_total"
    assert _sample(quiet.metrics, name, cluster="source") == PARTITIONS
    admin.faults.clear()
    sync.cycle()
    assert (
        committed_offsets(target_cluster.bootstrap_servers, quiet.group, quiet.copy) == quiet.synced
    )


def test_a_partition_whose_leader_the_client_knows_wrong_is_left_out_and_then_fails_the_cycle(
    quiet, target_cluster
):
    """FENCED_LEADER_EPOCH for every partition was what a source broker restart left an old
    client answering: the other partitions are synced, and the cycle then fails, so that failed
    cycles in a row make the clients anew (tests/offsetsync/test_failover.py, broker restart)."""
    sync, admin = _sync_with_leaderless(quiet, "source")
    admin.faults[(quiet.topic, 1)] = KafkaError.FENCED_LEADER_EPOCH
    with pytest.raises(StaleLeadershipError):
        sync.cycle()
    expected = {key: offset for key, offset in quiet.synced.items() if key[1] != 1}
    assert committed_offsets(target_cluster.bootstrap_servers, quiet.group, quiet.copy) == expected
    name = "exactly_offsetsync_partitions_unavailable_total"
    assert _sample(quiet.metrics, name, cluster="source") == 1


@dataclass
class _Renamed:
    """Two source topics the rename gives one destination, `<base>.orders.copy`: `orders`
    copied there, `old` (its records older than the copies: translated, its groups' offsets
    would land on them, as the header names a cluster, partition and offset only), and a group
    stopped on each."""

    orders: str
    old: str
    source: list  # `orders`' records
    copy: str
    group: str  # on `orders`, 4 records of each partition processed
    stranger: str  # on `old`, 2 records of each partition processed
    settings: Settings


def _renamed_onto_another(
    source_cluster, target_cluster, unique_topic, unique_group, name: str
) -> _Renamed:
    source_bootstrap = source_cluster.bootstrap_servers
    base = unique_topic(name)
    orders, old = f"{base}.orders", f"{base}.old"
    create_topic(source_bootstrap, old, PARTITIONS)
    produce_numbered(source_bootstrap, old, PARTITIONS, 0, RECORDS)
    source, copy = copied_topic(source_cluster, target_cluster, orders, PARTITIONS, RECORDS)
    prefix = unique_group(name)
    group, stranger = f"{prefix}.orders", f"{prefix}.old"
    process_and_stop(source_bootstrap, group, orders, dict.fromkeys(range(PARTITIONS), 4))
    process_and_stop(source_bootstrap, stranger, old, dict.fromkeys(range(PARTITIONS), 2))
    settings = _settings(
        source_cluster,
        target_cluster,
        prefix,
        prefix,
        REPLICATION_TOPICS_INCLUDE=f"{re.escape(base)}\\..*",
        REPLICATION_TOPICS_RENAME_PATTERN=r"(.*)\.old",
        REPLICATION_TOPICS_RENAME_REPLACEMENT=r"\1.orders",
    )
    assert settings.destination_topic(old) == copy
    return _Renamed(orders, old, source, copy, group, stranger, settings)


def test_a_topic_stage_1_left_out_is_not_translated_onto_the_other_topic_s_copies(
    source_cluster, target_cluster, unique_topic, unique_group, caplog
):
    target = target_cluster.bootstrap_servers
    renamed = _renamed_onto_another(
        source_cluster, target_cluster, unique_topic, unique_group, "renamed"
    )
    replicated, newcomer, source, copy = renamed.orders, renamed.old, renamed.source, renamed.copy
    group, stranger, settings = renamed.group, renamed.stranger, renamed.settings
    # Stage 1 replicated `orders` and has not looked since `old` appeared (it is stopped, or
    # between two discovery rounds): only `orders` is recorded.
    record_taken_in(source_cluster, target_cluster, settings, [replicated])
    flow = _Flow(replicated, copy, group, {}, settings, OffsetSyncMetrics(), [])
    with _closed_after(flow):
        sync = _sync(flow)
        with caplog.at_level(logging.INFO, logger="offsetsync"):
            sync.cycle()
            assert committed_offsets(target, stranger, copy) == {}  # moved onto `orders`' copies
            # Then stage 1 looks, leaves `old` out, and records it.
            stage_1_records(target_cluster, settings).record_left_out(
                newcomer, "both would be copied to " + copy
            )
            sync.cycle()
            sync.cycle()
    assert committed_offsets(target, group, copy) == _synced_offsets(target, source, copy, 4)
    assert committed_offsets(target, stranger, copy) == {}
    not_taken_in = [r for r in caplog.records if "not yet taken in" in r.getMessage()]
    assert [r.event_fields["topic"] for r in not_taken_in] == [newcomer]  # type: ignore[attr-defined]
    left_out = [r for r in caplog.records if "left out by stage 1" in r.getMessage()]
    assert len(left_out) == 1, caplog.records  # once, not once a cycle
    assert left_out[0].event_fields["topic"] == newcomer  # type: ignore[attr-defined]
    assert _sample(flow.metrics, "exactly_offsetsync_topics_left_out") == 1


def test_a_topic_stage_1_has_not_taken_in_is_synced_once_it_has(
    source_cluster, target_cluster, unique_topic, unique_group, caplog
):
    """No stage 1 of the flow has run yet (no meta topic), then it records the topic."""
    topic, source, copy, group, settings = _copied_and_stopped(
        source_cluster,
        target_cluster,
        unique_topic("untaken"),
        unique_group("untaken"),
        OFFSETSYNC_WAITING_WARN_MS="1",
    )
    target = target_cluster.bootstrap_servers
    flow = _Flow(topic, copy, group, {}, settings, OffsetSyncMetrics(), [])
    with _closed_after(flow):
        sync = _sync(flow)
        with caplog.at_level(logging.INFO, logger="offsetsync"):
            for _ in range(3):
                sync.cycle()
            assert committed_offsets(target, group, copy) == {}
            assert _sample(flow.metrics, "exactly_offsetsync_topics_not_taken_in") == 1
            record_taken_in(source_cluster, target_cluster, settings, [topic])
            sync.cycle()
            assert _sample(flow.metrics, "exactly_offsetsync_topics_not_taken_in") == 0
    assert committed_offsets(target, group, copy) == _synced_offsets(
        target, source, copy, PROCESSED
    )
    said = [r for r in caplog.records if "not yet taken in by stage 1" in r.getMessage()]
    assert len(said) == 1, caplog.records  # once while it lasted, not once a cycle
    # Past OFFSETSYNC_WAITING_WARN_MS it is a warning, once: no stage 1 may be running.
    warned = [r for r in caplog.records if "still not taken in" in r.getMessage()]
    assert [r.levelno for r in warned] == [logging.WARNING], caplog.records
    resumed = [r for r in caplog.records if "taken in by stage 1: its offsets" in r.getMessage()]
    assert len(resumed) == 1, caplog.records


def test_a_topic_recreated_on_the_source_is_not_translated_onto_the_old_topic_s_copies(
    quiet, source_cluster, target_cluster, caplog
):
    """Stage 1 holds a topic deleted and recreated under its name back (its default,
    REPLICATION_ON_TOPIC_RECREATED=stop): the copies stay the old topic's, and a group's offsets
    on the new topic, translated, would land on them (the header names no topic)."""
    source_bootstrap, target = source_cluster.bootstrap_servers, target_cluster.bootstrap_servers
    sync = _sync(quiet)
    sync.cycle()
    assert committed_offsets(target, quiet.group, quiet.copy) == quiet.synced
    delete_topic(source_bootstrap, quiet.topic)
    create_topic(source_bootstrap, quiet.topic, PARTITIONS)
    # Filled again from a backup: its records keep their old times, older than the copies, so
    # that the copies' times do not keep its groups waiting (they would wait for newer copies).
    producer = Producer({"bootstrap.servers": source_bootstrap})
    an_hour_ago_ms = int(time.time() * 1000) - 3_600_000
    for i in range(RECORDS):
        producer.produce(
            quiet.topic, value=b"r-%d" % i, partition=i % PARTITIONS, timestamp=an_hour_ago_ms + i
        )
    assert producer.flush(30) == 0
    newcomer = f"{quiet.group}.new"
    process_and_stop(source_bootstrap, newcomer, quiet.topic, dict.fromkeys(range(PARTITIONS), 2))
    with caplog.at_level(logging.INFO, logger="offsetsync"):
        sync.cycle()
        sync.cycle()
    assert committed_offsets(target, newcomer, quiet.copy) == {}  # on the old topic's copies
    warned = [r for r in caplog.records if "deleted and recreated since" in r.getMessage()]
    assert [r.levelno for r in warned] == [logging.WARNING], caplog.records  # once, not a cycle
    fields = warned[0].event_fields  # type: ignore[attr-defined]
    assert fields["topic"] == quiet.topic
    assert fields["recorded_topic_id"] != fields["topic_id"]


def test_two_topics_taken_in_that_a_rename_change_makes_collide_are_neither_translated(
    source_cluster, target_cluster, unique_topic, unique_group, caplog
):
    """Stage 1 took `orders` and `old` in under other names; then the rename changed to give
    `old` the destination of `orders` (stage 1 stops on such settings, exit 2). The destination
    holds `orders`' copies only, and which topic it was named for is not recorded. Once `old`
    is deleted from the source, stage 1 copies `orders` alone there, and it is synced again."""
    source_bootstrap, target = source_cluster.bootstrap_servers, target_cluster.bootstrap_servers
    both = _renamed_onto_another(
        source_cluster, target_cluster, unique_topic, unique_group, "collide"
    )
    replicated, renamed, source, copy = both.orders, both.old, both.source, both.copy
    group, stranger, settings = both.group, both.stranger, both.settings
    record_taken_in(source_cluster, target_cluster, settings, [replicated, renamed])
    flow = _Flow(replicated, copy, group, {}, settings, OffsetSyncMetrics(), [])
    with _closed_after(flow):
        sync = _sync(flow)
        with caplog.at_level(logging.INFO, logger="offsetsync"):
            sync.cycle()
            sync.cycle()
            assert committed_offsets(target, stranger, copy) == {}  # onto `orders`' copies
            assert committed_offsets(target, group, copy) == {}  # not known to be its copies
            delete_topic(source_bootstrap, renamed)
            sync.cycle()
    assert committed_offsets(target, group, copy) == _synced_offsets(target, source, copy, 4)
    assert committed_offsets(target, stranger, copy) == {}
    warned = [r for r in caplog.records if "a destination it may not have" in r.getMessage()]
    # Once each while it lasted, not once a cycle, and at WARNING: stage 1 has stopped on it.
    assert sorted(r.event_fields["topic"] for r in warned) == [renamed, replicated]  # type: ignore[attr-defined]
    assert {r.levelno for r in warned} == {logging.WARNING}
    assert all(copy == r.event_fields["destination"] for r in warned)  # type: ignore[attr-defined]
    ended = [r for r in caplog.records if "destination collides no more" in r.getMessage()]
    assert [r.event_fields["topic"] for r in ended] == [replicated]  # type: ignore[attr-defined]


class _RefusingGroups:
    """The target's groups, whose commits of the groups in ``refused`` the target refuses
    with ``code`` (what a coordinator answers while it loads, a broker restarting)."""

    def __init__(self, groups: object, refused: set[str], code: int) -> None:
        self._groups = groups
        self._refused = refused
        self._code = code

    def __getattr__(self, name: str) -> object:
        return getattr(self._groups, name)

    def commit(self, offsets: Mapping[str, Mapping], metadata: str) -> dict:
        outcomes = self._groups.commit(  # type: ignore[attr-defined]
            {g: o for g, o in offsets.items() if g not in self._refused}, metadata
        )
        for group in self._refused & offsets.keys():
            outcomes[group] = dict.fromkeys(offsets[group], KafkaError(self._code))
        return outcomes


def test_a_group_whose_commit_the_target_refused_is_not_counted_as_synced(
    source_cluster, target_cluster, unique_topic, unique_group
):
    topic = unique_topic("refused")
    source, copy = copied_topic(source_cluster, target_cluster, topic, PARTITIONS, RECORDS)
    prefix = unique_group("refused")
    moved, refused = f"{prefix}.moved", f"{prefix}.refused"
    for group in (moved, refused):
        process_and_stop(
            source_cluster.bootstrap_servers, group, topic, dict.fromkeys(range(PARTITIONS), 3)
        )
    settings = _settings(
        source_cluster, target_cluster, prefix, prefix, REPLICATION_TOPICS_INCLUDE=re.escape(topic)
    )
    record_taken_in(source_cluster, target_cluster, settings, [topic])
    flow = _Flow(topic, copy, moved, {}, settings, OffsetSyncMetrics(), [])

    def connect_refusing() -> SyncClients:
        clients = connect(settings, flow.metrics)
        groups = _RefusingGroups(
            clients.target_groups, {refused}, KafkaError.COORDINATOR_LOAD_IN_PROGRESS
        )
        return dataclasses.replace(clients, target_groups=groups)  # type: ignore[arg-type]

    with _closed_after(flow):
        sync = _sync(flow, connect_refusing)
        with pytest.raises(KafkaException):  # a refused commit fails the cycle, after the others
            sync.cycle()
    target = target_cluster.bootstrap_servers
    assert committed_offsets(target, moved, copy) == _synced_offsets(target, source, copy, 3)
    assert committed_offsets(target, refused, copy) == {}
    groups = "exactly_offsetsync_groups"
    assert _sample(flow.metrics, groups, state="synced") == 1  # counted the refused group: 2
    assert _sample(flow.metrics, groups, state="commit_refused") == 1

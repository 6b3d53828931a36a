"""What offset sync does with a translation that stops changing: a source group caught up on a
quiet partition, whose offset on the target is committed once and then left to the target. The
target can lose it (an operator deletes the group there, or it expires offsets.retention.minutes
after its last commit, 7 days by default), and the group would find nothing to resume from after
a failover. Its target offset is looked at again after a while, committed again when gone, and
its commit renewed before it could expire. Also: a source topic whose name makes no valid
destination name leaves the other topics' groups synced, as stage 1 leaves it out and copies
on."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import pytest
from confluent_kafka.admin import AdminClient

from offsetsync.app import assemble
from offsetsync.clients import connect
from offsetsync.metrics import OffsetSyncMetrics
from runtime import load_settings
from tests.kafka_helpers import create_topic, produce_numbered, read_all
from tests.offsetsync.copied import copied_topic, record_taken_in
from tests.offsetsync.groups import commit_offsets, committed_offsets, process_and_stop
from tests.replication.scrape import free_port

PARTITIONS = 3
PROCESSED = 4  # records of each partition the source group processed before it stopped
RECONFIRM_AFTER_S = 1.0


@dataclass
class _Flow:
    topic: str
    copy: str
    group: str
    synced: dict  # where the group belongs on the target
    metrics: OffsetSyncMetrics
    closing: list


def _flow(source_cluster, target_cluster, unique_topic, unique_group) -> _Flow:
    """A topic copied to the target with the provenance header, and a group that processed
    PROCESSED records of each partition on the source and stopped."""
    topic = unique_topic("quiet")
    source, copy = copied_topic(source_cluster, target_cluster, topic, PARTITIONS, 30)
    group = unique_group("quiet")
    process_and_stop(
        source_cluster.bootstrap_servers, group, topic, dict.fromkeys(range(PARTITIONS), PROCESSED)
    )
    copies = {
        r.value: r.offset for r in read_all(target_cluster.bootstrap_servers, copy, PARTITIONS)
    }
    synced = {
        (copy, p): copies[[r.value for r in source if r.partition == p][PROCESSED]]
        for p in range(PARTITIONS)
    }
    return _Flow(topic, copy, group, synced, OffsetSyncMetrics(), [])


def _sync(flow: _Flow, source_cluster, target_cluster, include: str, **options):
    settings = load_settings(
        {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
            "REPLICATION_TOPICS_INCLUDE": include,
            "REPLICATION_DESTINATION_TOPIC": "{topic}.copy",
            "REPLICATION_FLOW": flow.group.replace(".", "-")[-90:],
            "OFFSETSYNC_GROUPS_INCLUDE": f"{flow.group}.*",
            "METRICS_PORT": str(free_port()),
        }
    )
    record_taken_in(source_cluster, target_cluster, settings, [flow.topic])
    sync, checkpoints = assemble(
        settings,
        flow.metrics,
        lambda: connect(settings, flow.metrics),
        should_stop=lambda: False,
        wait=lambda _s: None,
        **options,
    )
    flow.closing.extend([checkpoints.close, sync.close])
    return sync


def _sync_looking_every_cycle(flow: _Flow, source_cluster, target_cluster):
    """Offset sync that looks at every unchanged offset on the target again every cycle, and
    renews it at every look."""
    return _sync(
        flow,
        source_cluster,
        target_cluster,
        flow.topic,
        reconfirm_after_s=0.0,
        recommit_after_s=0.0,
    )


@pytest.fixture
def quiet(source_cluster, target_cluster, unique_topic, unique_group):
    flow = _flow(source_cluster, target_cluster, unique_topic, unique_group)
    try:
        yield flow
    finally:
        for close in reversed(flow.closing):
            close()


def _recommitted(flow: _Flow, reason: str) -> float:
    value = flow.metrics.registry.get_sample_value(
        "exactly_offsetsync_offsets_recommitted_total", {"reason": reason}
    )
    return value or 0.0


def test_an_offset_deleted_on_the_target_is_committed_again(
    quiet, source_cluster, target_cluster, caplog
):
    sync = _sync(
        quiet, source_cluster, target_cluster, quiet.topic, reconfirm_after_s=RECONFIRM_AFTER_S
    )
    target = target_cluster.bootstrap_servers
    sync.cycle()
    assert committed_offsets(target, quiet.group, quiet.copy) == quiet.synced

    # An operator deletes the group on the target; the source group does not move.
    admin = AdminClient({"bootstrap.servers": target})
    admin.delete_consumer_groups([quiet.group])[quiet.group].result(30)
    assert committed_offsets(target, quiet.group, quiet.copy) == {}
    time.sleep(RECONFIRM_AFTER_S)  # what the loop waits for, by its own clock
    with caplog.at_level(logging.WARNING, logger="offsetsync"):
        sync.cycle()
    assert committed_offsets(target, quiet.group, quiet.copy) == quiet.synced
    assert _recommitted(quiet, "gone") == PARTITIONS
    gone = [r for r in caplog.records if "gone from it" in r.getMessage()]
    assert len(gone) == 1, caplog.records
    # The age of a restored offset is not the sync's lag: only the first commits were observed.
    lag = quiet.metrics.registry.get_sample_value("exactly_offsetsync_lag_seconds_count")
    assert lag == PARTITIONS

    # Looked at again, there as committed a moment ago: neither restored nor renewed (a day).
    time.sleep(RECONFIRM_AFTER_S)
    sync.cycle()
    assert _recommitted(quiet, "gone") == PARTITIONS
    assert _recommitted(quiet, "renewed") == 0


def test_an_unchanged_offset_s_commit_is_renewed_before_the_target_could_expire_it(
    quiet, source_cluster, target_cluster
):
    sync = _sync_looking_every_cycle(quiet, source_cluster, target_cluster)
    target = target_cluster.bootstrap_servers
    sync.cycle()
    assert committed_offsets(target, quiet.group, quiet.copy) == quiet.synced
    committed = quiet.metrics.registry.get_sample_value(
        "exactly_offsetsync_offsets_committed_total"
    )
    assert committed == PARTITIONS

    sync.cycle()  # nothing moved on the source: the same offsets, committed again
    assert _recommitted(quiet, "renewed") == PARTITIONS
    assert committed_offsets(target, quiet.group, quiet.copy) == quiet.synced
    # A renewal is no move: the moves' counter and the checkpoints stay as they were.
    assert (
        quiet.metrics.registry.get_sample_value("exactly_offsetsync_offsets_committed_total")
        == committed
    )
    assert (
        quiet.metrics.registry.get_sample_value(
            "exactly_offsetsync_checkpoints_total", {"committed": "true"}
        )
        == PARTITIONS
    )


def test_a_topic_without_a_valid_destination_name_leaves_the_other_topics_groups_synced(
    quiet, source_cluster, target_cluster, unique_group, caplog
):
    # Valid on the source (249 characters at most); 5 more with the destination template.
    long = (quiet.topic + "." + "x" * 249)[:247]
    create_topic(source_cluster.bootstrap_servers, long, 1)
    produce_numbered(source_cluster.bootstrap_servers, long, 1, 0, 5)
    # A group of the same selection, committed on the long topic only.
    process_and_stop(source_cluster.bootstrap_servers, f"{quiet.group}.long", long, {0: 2})
    sync = _sync(quiet, source_cluster, target_cluster, f"{quiet.topic}.*")
    with caplog.at_level(logging.WARNING, logger="offsetsync"):
        sync.cycle()  # raised ValueError, and the role exited on every start
        sync.cycle()
    assert committed_offsets(target_cluster.bootstrap_servers, quiet.group, quiet.copy) == (
        quiet.synced
    )
    unnamed = [r for r in caplog.records if "without a valid destination name" in r.getMessage()]
    assert len(unnamed) == 1, caplog.records  # once, not once a cycle


def test_a_target_offset_ahead_stays_ahead_and_is_counted_once_however_often_it_is_looked_at(
    quiet, source_cluster, target_cluster
):
    # A renewal due at every look: never one below the target's offset.
    sync = _sync_looking_every_cycle(quiet, source_cluster, target_cluster)
    target = target_cluster.bootstrap_servers
    # The group read on past the source's position on the target (a failover, then a stop).
    ahead = {partition: offset + 2 for (_, partition), offset in quiet.synced.items()}
    commit_offsets(target, quiet.group, quiet.copy, ahead)
    for _ in range(3):  # each cycle looks at the target again
        sync.cycle()
    assert committed_offsets(target, quiet.group, quiet.copy) == {
        (quiet.copy, p): o for p, o in ahead.items()
    }
    not_moved_back = quiet.metrics.registry.get_sample_value(
        "exactly_offsetsync_not_moved_back_total"
    )
    assert not_moved_back == PARTITIONS
    assert _recommitted(quiet, "renewed") == 0

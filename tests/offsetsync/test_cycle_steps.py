"""A sync cycle takes the groups a step at a time (issue 34): a group's offsets are committed on
the target before the next step's groups are fetched on the source, so its lag is its own
step's, not the whole cycle's."""

from __future__ import annotations

import dataclasses

from offsetsync.app import assemble
from offsetsync.clients import connect
from offsetsync.metrics import OffsetSyncMetrics
from runtime import load_settings
from tests.kafka_helpers import create_topic, produce_numbered, read_all
from tests.offsetsync.groups import committed_offsets, process_and_stop
from tests.replication.scrape import free_port
from tests.validator.planting import copy_to_destination

PARTITIONS = 3
GROUPS = 3


class _WatchedFetches:
    """The source's groups as the cycle asks them, noting before each offset fetch what the
    target holds, by then, for every group fetched earlier."""

    def __init__(self, groups, target_bootstrap: str, destination_topic: str) -> None:
        self._groups = groups
        self._target = target_bootstrap
        self._topic = destination_topic
        self.fetched: list[str] = []
        self.on_target_before: dict[str, dict[str, dict]] = {}

    def __getattr__(self, name):
        return getattr(self._groups, name)

    def committed(self, groups):
        groups = list(groups)
        for group in groups:
            self.on_target_before[group] = {
                earlier: committed_offsets(self._target, earlier, self._topic)
                for earlier in self.fetched
            }
        self.fetched.extend(groups)
        return self._groups.committed(groups)


def test_a_step_s_groups_are_committed_on_the_target_before_the_next_step_is_fetched(
    source_cluster, target_cluster, unique_topic, unique_group
):
    topic = unique_topic("steps")
    create_topic(source_cluster.bootstrap_servers, topic, PARTITIONS)
    produce_numbered(source_cluster.bootstrap_servers, topic, PARTITIONS, 0, 60)
    copy_to_destination(
        target_cluster.bootstrap_servers,
        f"{topic}.copy",
        read_all(source_cluster.bootstrap_servers, topic, PARTITIONS),
        source_cluster_id=source_cluster.cluster_id,
        faults=False,
        partitions=PARTITIONS,
    )
    prefix = unique_group("steps")
    groups = [f"{prefix}.{i}" for i in range(GROUPS)]
    for i, group in enumerate(groups):
        process_and_stop(
            source_cluster.bootstrap_servers, group, topic, dict.fromkeys(range(PARTITIONS), i + 1)
        )
    settings = load_settings(
        {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
            "REPLICATION_TOPICS_INCLUDE": topic,
            "REPLICATION_DESTINATION_TOPIC": "{topic}.copy",
            "REPLICATION_FLOW": prefix.replace(".", "-")[-90:],
            "OFFSETSYNC_GROUPS_INCLUDE": f"{prefix}\\..*",
            "METRICS_PORT": str(free_port()),
        }
    )
    metrics = OffsetSyncMetrics()
    watched: list[_WatchedFetches] = []

    def connect_watched():
        clients = connect(settings, metrics)
        watch = _WatchedFetches(
            clients.source_groups, target_cluster.bootstrap_servers, f"{topic}.copy"
        )
        watched.append(watch)
        return dataclasses.replace(clients, source_groups=watch)

    sync, checkpoints = assemble(
        settings,
        metrics,
        connect_watched,
        should_stop=lambda: True,
        wait=lambda _s: None,
        groups_per_step=1,
    )
    try:
        sync.cycle()
    finally:
        sync.close()
        checkpoints.close()

    (watch,) = watched
    assert watch.fetched == groups  # one step each, by name
    copies = {
        r.value: r.offset
        for r in read_all(target_cluster.bootstrap_servers, f"{topic}.copy", PARTITIONS)
    }
    source = read_all(source_cluster.bootstrap_servers, topic, PARTITIONS)

    def synced(i: int) -> dict:
        # Group i processed i + 1 records of each partition: it resumes at the copy of the next.
        return {
            (f"{topic}.copy", p): copies[[r.value for r in source if r.partition == p][i + 1]]
            for p in range(PARTITIONS)
        }

    # Each group was already where it belongs on the target when the next group was fetched.
    last = groups[-1]
    assert watch.on_target_before[last] == {group: synced(i) for i, group in enumerate(groups[:-1])}
    assert committed_offsets(target_cluster.bootstrap_servers, last, f"{topic}.copy") == synced(
        GROUPS - 1
    )

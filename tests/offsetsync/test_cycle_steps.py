"""A sync cycle takes the groups a step at a time (issue 34): a group's offsets are committed on
the target before the next step's groups are fetched on the source, so its lag is its own
step's, not the whole cycle's. A step whose fetch goes unanswered costs only its own groups; a
step that raises ends its cycle, and the next cycle starts after it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaError, KafkaException

from offsetsync.app import assemble
from offsetsync.clients import connect
from offsetsync.metrics import OffsetSyncMetrics
from runtime import load_settings
from tests.kafka_helpers import read_all
from tests.offsetsync.copied import copied_topic, record_taken_in
from tests.offsetsync.groups import committed_offsets, process_and_stop
from tests.replication.scrape import free_port

PARTITIONS = 3
GROUPS = 3


class _WatchedFetches:
    """The source's groups as the cycle asks them, noting before each offset fetch what the
    target holds by then for every group fetched earlier; a group in ``unanswered`` gets no
    answer, as when the fetching process is lost, and a fetch of one in ``failing`` raises."""

    def __init__(self, groups, target_bootstrap: str, destination_topic: str) -> None:
        self._groups = groups
        self._target = target_bootstrap
        self._topic = destination_topic
        self.unanswered: set[str] = set()
        self.failing: set[str] = set()
        self.fetched: list[str] = []
        self.on_target_before: dict[str, dict[str, dict]] = {}

    def __getattr__(self, name):
        return getattr(self._groups, name)

    def committed(self, groups: Iterable[str]):
        groups = list(groups)
        for group in groups:
            self.on_target_before[group] = {
                earlier: committed_offsets(self._target, earlier, self._topic)
                for earlier in self.fetched
            }
        self.fetched.extend(groups)
        if self.failing & set(groups):
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "a fault of the test's"))
        answered = self._groups.committed([g for g in groups if g not in self.unanswered])
        return {g: offsets for g, offsets in answered.items() if g not in self.unanswered}


@dataclass
class _Setup:
    groups: list[str]
    destination_topic: str
    synced: list[dict]  # where each group belongs on the target
    watch: _WatchedFetches
    sync: object
    target_bootstrap: str
    beats: list[int]  # one per liveness beat

    def on_target(self, group: str) -> dict:
        return committed_offsets(self.target_bootstrap, group, self.destination_topic)


def _setup(source_cluster, target_cluster, unique_topic, unique_group, closing) -> _Setup:
    """A topic copied to the target with the provenance header, GROUPS groups stopped on the
    source after 1, 2, 3 ... records of each partition, and offset sync's loop over them in
    steps of one group, its source groups watched."""
    topic = unique_topic("steps")
    source, copy = copied_topic(source_cluster, target_cluster, topic, PARTITIONS, 60)
    prefix = unique_group("steps")
    groups = [f"{prefix}.{i:02d}" for i in range(GROUPS)]  # by name, in this order
    for i, group in enumerate(groups):
        process_and_stop(
            source_cluster.bootstrap_servers, group, topic, dict.fromkeys(range(PARTITIONS), i + 1)
        )
    copies = {
        r.value: r.offset for r in read_all(target_cluster.bootstrap_servers, copy, PARTITIONS)
    }
    # Group i processed i + 1 records of each partition: it resumes at the copy of the next.
    synced = [
        {
            (copy, p): copies[[r.value for r in source if r.partition == p][i + 1]]
            for p in range(PARTITIONS)
        }
        for i in range(GROUPS)
    ]
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
    record_taken_in(source_cluster, target_cluster, settings, [topic])
    metrics = OffsetSyncMetrics()
    beats: list[int] = []
    watches: list[_WatchedFetches] = []

    def connect_watched():
        clients = connect(settings, metrics)
        watches.append(
            _WatchedFetches(clients.source_groups, target_cluster.bootstrap_servers, copy)
        )
        return dataclasses.replace(clients, source_groups=watches[-1])

    sync, checkpoints = assemble(
        settings,
        metrics,
        connect_watched,
        should_stop=lambda: False,
        wait=lambda _s: None,
        beat=lambda: beats.append(1),
        groups_per_step=1,
    )
    closing.extend([checkpoints.close, sync.close])
    return _Setup(groups, copy, synced, watches[0], sync, target_cluster.bootstrap_servers, beats)


@pytest.fixture
def stepped(source_cluster, target_cluster, unique_topic, unique_group):
    closing: list = []
    try:
        yield _setup(source_cluster, target_cluster, unique_topic, unique_group, closing)
    finally:
        for close in reversed(closing):
            close()


def test_a_step_s_groups_are_committed_on_the_target_before_the_next_step_is_fetched(stepped):
    s = stepped
    s.sync.cycle()
    assert s.watch.fetched == s.groups  # one step each, by name
    # Each group was where it belongs on the target before the next group was fetched.
    for i, group in enumerate(s.groups):
        assert s.watch.on_target_before[group] == {
            earlier: s.synced[j] for j, earlier in enumerate(s.groups[:i])
        }, group
    assert s.on_target(s.groups[-1]) == s.synced[-1]
    # Alive after every step: a step's own waits are what the liveness limit is for.
    assert len(s.beats) == GROUPS


def test_an_unanswered_step_costs_only_its_own_groups(stepped):
    s = stepped
    first, middle, last = s.groups
    s.watch.unanswered = {middle}
    s.sync.cycle()  # does not raise: the first step was answered
    assert s.on_target(first) == s.synced[0]
    assert s.on_target(middle) == {}  # nothing known of it, nothing committed for it
    assert s.on_target(last) == s.synced[2]

    # The same order next cycle (each group a cycle apart), and the middle group synced.
    s.watch.unanswered = set()
    s.watch.fetched.clear()
    s.sync.cycle()
    assert s.watch.fetched == s.groups
    assert s.on_target(middle) == s.synced[1]


def test_a_step_that_raises_ends_its_cycle_and_the_next_cycle_starts_after_it(stepped):
    s = stepped
    first, middle, last = s.groups
    s.watch.failing = {middle}
    with pytest.raises(KafkaException):
        s.sync.cycle()
    assert s.on_target(first) == s.synced[0]  # its step had committed
    assert s.on_target(last) == {}

    # Were the fault to last, the groups after it would still be synced.
    s.watch.fetched.clear()
    with pytest.raises(KafkaException):
        s.sync.cycle()
    assert s.watch.fetched == [last, first, middle]
    assert s.on_target(last) == s.synced[2]

"""A shared changelog (every staging partition's state in one changelog partition, the layout
stage 2 makes for a new flow) against a real one: an assignment restores each of its partitions'
states and no other, resumes each from its own offset, does not wait on other instances'
transactions begun after it looked, and stops on a record whose partition it cannot tell."""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace

import pytest
from confluent_kafka import Producer

from deduplicator import partitions as partitions_module
from deduplicator import restore
from deduplicator.backlog import Backlog
from deduplicator.errors import DeduplicatorError, RestoreTimeoutError
from deduplicator.layout import ChangelogLayout, changelog_layout
from deduplicator.metrics import DeduplicatorMetrics
from deduplicator.partitions import IDLE_STORE_LAG, Partitions
from deduplicator.rule import PartitionState, encode_state, state_key
from deduplicator.state import StateStore
from runtime import load_settings
from tests.deduplicator.assigning import assign_restored
from tests.kafka_helpers import create_topic

STAGING_PARTITIONS = 3
TOPIC_ID = bytes(range(16))
# Source partitions by the staging partition (lane) whose state they are.
KEYS = {lane: [state_key("c", f"t{lane}", p) for p in range(4)] for lane in range(3)}


@pytest.fixture
def flow(source_cluster, target_cluster, unique_topic, tmp_path):
    """Settings, a staging topic of three partitions and its shared changelog."""
    settings = load_settings(
        {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
            "REPLICATION_TOPICS_INCLUDE": "none",
            "REPLICATION_FLOW": unique_topic("flow").replace(".", "-")[-90:],
            "STATE_DIR": str(tmp_path / "state"),
        }
    )
    staging, changelog = unique_topic("staging"), unique_topic("changelog")
    create_topic(target_cluster.bootstrap_servers, staging, STAGING_PARTITIONS)
    create_topic(target_cluster.bootstrap_servers, changelog, 1, {"cleanup.policy": "compact"})
    return settings, staging, changelog


def _writer(target_cluster, unique_topic) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": target_cluster.bootstrap_servers,
            "transactional.id": unique_topic("writer"),
        }
    )
    producer.init_transactions(30)
    return producer


def _write(producer: Producer, topic: str, states: dict[int, dict[bytes, PartitionState]]):
    """Produce ``states`` (by lane) as stage 2 does, into the open transaction."""
    layout = ChangelogLayout(topic, shared=True)
    for lane, by_key in states.items():
        for key, state in by_key.items():
            producer.produce(
                topic,
                key=key,
                value=encode_state(state),
                partition=layout.partition_of(lane),
                headers=layout.headers(lane),
            )
    producer.flush(30)


def _states(high: int) -> dict[int, dict[bytes, PartitionState]]:
    return {
        lane: {key: PartitionState(TOPIC_ID, high + i) for i, key in enumerate(keys)}
        for lane, keys in KEYS.items()
    }


def _assigned(settings, staging, changelog, target_cluster, unique_group, lanes):
    layout = ChangelogLayout(changelog, shared=True)
    bootstrap = target_cluster.bootstrap_servers
    return assign_restored(settings, layout, staging, bootstrap, unique_group("s2"), lanes)


def _all_keys_of(owned: Partitions, lane: int) -> dict[bytes, PartitionState | None]:
    everyone = [key for keys in KEYS.values() for key in keys]
    return {key: owned.stores[lane].get(key) for key in everyone}


def test_each_partition_gets_its_own_committed_state_and_resumes_from_its_own_offset(
    flow, target_cluster, unique_topic, unique_group, caplog
):
    settings, staging, changelog = flow
    writer = _writer(target_cluster, unique_topic)
    writer.begin_transaction()
    _write(writer, changelog, _states(100))
    writer.commit_transaction(30)
    writer.begin_transaction()
    _write(writer, changelog, _states(900))  # never committed: never state
    writer.abort_transaction(30)

    owned = _assigned(settings, staging, changelog, target_cluster, unique_group, [0, 2])
    try:
        for lane in (0, 2):
            # Its own keys at their committed state, and not one key of another partition.
            expected = {key: None for keys in KEYS.values() for key in keys}
            expected |= _states(100)[lane]
            assert _all_keys_of(owned, lane) == expected
        assert set(owned.stores) == {0, 2}
    finally:
        owned.close()

    # Lane 1 alone moves on; lane 0 restores again from past its own last record.
    writer.begin_transaction()
    _write(writer, changelog, {1: _states(5000)[1]})
    writer.commit_transaction(30)
    caplog.set_level(logging.INFO, logger="deduplicator.loop")
    owned = _assigned(settings, staging, changelog, target_cluster, unique_group, [0, 1])
    try:
        assert owned.stores[1].get(KEYS[1][0]) == PartitionState(TOPIC_ID, 5000)
        assert owned.stores[0].get(KEYS[0][0]) == PartitionState(TOPIC_ID, 100)
        lines = {
            fields["partition"]: (fields["from_offset"], fields["records"])
            for r in caplog.records
            if r.getMessage() == "state restored" and (fields := r.event_fields)
        }
        # Lane 0's store reflected the log up to its end then (records 0-11 and a marker, the
        # aborted 13-24 and a marker): read on from 26, nothing new.
        assert lines[0] == (26, 0)
        assert lines[1] == (0, 8)  # a new store: both committed transactions of lane 1
    finally:
        owned.close()


def test_a_partition_without_records_does_not_pull_later_restores_back_to_the_beginning(
    flow, target_cluster, unique_topic, unique_group, caplog
):
    """With more lanes than source partitions some staging partitions never get a record. Their
    stores still reflect the shared partition up to where a restore read it, so the next restore
    starts there, not at offset 0 for every partition it brings."""
    settings, staging, changelog = flow
    writer = _writer(target_cluster, unique_topic)
    for high in (100, 200):
        writer.begin_transaction()
        _write(writer, changelog, {1: _states(high)[1]})
        writer.commit_transaction(30)
    # Offsets 0-3, a marker at 4, 5-8, a marker at 9: the log ends at 10.
    owned = _assigned(settings, staging, changelog, target_cluster, unique_group, [0])
    try:
        assert owned.stores[0].changelog_offset() == 9
    finally:
        owned.close()
    caplog.set_level(logging.INFO, logger="deduplicator.loop")
    owned = _assigned(settings, staging, changelog, target_cluster, unique_group, [0])
    owned.close()
    restored = [r.event_fields for r in caplog.records if r.getMessage() == "state restored"]
    assert [(f["partition"], f["from_offset"], f["records"]) for f in restored] == [(0, 10, 0)]


def test_a_restore_cut_short_resumes_near_where_it_stopped_for_every_partition(
    flow, target_cluster, unique_topic, unique_group, monkeypatch, caplog
):
    """A shared read longer than the restore deadline must not start over at every attempt (and
    fail again for ever): what it read is kept every batch, also by a store whose partition had
    no record in it."""
    settings, staging, changelog = flow
    writer = _writer(target_cluster, unique_topic)
    for high in range(0, 1000, 100):  # ten transactions of lane 1 alone: offsets 0-49
        writer.begin_transaction()
        _write(writer, changelog, {1: _states(high)[1]})
        writer.commit_transaction(30)
    monkeypatch.setattr(partitions_module, "RESTORE_BATCH_SIZE", 8)
    real_tail = partitions_module.shared_changelog_tail

    def cut_short(*args, **kwargs):
        for number, record in enumerate(real_tail(*args, **kwargs)):
            if number == 20:  # the deadline, mid-way
                raise RestoreTimeoutError("cut short by the test")
            yield record

    monkeypatch.setattr(partitions_module, "shared_changelog_tail", cut_short)
    with pytest.raises(RestoreTimeoutError, match="cut short"):
        _assigned(settings, staging, changelog, target_cluster, unique_group, [0, 1])
    monkeypatch.setattr(partitions_module, "shared_changelog_tail", real_tail)
    caplog.set_level(logging.INFO, logger="deduplicator.loop")
    owned = _assigned(settings, staging, changelog, target_cluster, unique_group, [0, 1])
    try:
        assert owned.stores[1].get(KEYS[1][0]) == PartitionState(TOPIC_ID, 900)
    finally:
        owned.close()
    restored = {
        r.event_fields["partition"]: r.event_fields["from_offset"]
        for r in caplog.records
        if r.getMessage() == "state restored"
    }
    # Four records and a marker make each transaction five offsets: the second batch of eight
    # records read ended at offset 18, and both partitions go on from past it.
    assert restored == {0: 19, 1: 19}


def test_stores_of_a_shared_changelog_that_lag_a_commit_by_more_than_the_bound_catch_up(
    tmp_path,
):
    """Between restores: after each commit, an owned store far behind its last changelog record
    is written the commit's offset, so an instance that runs long with idle partitions does not
    restore from where they last had a record."""
    metrics = DeduplicatorMetrics()
    settings = SimpleNamespace(state_dir=str(tmp_path), flow="f")
    stores = {lane: StateStore.open(tmp_path / str(lane)) for lane in range(3)}
    try:
        stores[1].commit({KEYS[1][0]: PartitionState(TOPIC_ID, 1)}, 700)
        stores[2].commit({KEYS[2][0]: PartitionState(TOPIC_ID, 1)}, 20)
        for shared in (False, True):
            owned = Partitions(
                settings, ChangelogLayout("c", shared), metrics, Backlog("s", metrics.backlog)
            )
            owned.stores = dict(stores)
            owned.advance_idle(IDLE_STORE_LAG + 500)
            offsets = [store.changelog_offset() for store in stores.values()]
            if shared:  # a new store and one 1 480 behind catch up; one 800 behind does not
                assert offsets == [IDLE_STORE_LAG + 500, 700, IDLE_STORE_LAG + 500]
            else:  # co-partitioned: every partition's own records are its partition's
                assert offsets == [None, 700, 20]
    finally:
        for store in stores.values():
            store.close()


def test_a_restore_does_not_wait_for_a_transaction_begun_after_it_looked(
    flow, target_cluster, unique_topic, unique_group, monkeypatch
):
    """Other instances write the shared partition all the time. A transaction that begins after
    the restore first asked for the log's end holds nothing of the partitions being restored
    (their offsets are stable by then): the restore ends without it, instead of waiting until
    no transaction is open anywhere in the partition, which with busy neighbours is never."""
    settings, staging, changelog = flow
    writer = _writer(target_cluster, unique_topic)
    writer.begin_transaction()
    _write(writer, changelog, _states(100))
    writer.commit_transaction(30)
    neighbour = _writer(target_cluster, unique_topic)
    asked = restore._ends

    # The first ask is the assignment's one look at the end, which its read then stops at.
    def ends_then_a_neighbour_writes(reader, tp):
        answer = asked(reader, tp)
        if not neighbour_open:
            neighbour.begin_transaction()
            _write(neighbour, changelog, {1: _states(7000)[1]})  # left open
            neighbour_open.append(True)
        return answer

    neighbour_open: list[bool] = []
    monkeypatch.setattr(restore, "_ends", ends_then_a_neighbour_writes)
    monkeypatch.setattr(partitions_module, "RESTORE_DEADLINE_S", 15.0)
    try:
        owned = _assigned(settings, staging, changelog, target_cluster, unique_group, [0])
        try:
            assert neighbour_open
            assert owned.stores[0].get(KEYS[0][0]) == PartitionState(TOPIC_ID, 100)
        finally:
            owned.close()
    finally:
        neighbour.abort_transaction(30)


def test_a_restore_waits_for_a_transaction_open_below_the_end_it_saw(
    flow, target_cluster, unique_topic, unique_group, monkeypatch
):
    """The other side of the same rule: a transaction already in the log when the restore
    looked may hold the partition's state (a previous owner's, committing); the restore waits
    for it until its deadline, then stops saying where it stood."""
    settings, staging, changelog = flow
    writer = _writer(target_cluster, unique_topic)
    writer.begin_transaction()
    _write(writer, changelog, _states(100))  # left open
    monkeypatch.setattr(partitions_module, "RESTORE_DEADLINE_S", 3.0)
    try:
        with pytest.raises(RestoreTimeoutError, match="has not ended"):
            _assigned(settings, staging, changelog, target_cluster, unique_group, [0])
    finally:
        writer.abort_transaction(30)


def test_a_record_without_its_partition_header_stops_the_restore(
    flow, target_cluster, unique_topic, unique_group
):
    settings, staging, changelog = flow
    writer = _writer(target_cluster, unique_topic)
    writer.begin_transaction()
    writer.produce(changelog, key=KEYS[0][0], value=encode_state(PartitionState(TOPIC_ID, 1)))
    writer.commit_transaction(30)
    with pytest.raises(DeduplicatorError, match=rf"{re.escape(changelog)}/0/0 has no valid"):
        _assigned(settings, staging, changelog, target_cluster, unique_group, [0])


@pytest.mark.parametrize(
    ("found", "staging", "shared"), [(1, 12, True), (12, 12, False), (1, 1, False)]
)
def test_the_changelog_partition_count_tells_the_layout(found, staging, shared):
    assert changelog_layout("c", found, "s", staging) == ChangelogLayout("c", shared)


def test_a_changelog_of_another_partition_count_is_refused_naming_both_topics():
    with pytest.raises(DeduplicatorError, match="changelog topic c has 5 partitions and staging"):
        changelog_layout("c", 5, "s", 12)

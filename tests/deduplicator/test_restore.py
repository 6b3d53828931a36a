"""Restore against a real changelog topic: only committed state comes back, an interrupted
restore resumes from the store's changelog offset, and the deadline stops a restore."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from deduplicator.backlog import Backlog
from deduplicator.errors import RestoreTimeoutError
from deduplicator.layout import ChangelogLayout
from deduplicator.metrics import DeduplicatorMetrics
from deduplicator.partitions import Partitions
from deduplicator.restore import await_stable_offsets, changelog_reader, changelog_tail
from deduplicator.rule import PartitionState, decode_state, encode_state, state_key
from deduplicator.state import StateStore
from runtime import load_settings
from tests.deduplicator.assigning import assign_restored
from tests.kafka_helpers import create_topic, delete_topic

KEYS = [state_key("cluster-a", "orders", p) for p in range(5)]
TOPIC_ID = bytes(range(16))
FAR = 3600.0


@pytest.fixture
def changelog(target_cluster, unique_topic):
    """A changelog partition of three transactions of 1000 records each, the middle one aborted.

    Returns (topic, the state each key must have after a restore)."""
    topic = unique_topic("changelog")
    create_topic(target_cluster.bootstrap_servers, topic, 1, {"cleanup.policy": "compact"})
    producer = Producer(
        {
            "bootstrap.servers": target_cluster.bootstrap_servers,
            "transactional.id": unique_topic("changelog-writer"),
        }
    )
    producer.init_transactions(30)
    expected: dict[bytes, PartitionState] = {}
    high = itertools.count()
    for commit in (True, False, True):
        producer.begin_transaction()
        written = {}
        for _ in range(1000):
            key = KEYS[next(high) % len(KEYS)]
            written[key] = PartitionState(TOPIC_ID, next(high))
            producer.produce(topic, key=key, value=encode_state(written[key]), partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
            expected.update(written)
        else:
            producer.abort_transaction(30)
    return topic, expected


@pytest.fixture
def settings(source_cluster, target_cluster, unique_topic, tmp_path):
    return load_settings(
        {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
            "REPLICATION_TOPICS_INCLUDE": "none",
            "REPLICATION_FLOW": unique_topic("flow").replace(".", "-")[-90:],
            "STATE_DIR": str(tmp_path / "state"),
        }
    )


def _state(store: StateStore) -> dict[bytes, PartitionState | None]:
    return {key: store.get(key) for key in KEYS}


def test_restore_brings_back_exactly_the_committed_state(changelog, settings, tmp_path):
    topic, expected = changelog
    with changelog_reader(settings) as reader, StateStore.open(tmp_path / "s") as store:
        applied = store.restore(changelog_tail(reader, topic, 0, 0, time.monotonic() + FAR))
        assert applied == 2000  # the aborted transaction's 1000 records are not state
        assert _state(store) == expected
        # Offsets 0-999, a commit marker, 1001-2000 aborted, a marker, 2002-3001, a marker.
        assert store.changelog_offset() == 3001
        # Up to date: the tail is only a marker now, and nothing is applied twice.
        again = changelog_tail(reader, topic, 0, 3002, time.monotonic() + FAR)
        assert store.restore(again) == 0


def test_an_interrupted_restore_resumes_where_it_stopped(changelog, settings, tmp_path):
    topic, expected = changelog
    directory = tmp_path / "s"
    with changelog_reader(settings) as reader:
        with StateStore.open(directory) as store:
            tail = changelog_tail(reader, topic, 0, 0, time.monotonic() + FAR)
            # Stopped after 1234 records, as a killed process would be.
            assert store.restore(itertools.islice(tail, 1234), batch_size=100) == 1234
            tail.close()
            reached = store.changelog_offset()
            # 1000 of the first transaction, none of the aborted one, 234 of the third.
            assert reached == 2002 + 233
        with StateStore.open(directory) as store:
            assert store.changelog_offset() == reached
            start = reached + 1
            store.restore(changelog_tail(reader, topic, 0, start, time.monotonic() + FAR))
            assert _state(store) == expected
            assert store.changelog_offset() == 3001


def test_a_restore_past_its_deadline_stops_with_where_it_was(changelog, settings, tmp_path):
    topic, _ = changelog
    with changelog_reader(settings) as reader, StateStore.open(tmp_path / "s") as store:
        with pytest.raises(RestoreTimeoutError, match="stopped at offset 0 of 3003"):
            store.restore(changelog_tail(reader, topic, 0, 0, time.monotonic() - 1))
        assert store.changelog_offset() is None


def test_decoded_state_matches_what_was_written(changelog):
    _, expected = changelog
    for state in expected.values():
        assert decode_state(encode_state(state)) == state


def test_a_restore_waits_for_a_previous_owners_open_transaction_and_keeps_what_it_commits(
    changelog, settings, target_cluster, unique_topic, tmp_path
):
    """A previous owner frozen between sending its offsets and committing (a zombie) commits
    when it wakes. The restore must bring back that transaction's state, or the staging offsets
    its commit moved would meet state from before it (found by exactly chaos: envelopes judged
    orphans for good, records lost)."""
    topic, expected = changelog
    zombie = Producer(
        {
            "bootstrap.servers": target_cluster.bootstrap_servers,
            "transactional.id": unique_topic("zombie"),
        }
    )
    zombie.init_transactions(30)
    zombie.begin_transaction()
    late = {key: PartitionState(TOPIC_ID, 10_000 + i) for i, key in enumerate(KEYS)}
    for key, state in late.items():
        zombie.produce(topic, key=key, value=encode_state(state), partition=0)
    zombie.flush(30)  # in the log, its transaction open
    restored: list[int | BaseException] = []

    def restore() -> None:
        try:
            restored.append(
                store.restore(changelog_tail(reader, topic, 0, 0, time.monotonic() + 60))
            )
        except BaseException as exc:  # the test thread reports it
            restored.append(exc)

    with changelog_reader(settings) as reader, StateStore.open(tmp_path / "s") as store:
        restoring = threading.Thread(target=restore, daemon=True)
        restoring.start()
        restoring.join(3)
        assert restoring.is_alive(), restored  # waiting, not done with the state before it
        zombie.commit_transaction(30)  # the zombie wakes and commits
        restoring.join(60)
        assert restored == [2000 + len(KEYS)]
        assert _state(store) == {**expected, **late}


def test_an_assignment_waits_for_a_previous_owners_offsets_sent_before_its_changelog_records(
    changelog, settings, target_cluster, unique_topic, unique_group, caplog, monkeypatch
):
    """A previous owner sends its staging offsets into its transaction before its flush has put
    the transaction's changelog records in the log (the loop's steps 2 and 3), and is frozen
    between the two. Its successor's assignment must wait for that transaction, not restore the
    changelog without it: woken, the owner commits, and the offsets the successor starts from
    would meet state from before that transaction."""
    topic, expected = changelog
    staging = unique_topic("staging")
    create_topic(target_cluster.bootstrap_servers, staging, 1)
    group = unique_group("stage2")
    zombie = Producer(
        {
            "bootstrap.servers": target_cluster.bootstrap_servers,
            "transactional.id": unique_topic("zombie"),
        }
    )
    zombie.init_transactions(30)
    zombie.begin_transaction()
    group_of = Consumer({"bootstrap.servers": target_cluster.bootstrap_servers, "group.id": group})
    zombie.send_offsets_to_transaction(
        [TopicPartition(staging, 0, 7)], group_of.consumer_group_metadata(), 30
    )
    group_of.close()
    successor = Consumer(
        {
            "bootstrap.servers": target_cluster.bootstrap_servers,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    metrics = DeduplicatorMetrics()
    owned = Partitions(
        settings, ChangelogLayout(topic, shared=False), metrics, Backlog(staging, metrics.backlog)
    )
    monkeypatch.setattr("deduplicator.restore._STABLE_ASK_S", 1.0)  # said within the wait
    caplog.set_level(logging.INFO, logger="deduplicator.loop")
    assigned: list[BaseException | None] = []

    def assign() -> None:
        try:
            owned.assign(successor, [TopicPartition(staging, 0)])
            assigned.append(None)
        except BaseException as exc:  # the test thread reports it
            assigned.append(exc)

    try:
        assigning = threading.Thread(target=assign, daemon=True)
        assigning.start()
        assigning.join(3)
        assert assigning.is_alive(), assigned  # waiting, not restored without the transaction
        # And saying why, once.
        waiting = [r for r in caplog.records if "not stable yet" in r.getMessage()]
        assert len(waiting) == 1, caplog.records
        # The owner wakes: its records reach the log (in the loop they were produced before the
        # offsets, and still queued behind the in-flight limit), and it commits.
        late = {key: PartitionState(TOPIC_ID, 10_000 + i) for i, key in enumerate(KEYS)}
        for key, state in late.items():
            zombie.produce(topic, key=key, value=encode_state(state), partition=0)
        zombie.commit_transaction(30)
        assigning.join(60)
        assert assigned == [None]
        assert _state(owned.stores[0]) == {**expected, **late}
        # And the offsets the successor starts from are the ones that state goes with.
        assert successor.committed([TopicPartition(staging, 0)], 30)[0].offset == 7
    finally:
        owned.close()
        successor.close()


def test_waiting_for_stable_offsets_stops_at_once_on_an_error_no_wait_heals():
    """Refused (an ACL), the fetch is not waited on until the restore deadline under a line
    blaming a previous owner: the error itself stops the assignment."""

    class _Refused:
        asked = 0

        def committed(self, partitions, timeout):
            self.asked += 1
            refusal = KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)
            return [SimpleNamespace(partition=0, error=refusal)]

    consumer = _Refused()
    with pytest.raises(KafkaException, match="GROUP_AUTHORIZATION_FAILED"):
        await_stable_offsets(consumer, [TopicPartition("staging", 0)], time.monotonic() + 2)
    assert consumer.asked == 1


def test_a_state_directory_ahead_of_a_changelog_made_anew_is_discarded_and_restored(
    changelog, settings, target_cluster, unique_topic, unique_group, caplog
):
    """An operator resets the flow's topics (or the target is rebuilt) while stage 2's state
    directory is kept. The store then reflects changelog offsets the new changelog does not
    hold. Trusted, its old states would drop the new records as duplicates (records lost) and
    its offset would refuse the first commit, on every restart."""
    topic, expected = changelog
    staging = unique_topic("staging")
    create_topic(target_cluster.bootstrap_servers, staging, 1)
    bootstrap = target_cluster.bootstrap_servers

    def assigned_state() -> dict[bytes, PartitionState | None]:
        layout = ChangelogLayout(topic, shared=False)
        owned = assign_restored(settings, layout, staging, bootstrap, unique_group("stage2"), [0])
        try:
            return _state(owned.stores[0])
        finally:
            owned.close()

    assert assigned_state() == expected  # the state directory now reflects offset 3001

    # The changelog deleted and made anew, one transaction in it.
    delete_topic(bootstrap, topic)
    create_topic(bootstrap, topic, 1, {"cleanup.policy": "compact"})
    writer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_topic("new")})
    writer.init_transactions(30)
    writer.begin_transaction()
    fresh = PartitionState(TOPIC_ID, 3)
    writer.produce(topic, key=KEYS[0], value=encode_state(fresh), partition=0)
    writer.commit_transaction(30)

    caplog.set_level(logging.WARNING, logger="deduplicator.loop")
    assert assigned_state() == {KEYS[0]: fresh, **dict.fromkeys(KEYS[1:])}
    discarded = [r for r in caplog.records if "does not hold" in r.getMessage()]
    assert len(discarded) == 1, caplog.records

"""A failover as users do it (issue 7): consumer groups stop on the source, `exactly offsetsync`
(as a process) moves their offsets, and the same groups resume on the target reading exactly the
records they had not processed, checked record by record."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from envelope import HEADER_PROVENANCE, encode_provenance
from offsetsync.checkpoints import Checkpoint
from runtime import load_settings
from runtime.names import FlowNames
from runtime.settings import role_environment
from tests.backends import choose_backend, cold_cluster
from tests.commands import run_exactly
from tests.kafka_helpers import ReadRecord, create_topic, read_all
from tests.offsetsync.copied import record_taken_in
from tests.offsetsync.groups import (
    ALL,
    await_committed,
    commit_offsets,
    committed_offsets,
    describe_with_kafka_tool,
    process_and_stop,
    resume_on_target,
)
from tests.replication.processes import role_processes
from tests.replication.scrape import await_metric, free_port, sample, scrape
from tests.secured import secured_flow
from tests.validator.planting import PARTITIONS, copy_to_destination, create_source

INTERVAL_MS = "300"


def _content(record: ReadRecord) -> tuple[object, ...]:
    return (record.key, record.value, record.timestamp[1])


@pytest.fixture(scope="module")
def flow(source_cluster, target_cluster):
    """The planted source topic (markers, an aborted transaction, an out-of-order timestamp),
    a one-millisecond topic, and their copies on the target with and without the header."""
    base = f"failover.{uuid.uuid4().hex[:8]}"
    topics = {"planted": base, "same-ms": f"{base}.samems"}
    records = {"planted": create_source(source_cluster.bootstrap_servers, base)}
    create_topic(source_cluster.bootstrap_servers, topics["same-ms"], 1)
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    moment = int(time.time() * 1000)
    for i in range(10):
        producer.produce(topics["same-ms"], value=b"ms-%d" % i, partition=0, timestamp=moment)
    assert producer.flush(30) == 0
    records["same-ms"] = read_all(source_cluster.bootstrap_servers, topics["same-ms"], 1)
    for name, topic in topics.items():
        for suffix, cluster_id in (("copy", source_cluster.cluster_id), ("plain", None)):
            copy_to_destination(
                target_cluster.bootstrap_servers,
                f"{topic}.{suffix}",
                records[name],
                source_cluster_id=cluster_id,
                faults=False,
                partitions=PARTITIONS if name == "planted" else 1,
            )
    return base, topics, records


def _environment(source_cluster, target_cluster, base, suffix, groups, **extra):
    """A flow's settings over the topics ``base`` and ``base.samems``; those on the source are
    recorded as stage 1 records a topic it took in (offset sync translates only those)."""
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": f"{base}(\\.samems)?",
        "REPLICATION_DESTINATION_TOPIC": "{topic}." + suffix,
        "REPLICATION_FLOW": f"f{uuid.uuid4().hex[:8]}",
        "OFFSETSYNC_GROUPS_INCLUDE": f"{groups}.*",
        "OFFSETSYNC_INTERVAL_MS": INTERVAL_MS,
        "METRICS_PORT": str(free_port()),
        **extra,
    }
    on_source = AdminClient({"bootstrap.servers": source_cluster.bootstrap_servers}).list_topics(
        timeout=30
    )
    taken_in = [t for t in (base, f"{base}.samems") if t in on_source.topics]
    record_taken_in(source_cluster, target_cluster, load_settings(env), taken_in)
    return env


# Readable records of the planted partition 0: 0-14, a marker at 15, aborted 16-25, a marker
# at 26, 27-41 (41 carries the timestamp of 12), a marker at 42. Other partitions alike.
POSITIONS = {
    # group: (topic, records processed per partition)
    "caught-up": ("planted", dict.fromkeys(range(PARTITIONS), ALL)),
    "mid-stream": ("planted", {p: 1 + 2 * p for p in range(PARTITIONS)}),
    # 15 records processed: the committed offset is the commit marker at 15.
    "on-a-marker": ("planted", dict.fromkeys(range(PARTITIONS), 15)),
    # 29 processed: the next record (offset 41) has an earlier timestamp than 13 before it.
    "out-of-order": ("planted", dict.fromkeys(range(PARTITIONS), 29)),
    "same-ms": ("same-ms", {0: 4}),
}


def _stop_groups_on_source(source_cluster, prefix, topics):
    committed = {}
    for name, (topic_name, counts) in POSITIONS.items():
        group = f"{prefix}.{name}"
        committed[group] = (
            topic_name,
            process_and_stop(source_cluster.bootstrap_servers, group, topics[topic_name], counts),
        )
    return committed


def _move_and_resume(flow, source_cluster, target_cluster, tmp_path, suffix, *, secured=False):
    """Groups stopped on the source at every position, moved by `python -m offsetsync`, then
    resumed on the `suffix` copy: per group and partition, (what the group read on the target,
    what it had not processed on the source), and the group prefix. ``secured``: offset sync
    reaches the source over SASL_SSL and the target over mutual TLS, with only its ACLs."""
    base, topics, records = flow
    prefix = f"g{uuid.uuid4().hex[:8]}"
    committed = _stop_groups_on_source(source_cluster, prefix, topics)
    # The plain copies were written with the header off: the flow's setting says so.
    header = {"REPLICATION_PROVENANCE_HEADER": "false"} if suffix == "plain" else {}
    env = _environment(source_cluster, target_cluster, base, suffix, prefix, **header)
    if secured:
        env = secured_flow(
            source_cluster, target_cluster, env, list(topics.values()), list(committed)
        )["offsetsync"]
    with role_processes(tmp_path) as roles:
        sync = roles.start("offsetsync", env)
        for group, (topic_name, offsets) in committed.items():
            copy = f"{topics[topic_name]}.{suffix}"
            await_committed(target_cluster.bootstrap_servers, group, copy, partitions=len(offsets))
        metrics = scrape(env["METRICS_PORT"])
        assert sample(metrics, "exactly_offsetsync_groups", state="synced") == len(committed)
        assert sync.terminate() == 0
        sync.wait_for_log("offsetsync stopped cleanly", since_start=True)
    outcomes = {}
    for group, (topic_name, offsets) in committed.items():
        copy = f"{topics[topic_name]}.{suffix}"
        partitions = len(offsets) if topic_name == "planted" else 1
        resumed = resume_on_target(target_cluster.bootstrap_servers, group, copy, partitions)
        for partition, offset in offsets.items():
            unread = [
                _content(r)
                for r in records[topic_name]
                if r.partition == partition and r.offset >= offset
            ]
            outcomes[(group, partition)] = ([_content(r) for r in resumed[partition]], unread)
    return outcomes, prefix


def test_groups_resume_on_the_target_with_nothing_re_read_and_nothing_skipped(
    flow, source_cluster, target_cluster, tmp_path
):
    outcomes, prefix = _move_and_resume(flow, source_cluster, target_cluster, tmp_path, "copy")
    for (group, partition), (read, unread) in outcomes.items():
        assert read == unread, (group, partition)
    # Kafka's own tool, from the brokers' jars, sees the translated offsets on the target.
    group = f"{prefix}.mid-stream"
    copy = f"{flow[1]['planted']}.copy"
    on_target = committed_offsets(target_cluster.bootstrap_servers, group, copy)
    assert describe_with_kafka_tool(target_cluster.bootstrap_servers, group) == on_target


def test_groups_resume_exactly_when_offsetsync_reaches_both_clusters_secured(
    flow, source_cluster, target_cluster, tmp_path
):
    outcomes, _prefix = _move_and_resume(
        flow, source_cluster, target_cluster, tmp_path, "copy", secured=True
    )
    for (group, partition), (read, unread) in outcomes.items():
        assert read == unread, (group, partition)


def test_without_the_header_groups_skip_nothing(flow, source_cluster, target_cluster, tmp_path):
    outcomes, _prefix = _move_and_resume(flow, source_cluster, target_cluster, tmp_path, "plain")
    for (group, partition), (read, unread) in outcomes.items():
        # Whatever is read again comes first; everything unread follows, in order.
        assert read[len(read) - len(unread) :] == unread, (group, partition)


def _checkpoints(target_bootstrap, flow_name, group):
    consumer = Consumer(
        {
            "bootstrap.servers": target_bootstrap,
            "group.id": "test-checkpoint-reader",
            "enable.auto.commit": False,
        }
    )
    try:
        topic = FlowNames(flow_name).checkpoints
        _low, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        found = []
        for _ in range(end):
            message = consumer.poll(10)
            assert message is not None
            assert not message.error()
            found.append(Checkpoint.from_value(message.value()))
        return [c for c in found if c.group == group]
    finally:
        consumer.close()


TARGETS = ("shared", "cold", "restarted")


@pytest.fixture(params=TARGETS)
def scenario_target(request, flow, source_cluster, target_cluster, tmp_path):
    """The target of a scenario: the session's shared one (warmed by whatever ran before), one
    of the test's own that has seen nothing yet ("cold"), or one of its own whose broker is
    killed and restarted while offset sync runs ("restarted"). With its copy of the planted
    topic (with the provenance header)."""
    if request.param == "shared":
        yield target_cluster
        return
    if choose_backend() != "localkafka":
        pytest.skip("a cluster of the test's own needs localkafka")
    with cold_cluster(tmp_path / "target", f"{request.param}-target") as target:
        _base, topics, records = flow
        copy_to_destination(
            target.bootstrap_servers,
            f"{topics['planted']}.copy",
            records["planted"],
            source_cluster_id=source_cluster.cluster_id,
            faults=False,
        )
        yield target


def test_an_active_group_is_never_moved_offsets_never_go_back_and_deleted_ones_stay(
    flow, source_cluster, scenario_target, tmp_path, request
):
    restart = request.node.callspec.params["scenario_target"] == "restarted"
    base, topics, _records = flow
    topic, copy = topics["planted"], f"{topics['planted']}.copy"
    prefix = f"g{uuid.uuid4().hex[:8]}"
    active, ahead, deleted = (f"{prefix}.{name}" for name in ("active", "ahead", "deleted"))
    source, target = source_cluster.bootstrap_servers, scenario_target.bootstrap_servers
    everywhere = dict.fromkeys(range(PARTITIONS), 5)
    # `ahead` already read further on the target: the first thing a cold target sees.
    commit_offsets(target, ahead, copy, dict.fromkeys(range(PARTITIONS), 20))
    # `active` has a member there.
    member = Consumer(
        {"bootstrap.servers": target, "group.id": active, "enable.auto.commit": False}
    )
    member.subscribe([copy])
    deadline = time.monotonic() + 30
    while not member.assignment():
        assert time.monotonic() < deadline, "the member on the target got no partitions"
        member.poll(0.2)
    env = _environment(source_cluster, scenario_target, base, "copy", prefix)
    try:
        with role_processes(tmp_path) as roles:
            sync = roles.start("offsetsync", env)
            if restart:
                # The groups' source commits meet a target that is down, then one whose group
                # coordinator has just loaded again from its log.
                scenario_target.broker.kill()
            for group in (active, ahead, deleted):
                commit_offsets(source, group, topic, everywhere)
            if restart:
                scenario_target.broker.restart()
            synced = await_committed(target, deleted, copy, everywhere, timeout_s=90)
            deadline = time.monotonic() + 60
            while (
                sample(
                    scrape(env["METRICS_PORT"]),
                    "exactly_offsetsync_groups",
                    state="active_on_target",
                )
                != 1
            ):
                assert time.monotonic() < deadline, sync.log_tail()
                time.sleep(0.2)
            # Not moved: the member's group has no offsets on the target; the translations are
            # in the checkpoint topic instead.
            assert committed_offsets(target, active, copy) == {}
            checkpoints = _checkpoints(target, env["REPLICATION_FLOW"], active)
            assert {(c.partition, c.offset, c.committed) for c in checkpoints} == {
                (p, 5, False) for p in range(PARTITIONS)
            }
            # Never backwards: `ahead` stays at 20 on the target.
            await_metric(env["METRICS_PORT"], "exactly_offsetsync_not_moved_back_total", PARTITIONS)
            assert committed_offsets(target, ahead, copy) == {
                (copy, p): 20 for p in range(PARTITIONS)
            }
            # The source group `deleted` is deleted: its target offsets stay as they are.
            admin = AdminClient({"bootstrap.servers": source})
            admin.delete_consumer_groups([deleted])[deleted].result(30)
            sync.wait_for_log("no committed offset on the source any more")
            # The member leaves: the group is free, and the next cycle moves it.
            member.close()
            member = None
            await_committed(target, active, copy, everywhere)
            assert committed_offsets(target, deleted, copy) == synced
            # A source commit further on moves the target forward; one back does not. Source
            # offset 35 is the 24th readable record (16-26 are aborted and markers): copy 23.
            commit_offsets(source, ahead, topic, dict.fromkeys(range(PARTITIONS), 35))
            moved = dict.fromkeys(range(PARTITIONS), 23)
            await_committed(target, ahead, copy, moved)
            commit_offsets(source, ahead, topic, dict.fromkeys(range(PARTITIONS), 2))
            _await_cycles(env["METRICS_PORT"], 3)
            assert committed_offsets(target, ahead, copy) == {
                (copy, p): o for p, o in moved.items()
            }
            assert sync.terminate() == 0
    finally:
        if member is not None:
            member.close()


def test_a_group_whose_target_offsets_are_pending_is_not_moved_until_they_are_known(
    flow, source_cluster, target_cluster, tmp_path
):
    """A transactional application on the target holds an offset commit of the group open: the
    target answers UNSTABLE_OFFSET_COMMIT for its partitions, so where the group is there is not
    known. Offset sync must not commit over it; once the transaction aborts, the stable offsets
    (ahead of the translation) are there and are kept."""
    base, topics, _records = flow
    topic, copy = topics["planted"], f"{topics['planted']}.copy"
    prefix = f"g{uuid.uuid4().hex[:8]}"
    group = f"{prefix}.pending"
    source, target = source_cluster.bootstrap_servers, target_cluster.bootstrap_servers
    commit_offsets(target, group, copy, dict.fromkeys(range(PARTITIONS), 20))
    application = Producer({"bootstrap.servers": target, "transactional.id": f"{prefix}.app"})
    application.init_transactions(30)
    application.begin_transaction()
    outside = Consumer({"bootstrap.servers": target, "group.id": group})
    try:
        application.send_offsets_to_transaction(
            [TopicPartition(copy, p, 25) for p in range(PARTITIONS)],
            outside.consumer_group_metadata(),
            30,
        )
    finally:
        outside.close()
    commit_offsets(source, group, topic, dict.fromkeys(range(PARTITIONS), 5))
    env = _environment(source_cluster, target_cluster, base, "copy", prefix)
    with role_processes(tmp_path) as roles:
        sync = roles.start("offsetsync", env)
        # Until a cycle has decided on every partition: committed, or left as unknown.
        decided = (
            "exactly_offsetsync_offsets_committed_total",
            "exactly_offsetsync_target_unknown_total",
        )
        await_metric(env["METRICS_PORT"], decided, PARTITIONS)
        metrics = scrape(env["METRICS_PORT"])
        assert sample(metrics, "exactly_offsetsync_offsets_committed_total") == 0
        assert sample(metrics, "exactly_offsetsync_groups", state="target_unknown") == 1
        sync.wait_for_log("the target did not tell where the group is.*group=" + group)
        application.abort_transaction(30)
        _await_cycles(env["METRICS_PORT"], 3)
        # The stable offsets were further than the translation: kept, never moved back.
        assert committed_offsets(target, group, copy) == {(copy, p): 20 for p in range(PARTITIONS)}
        metrics = scrape(env["METRICS_PORT"])
        assert sample(metrics, "exactly_offsetsync_not_moved_back_total") == PARTITIONS
        assert sample(metrics, "exactly_offsetsync_groups", state="synced") == 1
        assert sync.terminate() == 0


def _await_cycles(port, count):
    """Wait until `count` more sync cycles have run."""

    def cycles():
        return sample(scrape(port), "exactly_offsetsync_cycle_seconds_count")

    start = cycles()
    deadline = time.monotonic() + 30
    while cycles() < start + count:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_exactly_offsetsync_needs_groups_and_topics_selected(source_cluster, target_cluster):
    env = role_environment(
        {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
            "METRICS_PORT": "0",
        }
    )
    no_groups = run_exactly("offsetsync", env={**env, "REPLICATION_TOPICS_INCLUDE": "orders"})
    assert no_groups.returncode == 2
    assert no_groups.stderr.strip() == (
        "exactly offsetsync: configuration error: OFFSETSYNC_GROUPS_INCLUDE: is required by "
        "offsetsync: the consumer groups whose offsets it syncs"
    )
    no_topics = run_exactly("offsetsync", env={**env, "OFFSETSYNC_GROUPS_INCLUDE": "app"})
    assert no_topics.returncode == 2
    assert "REPLICATION_TOPICS_INCLUDE: (or KAFKA_CLUSTERS_SOURCE_TOPIC)" in no_topics.stderr


def test_a_group_ahead_of_replication_waits_and_one_behind_source_retention_is_left(
    source_cluster, target_cluster, tmp_path
):
    base = f"ahead.{uuid.uuid4().hex[:8]}"
    create_topic(source_cluster.bootstrap_servers, base, 1)
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    for i in range(30):
        producer.produce(base, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    records = read_all(source_cluster.bootstrap_servers, base, 1)
    copy = f"{base}.copy"
    # Replication has copied the first 10 records so far.
    copy_to_destination(
        target_cluster.bootstrap_servers,
        copy,
        records[:10],
        source_cluster_id=source_cluster.cluster_id,
        faults=False,
        partitions=1,
    )
    prefix = f"g{uuid.uuid4().hex[:8]}"
    behind, ahead, lost = f"{prefix}.behind", f"{prefix}.ahead", f"{prefix}.lost"
    commit_offsets(source_cluster.bootstrap_servers, behind, base, {0: 5})
    commit_offsets(source_cluster.bootstrap_servers, ahead, base, {0: 20})
    # `lost` stopped at 1; retention then deleted the source's records below 3.
    commit_offsets(source_cluster.bootstrap_servers, lost, base, {0: 1})
    admin = AdminClient({"bootstrap.servers": source_cluster.bootstrap_servers})
    admin.delete_records([TopicPartition(base, 0, 3)])[TopicPartition(base, 0, 3)].result(30)
    env = _environment(
        source_cluster, target_cluster, base, "copy", prefix, OFFSETSYNC_WAITING_WARN_MS="1000"
    )
    with role_processes(tmp_path) as roles:
        sync = roles.start("offsetsync", env)
        await_committed(target_cluster.bootstrap_servers, behind, copy, {0: 5})
        # A group kept waiting is said, once: stage 2 may be stopped, and waiting is otherwise
        # silent.
        sync.wait_for_log(
            "the copy of the group's next record is not committed on the destination yet.*"
            f"group={ahead} .*committed=20 waiting_for=20"
        )
        _await_cycles(env["METRICS_PORT"], 2)
        metrics = scrape(env["METRICS_PORT"])
        assert sample(metrics, "exactly_offsetsync_groups", state="waiting") == 1
        assert sample(metrics, "exactly_offsetsync_groups", state="behind_retention") == 1
        sync.wait_for_log("committed offset below the source's log start.*group=" + lost)
        # Never guessed: no offset on the target for the group whose next record is not there,
        # nor for the one whose next records are gone from the source.
        assert committed_offsets(target_cluster.bootstrap_servers, ahead, copy) == {}
        assert committed_offsets(target_cluster.bootstrap_servers, lost, copy) == {}
        # Replication goes on: the rest arrives, with the header stage 2 writes.
        rest = Producer({"bootstrap.servers": target_cluster.bootstrap_servers})
        for record in records[10:]:
            origin = encode_provenance(source_cluster.cluster_id, 0, record.offset)
            rest.produce(
                copy,
                value=record.value,
                partition=0,
                headers=[(HEADER_PROVENANCE, origin)],
                timestamp=record.timestamp[1],
            )
        assert rest.flush(30) == 0
        await_committed(target_cluster.bootstrap_servers, ahead, copy, {0: 20})
        sync.wait_for_log(f"the group waits no more for replication.* group={ahead} ")
        assert sync.log_text().count("not committed on the destination yet") == 1
        assert sync.terminate() == 0


def test_offsetsync_rides_out_a_source_broker_restart(
    flow, source_cluster, target_cluster, tmp_path
):
    """After a restart of the source broker (the groups' coordinator), librdkafka's admin client
    can time out every group request for as long as it lives: offsetsync makes its clients anew
    after failed cycles in a row, and commits that came during the outage still reach the target."""
    if source_cluster.broker is None:
        pytest.skip(f"{source_cluster.kind} clusters give no broker control")
    base, topics, _records = flow
    topic, copy = topics["planted"], f"{topics['planted']}.copy"
    group = f"g{uuid.uuid4().hex[:8]}.restart"
    commit_offsets(
        source_cluster.bootstrap_servers, group, topic, dict.fromkeys(range(PARTITIONS), 3)
    )
    env = _environment(source_cluster, target_cluster, base, "copy", group)
    with role_processes(tmp_path) as roles:
        sync = roles.start("offsetsync", env)
        await_committed(
            target_cluster.bootstrap_servers, group, copy, dict.fromkeys(range(PARTITIONS), 3)
        )
        source_cluster.broker.restart()
        deadline = time.monotonic() + 60
        while True:  # the first commits after the restart may meet the broker still away
            try:
                commit_offsets(
                    source_cluster.bootstrap_servers,
                    group,
                    topic,
                    dict.fromkeys(range(PARTITIONS), 10),
                )
                break
            except KafkaException:
                assert time.monotonic() < deadline, "the source took no commit after its restart"
                time.sleep(0.5)
        await_committed(
            target_cluster.bootstrap_servers,
            group,
            copy,
            dict.fromkeys(range(PARTITIONS), 10),
            timeout_s=90,
        )
        assert sync.is_running(), sync.log_tail()
        assert sync.terminate() == 0

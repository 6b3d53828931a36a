"""Stage 1 as a user runs it: `python -m replicator` against the two clusters, checked by
decoding the staging topic record by record against the source (issue 4, docs/design.md §4,
invariants 1-3)."""

from __future__ import annotations

import random
import re
import socket
import time

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewPartitions

from replicator.topics import DESTINATION_MIN_MAX_MESSAGE_BYTES
from runtime.names import FlowNames
from tests.kafka_helpers import await_partitions, create_topic, delete_topic
from tests.replication.datamix import ContinuousProducer, create_data_mix
from tests.replication.scrape import await_metric, free_port, sample, scrape
from tests.replication.staging import (
    await_staging_complete,
    read_source,
    read_staging,
    topic_ids,
    verify_staging,
)


def _env(source_cluster, target_cluster, flow: str, include: str, **more: str) -> dict[str, str]:
    return {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": include,
        "REPLICATION_FLOW": flow,
        "METRICS_PORT": "0",
        **more,
    }


def _staging(flow: str) -> str:
    return FlowNames(flow).staging


def _verify(source_cluster, target_cluster, flow, topics, timeout_s=120):
    source = read_source(source_cluster.bootstrap_servers, topics)
    staged = await_staging_complete(
        target_cluster.bootstrap_servers, _staging(flow), source, timeout_s
    )
    report = verify_staging(
        source,
        staged,
        source_cluster_id=source_cluster.cluster_id,
        topic_ids=topic_ids(source_cluster.bootstrap_servers, topics),
    )
    assert report.ok, report
    return report


def _flow(unique_topic) -> str:
    return unique_topic("flow").replace(".", "-")[-90:]


def test_data_mix_reaches_staging_and_destination_topics_mirror_their_sources(
    source_cluster, target_cluster, unique_topic, roles
):
    mix = create_data_mix(source_cluster.bootstrap_servers, unique_topic("mix"))
    flow = _flow(unique_topic)
    replicator = roles.start(
        "replicator", _env(source_cluster, target_cluster, flow, mix.include_regex)
    )

    report = _verify(source_cluster, target_cluster, flow, mix.topics)
    assert report.source_records == mix.readable_records
    assert report.source_partitions == mix.total_partitions >= 24
    # Staging keeps envelopes by time alone: a broker-wide size bound would delete unread ones.
    target = AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, _staging(flow))
    staging = target.describe_configs([resource])[resource].result(10)
    assert staging["retention.bytes"].value == "-1"
    assert staging["retention.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    # Destination topics: same partition counts and the configs that decide what survives.
    admin = AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers})
    metadata = admin.list_topics(timeout=10)
    for topic, partitions in mix.partitions.items():
        assert len(metadata.topics[topic].partitions) == partitions
    configs = {
        resource.name: future.result(10)
        for resource, future in admin.describe_configs(
            [
                ConfigResource(ConfigResource.Type.TOPIC, t)
                for t in (mix.history_topic, mix.compacted_topic, mix.large_topic)
            ]
        ).items()
    }
    assert configs[mix.history_topic]["retention.ms"].value == "-1"
    assert configs[mix.compacted_topic]["cleanup.policy"].value == "compact"
    # Its source's 3 MiB raised to what staging carries (test_destination_limits.py says why).
    assert configs[mix.large_topic]["max.message.bytes"].value == str(
        DESTINATION_MIN_MAX_MESSAGE_BYTES
    )

    # SIGTERM drains and exits 0.
    assert replicator.terminate(30) == 0
    assert "drained" in replicator.log_text()


# In `make chaos` (40 s here), with the other long crash runs: `exactly chaos` and the six-kill
# run of both stages keep stage 1 under SIGKILLs in `make test`.
@pytest.mark.chaos
def test_sigkilled_twenty_times_while_a_producer_writes_loses_nothing_and_has_no_gap(
    source_cluster, target_cluster, unique_topic, roles
):
    topics = {unique_topic("chaos-a"): 6, unique_topic("chaos-b"): 4}
    for topic, partitions in topics.items():
        create_topic(source_cluster.bootstrap_servers, topic, partitions)
    flow = _flow(unique_topic)
    include = "|".join(re.escape(t) for t in topics)
    env = _env(
        source_cluster,
        target_cluster,
        flow,
        include,
        REPLICATION_ENVELOPE_MAX_RECORDS="50",
    )
    rng = random.Random(20261122)
    with ContinuousProducer(
        source_cluster.bootstrap_servers,
        topics,
        records_per_second=600,
        transactional_id=unique_topic("chaos-txn"),
    ) as producer:
        replicator = roles.start("replicator", env)
        kills = 0
        while kills < 20:
            # Some kills land while starting or joining, most while replicating.
            time.sleep(rng.uniform(0.3, 3.0))
            replicator.kill()
            kills += 1
            replicator.start()
        produced = producer.stop()
    assert produced > 1000

    report = _verify(source_cluster, target_cluster, flow, tuple(topics))
    assert report.sessions >= 10, report
    assert replicator.terminate(30) == 0


# About a minute: in `make test-slow`; the default suite keeps a target broker's crash
# (tests/replication/test_deduplicator.py).
@pytest.mark.slow
def test_target_broker_killed_then_paused_past_the_stall_timeout_no_gap(
    source_cluster, target_cluster, unique_topic, roles
):
    """Each pause ends a session with envelopes in flight; their purge is a gap to the gapless
    producer, which turns fatal a moment later. That must end nothing but the session: a poll
    of the dropped producer once stopped the process (about one pause in five)."""
    if target_cluster.broker is None:
        pytest.skip(f"{target_cluster.kind} clusters give no broker control")
    topic = unique_topic("broker-chaos")
    create_topic(source_cluster.bootstrap_servers, topic, 6)
    flow = _flow(unique_topic)
    env = _env(
        source_cluster,
        target_cluster,
        flow,
        re.escape(topic),
        REPLICATION_STALL_TIMEOUT_MS="1000",
        REPLICATION_ENVELOPE_MAX_RECORDS="50",
    )
    pauses = 5
    with ContinuousProducer(source_cluster.bootstrap_servers, {topic: 6}) as producer:
        replicator = roles.start("replicator", env)
        replicator.wait_for_log("partitions assigned", timeout_s=60)
        time.sleep(2)
        target_cluster.broker.kill()
        time.sleep(2)
        target_cluster.broker.restart()
        for _ in range(pauses):
            time.sleep(1)  # traffic between pauses: envelopes in flight when the next one comes
            restarts_before = replicator.log_text().count("session restarted")
            target_cluster.broker.pause()
            try:
                # Frozen longer than the stall timeout: the watchdog ends the session.
                deadline = time.monotonic() + 30
                while replicator.log_text().count("session restarted") == restarts_before:
                    assert replicator.is_running(), replicator.log_tail()
                    assert time.monotonic() < deadline, replicator.log_tail()
                    time.sleep(0.1)
            finally:
                target_cluster.broker.resume()
        time.sleep(3)
        producer.stop()

    _verify(source_cluster, target_cluster, flow, (topic,))
    log_text = replicator.log_text()
    assert log_text.count("reason=stall") >= pauses
    assert "stopped by a fatal error" not in log_text
    assert replicator.unexpected_exit() is None, replicator.log_tail()
    assert replicator.terminate(30) == 0


def test_two_instances_share_partitions_and_a_killed_ones_move_to_the_other(
    source_cluster, target_cluster, unique_topic, roles
):
    topic = unique_topic("shared")
    create_topic(source_cluster.bootstrap_servers, topic, 8)
    flow = _flow(unique_topic)
    env = _env(
        source_cluster,
        target_cluster,
        flow,
        re.escape(topic),
        # The group notices a SIGKILLed member after this long (the broker's minimum).
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_SESSION_TIMEOUT_MS="6000",
        REPLICATION_ENVELOPE_MAX_RECORDS="50",
    )
    with ContinuousProducer(source_cluster.bootstrap_servers, {topic: 8}) as producer:
        first = roles.start("replicator", {**env, "REPLICATION_INSTANCE_ID": "a"}, name="first")
        first.wait_for_log("partitions assigned", timeout_s=60)
        second = roles.start("replicator", {**env, "REPLICATION_INSTANCE_ID": "b"}, name="second")
        second.wait_for_log("partitions assigned", timeout_s=60)
        time.sleep(3)
        first.kill()
        second.wait_for_log(r"partitions assigned.*total=8", timeout_s=60)
        time.sleep(2)
        producer.stop()

    _verify(source_cluster, target_cluster, flow, (topic,))
    assert second.terminate(30) == 0


@pytest.mark.parametrize("role", ["replicator", "deduplicator"])
def test_a_second_live_instance_with_the_same_identity_stops_at_start_up_and_the_first_goes_on(
    source_cluster, target_cluster, unique_topic, roles, tmp_path, role
):
    """Two instances on one host without REPLICATION_INSTANCE_ID share the host name as their
    identity: the second must not fence the first (a fencing loop under any restart policy)."""
    topic = unique_topic("twins")
    create_topic(source_cluster.bootstrap_servers, topic, 2)
    env = {
        **_env(source_cluster, target_cluster, _flow(unique_topic), re.escape(topic)),
        "STATE_DIR": str(tmp_path / "first"),
    }
    if role == "deduplicator":
        roles.start("replicator", env)  # creates the staging topic the deduplicator waits for
    first = roles.start(role, env, name="first")
    first.wait_for_log("partitions assigned", timeout_s=60)
    twin = roles.start(role, {**env, "STATE_DIR": str(tmp_path / "twin")}, name="twin")
    assert twin.wait(60) == 2
    said = twin.log_text()
    assert f"exactly {role}: configuration error: REPLICATION_INSTANCE_ID=" in said
    assert f"with this instance id is running on this host (pid {first.pid})" in said
    assert "give each instance its own" in said
    assert first.is_running()
    assert first.terminate(30) == 0
    assert "fenced" not in first.log_text()
    # The claim ends with its holder: the same identity starts again at once.
    again = roles.start(role, env, name="again")
    again.wait_for_log("partitions assigned", timeout_s=60)
    assert again.terminate(30) == 0


def test_new_topic_and_partition_increase_are_followed(
    source_cluster, target_cluster, unique_topic, roles
):
    prefix = unique_topic("follow")
    first = f"{prefix}.one"
    create_topic(source_cluster.bootstrap_servers, first, 2)
    flow = _flow(unique_topic)
    replicator = roles.start(
        "replicator", _env(source_cluster, target_cluster, flow, rf"{re.escape(prefix)}\..*")
    )
    replicator.wait_for_log("partitions assigned", timeout_s=60)

    second = f"{prefix}.two"
    create_topic(source_cluster.bootstrap_servers, second, 3)
    admin = AdminClient({"bootstrap.servers": source_cluster.bootstrap_servers})
    admin.create_partitions([NewPartitions(first, 4)])[first].result(30)
    await_partitions(admin, first, 4)  # else a record for a new partition may fail unseen
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    for i in range(200):
        producer.produce(first, value=b"%d" % i, partition=i % 4)
        producer.produce(second, value=b"%d" % i, partition=i % 3)
    assert producer.flush(30) == 0

    _verify(source_cluster, target_cluster, flow, (first, second), timeout_s=60)
    target = AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers})
    metadata = target.list_topics(timeout=10)
    assert len(metadata.topics[first].partitions) == 4
    assert len(metadata.topics[second].partitions) == 3
    assert replicator.terminate(30) == 0


def test_records_lost_to_retention_and_a_recreated_topic_stop_their_partitions_and_say_so(
    source_cluster, target_cluster, unique_topic, roles
):
    lossy, recreated = unique_topic("lossy"), unique_topic("recreated")
    for topic in (lossy, recreated):
        create_topic(source_cluster.bootstrap_servers, topic, 1)
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    for i in range(100):
        producer.produce(lossy, value=b"%d" % i)
        producer.produce(recreated, value=b"%d" % i)
    assert producer.flush(30) == 0
    flow = _flow(unique_topic)
    env = _env(source_cluster, target_cluster, flow, f"{re.escape(lossy)}|{re.escape(recreated)}")
    replicator = roles.start("replicator", env)
    _verify(source_cluster, target_cluster, flow, (lossy, recreated))
    assert replicator.terminate(30) == 0

    # While stage 1 is down: 100 more records, 150 of which retention then deletes (as
    # delete_records does); and the other topic is deleted and created anew.
    for i in range(100, 200):
        producer.produce(lossy, value=b"%d" % i)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": source_cluster.bootstrap_servers})
    admin.delete_records([TopicPartition(lossy, 0, 150)])[TopicPartition(lossy, 0, 150)].result(30)
    delete_topic(source_cluster.bootstrap_servers, recreated)
    create_topic(source_cluster.bootstrap_servers, recreated, 1)
    producer.produce(recreated, value=b"new")
    assert producer.flush(30) == 0

    replicator = roles.start("replicator", {**env, "METRICS_PORT": str(free_port())})
    replicator.wait_for_log(r"source partition stopped.*reason=data_loss", timeout_s=60)
    replicator.wait_for_log(r"source partition stopped.*reason=topic_recreated", timeout_s=60)
    log = replicator.log_text(since_start=True)
    assert re.search(rf"reason=data_loss topic={re.escape(lossy)} partition=0 offset=100", log)
    assert "50 records were deleted before stage 1 read them" in log
    metrics = scrape(replicator.env["METRICS_PORT"])
    assert (
        sample(metrics, "exactly_replicator_records_lost_total", topic=lossy, partition="0") == 50
    )
    assert (
        sample(
            metrics,
            "exactly_replicator_partitions_stopped",
            topic=recreated,
            partition="0",
            reason="topic_recreated",
        )
        == 1
    )
    assert replicator.terminate(30) == 0

    # The operator chooses to go on with the new topic: it is replicated from its start.
    replicator = roles.start(
        "replicator", {**env, "REPLICATION_ON_TOPIC_RECREATED": "replicate"}, name="replicate"
    )
    replicator.wait_for_log("replicating the new one by policy", timeout_s=60)
    new_id = topic_ids(source_cluster.bootstrap_servers, [recreated])[recreated]
    deadline = time.monotonic() + 60
    while True:
        staged = read_staging(target_cluster.bootstrap_servers, _staging(flow))
        new_records = [
            record
            for item in staged
            if item.envelope.topic == recreated and item.envelope.topic_id == new_id
            for record in item.envelope.records
        ]
        if new_records or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert [(r.offset, r.value) for r in new_records] == [(0, b"new")]
    assert replicator.terminate(30) == 0


def test_a_record_too_large_for_staging_stops_its_partition_and_says_so(
    source_cluster, target_cluster, unique_topic, roles
):
    topic = unique_topic("big")
    create_topic(source_cluster.bootstrap_servers, topic, 2, {"max.message.bytes": "3145728"})
    flow = _flow(unique_topic)
    # An operator-made staging topic that takes 1 MiB at most.
    create_topic(
        target_cluster.bootstrap_servers, _staging(flow), 3, {"max.message.bytes": "1048576"}
    )
    producer = Producer(
        {"bootstrap.servers": source_cluster.bootstrap_servers, "message.max.bytes": 4_000_000}
    )
    for i in range(10):
        producer.produce(topic, value=b"small-%d" % i, partition=0)
        producer.produce(topic, value=b"small-%d" % i, partition=1)
    producer.produce(topic, value=b"x" * 1_500_000, partition=0)
    producer.produce(topic, value=b"after", partition=0)
    assert producer.flush(30) == 0

    replicator = roles.start(
        "replicator",
        _env(source_cluster, target_cluster, flow, re.escape(topic), METRICS_PORT=str(free_port())),
    )
    replicator.wait_for_log(r"source partition stopped.*reason=record_too_large", timeout_s=60)
    log = replicator.log_text()
    assert re.search(
        rf"reason=record_too_large topic={re.escape(topic)} partition=0 offset=10 ", log
    )
    staged = await_staging_complete(
        target_cluster.bootstrap_servers,
        _staging(flow),
        {
            k: v
            for k, v in read_source(source_cluster.bootstrap_servers, [topic]).items()
            if k[1] == 1
        },
        60,
    )
    offsets = {(s.envelope.partition, r.offset) for s in staged for r in s.envelope.records}
    # Everything before the big record, nothing at or after it: never a silent skip.
    assert {o for p, o in offsets if p == 0} == set(range(10))
    assert {o for p, o in offsets if p == 1} == set(range(10))
    metrics = scrape(replicator.env["METRICS_PORT"])
    assert (
        sample(
            metrics,
            "exactly_replicator_partitions_stopped",
            topic=topic,
            partition="0",
            reason="record_too_large",
        )
        == 1
    )
    # Copied means acknowledged in staging: not the record that stopped its partition, nor any
    # after it (the counter once counted every record of the envelope it stopped on).
    port = replicator.env["METRICS_PORT"]
    assert await_metric(port, "exactly_replicator_records_total", 20, topic=topic) == 20
    assert replicator.terminate(30) == 0


def test_a_staging_topic_whose_partitions_changed_stops_start_up_with_one_clear_line(
    source_cluster, target_cluster, unique_topic, roles
):
    topic = unique_topic("lanes")
    create_topic(source_cluster.bootstrap_servers, topic, 1)
    flow = _flow(unique_topic)
    env = _env(
        source_cluster, target_cluster, flow, re.escape(topic), REPLICATION_STAGING_PARTITIONS="2"
    )
    first = roles.start("replicator", env)
    first.wait_for_log("partitions assigned", timeout_s=60)
    assert first.terminate(30) == 0
    admin = AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers})
    admin.create_partitions([NewPartitions(_staging(flow), 3)])[_staging(flow)].result(30)

    second = roles.start("replicator", env, name="second")
    assert second.wait(60) == 1
    errors = [line for line in second.log_text().splitlines() if "level=error" in line]
    assert len(errors) == 1, second.log_text()
    assert "has 3 partitions but its lane mapping was recorded with 2" in errors[0]


def test_the_seed_variables_replicate_one_topic_under_a_new_name(
    source_cluster, target_cluster, unique_topic, roles
):
    topic, renamed = unique_topic("seed"), unique_topic("seed-copy")
    create_topic(source_cluster.bootstrap_servers, topic, 3)
    create_topic(source_cluster.bootstrap_servers, unique_topic("not-this-one"), 1)
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    for i in range(300):
        producer.produce(topic, value=b"%d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    flow = _flow(unique_topic)
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_SOURCE_TOPIC": topic,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_TOPIC": renamed,
        "REPLICATION_FLOW": flow,
        "METRICS_PORT": "0",
    }
    replicator = roles.start("replicator", env)
    report = _verify(source_cluster, target_cluster, flow, (topic,))
    assert report.source_records == 300
    metadata = AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers}).list_topics(
        timeout=10
    )
    assert len(metadata.topics[renamed].partitions) == 3
    assert topic not in metadata.topics
    assert replicator.terminate(30) == 0


def test_a_taken_metrics_port_stops_start_up_with_one_line(roles):
    with socket.socket() as squatter:
        squatter.bind(("0.0.0.0", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        replicator = roles.start(
            "replicator",
            {
                "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "127.0.0.1:9",
                "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "127.0.0.1:9",
                "REPLICATION_TOPICS_INCLUDE": "x",
                "METRICS_PORT": str(port),
            },
        )
        assert replicator.wait(30) == 1
    errors = [line for line in replicator.log_text().splitlines() if "level=error" in line]
    assert len(errors) == 1, replicator.log_text()
    assert f"port {port} is already in use" in errors[0]
    assert "Traceback" not in replicator.log_text()


def test_a_bad_setting_exits_2_with_one_line_naming_it(roles):
    replicator = roles.start(
        "replicator",
        {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "127.0.0.1:9",
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "127.0.0.1:9",
            "REPLICATION_STAGING_PARTITONS": "3",
        },
    )
    assert replicator.wait(30) == 2
    lines = replicator.log_text(since_start=True).strip().splitlines()
    assert lines[-1] == (
        "exactly replicator: configuration error: REPLICATION_STAGING_PARTITONS: unknown "
        "variable; did you mean REPLICATION_STAGING_PARTITIONS?"
    )


def test_a_quiet_source_written_in_transactions_shows_no_lag(
    source_cluster, target_cluster, unique_topic, roles
):
    """A transactional source partition ends with a commit marker after its last record: once
    everything is copied the lag is 0, not 1 for ever (ExactlyFlowStalled fired on every quiet
    flow of transactional records, an active-active pair's above all)."""
    topic = unique_topic("transactional")
    create_topic(source_cluster.bootstrap_servers, topic, 1)
    producer = Producer(
        {"bootstrap.servers": source_cluster.bootstrap_servers, "transactional.id": topic}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(20):
        producer.produce(topic, value=b"%d" % i)
    producer.commit_transaction(30)
    flow = _flow(unique_topic)
    env = _env(
        source_cluster, target_cluster, flow, re.escape(topic), METRICS_PORT=str(free_port())
    )
    replicator = roles.start("replicator", env)
    _verify(source_cluster, target_cluster, flow, (topic,))

    def lag() -> float | None:
        metrics = scrape(env["METRICS_PORT"])
        return sample(metrics, "exactly_replicator_lag_records", topic=topic, partition="0")

    deadline = time.monotonic() + 30  # the lag is taken every 5 s
    while (last := lag()) != 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert last == 0
    assert replicator.terminate(30) == 0

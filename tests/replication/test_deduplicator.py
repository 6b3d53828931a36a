"""Stage 1 and stage 2 as processes, end to end: a read_committed consumer of every destination
partition sees exactly the committed records of the same source partition, in order,
byte-identical, each once (issue 5)."""

from __future__ import annotations

import os
import random
import re
import shutil
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from deduplicator.limits import TRANSACTION_TIMEOUT_MS
from exactly.acls import ROLES
from runtime import ErrorClass, classify, kafka_error_of
from runtime.assignment_watch import UNASSIGNED_WARN_S
from runtime.names import FlowNames
from tests.backends import source_has_consumer_group_protocol
from tests.commands import run_exactly
from tests.kafka_helpers import create_topic, read_all
from tests.replication.datamix import ContinuousProducer, create_data_mix
from tests.replication.scrape import await_total, free_port, sample, scrape, total
from tests.replication.staging import assert_exactly_once, await_records, read_source
from tests.secured import assert_no_secret, secrets_of, secured_flow
from tests.validator.running import run_validate


def _await_destination(target, source_records, timeout_s: float = 120.0, supervise=lambda: None):
    topics = {topic for topic, _ in source_records}
    expected = sum(len(records) for records in source_records.values())
    return await_records(target.bootstrap_servers, topics, expected, timeout_s, supervise)


COMMIT_MAX_RECORDS = 200


def _flow_env(source_cluster, target_cluster, tmp_path, flow: str, include: str, **extra: str):
    return {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": include,
        "REPLICATION_FLOW": flow,
        "METRICS_PORT": "0",
        "STATE_DIR": str(tmp_path / "state"),
        **extra,
    }


def _flow_name(unique_topic) -> str:
    return unique_topic("flow").replace(".", "-")[-90:]


def _traffic_flow(source_cluster, target_cluster, tmp_path, unique_topic, topics, **extra: str):
    """Create the source `topics` ({name: partitions}) and the environment of a flow over them,
    with small envelopes so that kills land between many of them."""
    for topic, partitions in topics.items():
        create_topic(source_cluster.bootstrap_servers, topic, partitions)
    return _flow_env(
        source_cluster,
        target_cluster,
        tmp_path,
        _flow_name(unique_topic),
        "|".join(re.escape(t) for t in topics),
        REPLICATION_ENVELOPE_MAX_RECORDS="50",
        **extra,
    )


@pytest.mark.parametrize("security", ["plaintext", "secured"])
def test_data_mix_reaches_the_destination_exactly_once(
    source_cluster, target_cluster, unique_topic, roles, tmp_path, security
):
    """Also with the source on SASL_SSL (SCRAM) and the target on mutual TLS, each role and the
    audit as their own principal with only the ACLs exactly/acls.py lists for them."""
    mix = create_data_mix(source_cluster.bootstrap_servers, unique_topic("e2e"))
    env = _flow_env(
        source_cluster,
        target_cluster,
        tmp_path,
        _flow_name(unique_topic),
        mix.include_regex,
        REPLICATION_COMMIT_MAX_RECORDS=str(COMMIT_MAX_RECORDS),
        REPLICATION_COMMIT_INTERVAL_MS="20000",  # only the record limit ends a transaction
    )
    envs = dict.fromkeys(ROLES, env)
    if security == "secured":
        envs = secured_flow(source_cluster, target_cluster, env, mix.topics)
        # Stage 1's password inline, as a Kubernetes Secret in its environment would give it.
        inline = envs["replicator"]
        path = inline.pop("KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD_FILE")
        inline["KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD"] = Path(path).read_text().strip()
    replicator = roles.start("replicator", envs["replicator"])
    deduplicator = roles.start(
        "deduplicator", {**envs["deduplicator"], "METRICS_PORT": str(free_port())}
    )
    source = read_source(source_cluster.bootstrap_servers, mix.topics)
    destination = _await_destination(target_cluster, source)
    assert_exactly_once(source_cluster, source, destination)

    # What an operator's dashboard shows for this run: every record written once, by topic.
    # Counted as each commit returns, which this reader of the destination can outrun.
    written_total = sum(len(r) for r in source.values())
    await_total(
        deduplicator.env["METRICS_PORT"],
        "exactly_deduplicator_records_written_total",
        written_total,
    )
    metrics = scrape(deduplicator.env["METRICS_PORT"])
    for topic in mix.topics:
        expected = sum(len(r) for (t, _), r in source.items() if t == topic)
        written = sample(metrics, "exactly_deduplicator_records_written_total", topic=topic)
        assert written == (expected or None), topic
    assert total(metrics, "exactly_deduplicator_dead_letters_total") == 0
    assert total(metrics, "exactly_deduplicator_orphans_total") == 0
    committed = sample(metrics, "exactly_deduplicator_transactions_total", outcome="committed")
    # A transaction ends at the first envelope that reaches the limit: it holds at most the
    # limit plus one envelope (500 records by default).
    assert (committed or 0) >= written_total / (COMMIT_MAX_RECORDS + 500)
    assert sample(metrics, "exactly_deduplicator_commit_seconds_count") == committed
    calls = "exactly_deduplicator_transaction_call_seconds_count"
    assert sample(metrics, calls, call="init_transactions") == 1
    assert sample(metrics, calls, call="send_offsets_to_transaction") == committed
    assert sample(metrics, calls, call="commit_transaction") == committed
    assert sample(metrics, calls, call="flush") == committed
    assert sample(metrics, "exactly_deduplicator_record_age_seconds_count") > 0
    assert sample(metrics, "exactly_deduplicator_restore_seconds_count") == 12  # every partition
    assert sample(metrics, "exactly_deduplicator_assigned_partitions") == 12
    assert deduplicator.terminate(30) == 0
    assert replicator.terminate(30) == 0
    assert re.search(r'deduplicator counts" records_written=[1-9]', deduplicator.log_text())

    # The audit a user runs on the result (issue 6): clean, each record paired by provenance.
    audit = run_validate(envs["validator"], tmp_path / "audit", "--require-complete")
    assert audit.status == 0, audit.stdout + audit.stderr
    assert {topic["match"] for topic in audit.report["topics"]} == {"provenance"}
    # Proven by the merge (issue 20), through the secured listeners too: one read of each side.
    assert {topic["plan"] for topic in audit.report["topics"]} == {"merge"}
    assert audit.report["totals"]["matched"] == written_total
    assert len(audit.report["partitions"]) == mix.total_partitions
    if security == "secured":
        # Secrets never leak: not in a log line, a metric, `exactly config`, the audit's output.
        shown = {path.name: path.read_text() for path in tmp_path.rglob("*.log")}
        shown |= {path.name: path.read_text() for path in (tmp_path / "audit").iterdir()}
        shown |= {"metrics": metrics, "validate": audit.stdout + audit.stderr}
        for role in ROLES:
            config = run_exactly("config", env={**os.environ, **envs[role]})
            assert config.returncode == 0, config.stderr
            shown[f"exactly config ({role})"] = config.stdout + config.stderr
        assert_no_secret(shown, secrets_of(source_cluster.secured, target_cluster.secured))


def _crash_run(source_cluster, target_cluster, unique_topic, roles, tmp_path, *, kills: int):
    """Both stages under continuous transactional production, `kills` SIGKILLs of each at
    random moments, and once the deduplicator's RocksDB directory deleted between a kill and
    its restart; then every committed source record must be on the destination exactly once."""
    topics = {unique_topic("eos-a"): 6, unique_topic("eos-b"): 4}
    env = _traffic_flow(source_cluster, target_cluster, tmp_path, unique_topic, topics)
    state_dir = tmp_path / "state"
    rng = random.Random(kills)
    victims = ["deduplicator"] * kills + ["replicator"] * kills
    rng.shuffle(victims)
    deleted = False
    with ContinuousProducer(
        source_cluster.bootstrap_servers,
        topics,
        records_per_second=500,
        transactional_id=unique_topic("eos-txn"),
    ) as producer:
        running = {
            "replicator": roles.start("replicator", env),
            "deduplicator": roles.start("deduplicator", env),
        }
        for number, name in enumerate(victims):
            time.sleep(rng.uniform(0.5, 3.0))
            running[name].kill()
            if name == "deduplicator" and number >= len(victims) // 2 and not deleted:
                # A pod that comes back with an empty disk: restore from the changelog.
                shutil.rmtree(state_dir)
                deleted = True
            running[name].start()
        produced = producer.stop()
    assert deleted
    # The restart after the deletion rebuilt its state from the changelog alone.
    restored = r"state restored\" partition=\d+ from_offset=0 records=[1-9]"
    assert re.search(restored, running["deduplicator"].log_text())
    assert produced > 1000
    source = read_source(source_cluster.bootstrap_servers, tuple(topics))
    destination = _await_destination(target_cluster, source)
    assert_exactly_once(source_cluster, source, destination)
    # Every restart came back by itself: no fatal exit (a crash loop) on the way.
    for role in running.values():
        assert role.starts == kills + 1
        assert "stopped by a fatal error" not in role.log_text(), role.log_tail()
        assert role.terminate(30) == 0


def test_exactly_once_through_sigkills_of_both_stages_and_a_lost_state_directory(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    _crash_run(source_cluster, target_cluster, unique_topic, roles, tmp_path, kills=6)


@pytest.mark.chaos
def test_exactly_once_through_thirty_sigkills_of_each_stage(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    _crash_run(source_cluster, target_cluster, unique_topic, roles, tmp_path, kills=30)


def _destination_ends(
    bootstrap: str, topic: str, partitions: int, *, missing: int | None = None
) -> list[int]:
    """The end offsets; ``missing`` for each while the topic does not exist yet or has no
    leader yet (else raises)."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return [
            reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    except KafkaException as exc:
        error = kafka_error_of(exc)
        new_topic = error.code() == KafkaError._UNKNOWN_PARTITION
        if missing is None or not (new_topic or classify(error) is ErrorClass.RETRIABLE):
            raise
        return [missing] * partitions
    finally:
        reader.close()


def _first_committed_after(bootstrap: str, topic: str, offsets: list[int], timeout_s: float):
    """Seconds until a read_committed consumer sees a record beyond ``offsets`` (not a
    transaction marker: an aborted transaction's marker moves the end offsets, too)."""
    started = time.monotonic()
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "first-committed",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        reader.assign([TopicPartition(topic, p, o) for p, o in enumerate(offsets)])
        while time.monotonic() - started < timeout_s:
            message = reader.poll(0.2)
            if message is not None and message.error() is None:
                return time.monotonic() - started
        return None
    finally:
        reader.close()


def _assert_copied_and_stopped(source_cluster, target_cluster, topic, produced, stages):
    """Every committed source record of ``topic`` on the destination exactly once, and both
    stages still running (none exited on the fault) until a clean stop."""
    assert produced > 300
    source = read_source(source_cluster.bootstrap_servers, [topic])
    assert_exactly_once(source_cluster, source, _await_destination(target_cluster, source))
    for stage in stages:
        assert stage.is_running(), stage.log_tail()
        assert stage.terminate(30) == 0


def test_with_the_defaults_both_stages_sigkilled_at_once_flow_again_within_seconds(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    """No REPLICATION_INSTANCE_ID and the group's default 45 s session timeout: each restarted
    stage rejoins as the member it was (static membership by the host name) and takes its
    partitions back at once, instead of waiting for the dead member's session to end."""
    topic = unique_topic("restart")
    env = _traffic_flow(source_cluster, target_cluster, tmp_path, unique_topic, {topic: 4})
    assert not any("INSTANCE_ID" in name or "SESSION_TIMEOUT" in name for name in env)
    with ContinuousProducer(
        source_cluster.bootstrap_servers,
        {topic: 4},
        records_per_second=300,
        transactional_id=unique_topic("restart-txn"),
    ) as producer:
        stages = [roles.start("replicator", env), roles.start("deduplicator", env)]
        stages[1].wait_for_log(r'staging partitions assigned" partitions=\d', timeout_s=60)
        # Stage 1 creates the destination topic: until then its partitions are unknown.
        while sum(_destination_ends(target_cluster.bootstrap_servers, topic, 4, missing=0)) == 0:
            time.sleep(0.2)
        for stage in stages:
            stage.kill()
        before = _destination_ends(target_cluster.bootstrap_servers, topic, 4)
        for stage in stages:
            stage.start()
        # Well inside the 45 s a dead dynamic member holds its partitions for.
        flowing = _first_committed_after(target_cluster.bootstrap_servers, topic, before, 40)
        assert flowing is not None, stages[1].log_tail()
        assert flowing < 15, stages[1].log_tail()
        time.sleep(1)
        produced = producer.stop()
    _assert_copied_and_stopped(source_cluster, target_cluster, topic, produced, stages)


def test_exactly_once_through_a_target_broker_crash(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    """The target broker (staging, changelog, destination, transaction coordinator) SIGKILLed
    and restarted under traffic: stage 2 aborts or retries what was open, rides it out without
    a fatal exit, and every committed source record arrives exactly once."""
    if target_cluster.broker is None:
        pytest.skip(f"{target_cluster.kind} clusters give no broker control")
    topic = unique_topic("target-crash")
    env = _traffic_flow(source_cluster, target_cluster, tmp_path, unique_topic, {topic: 6})
    with ContinuousProducer(
        source_cluster.bootstrap_servers,
        {topic: 6},
        records_per_second=500,
        transactional_id=unique_topic("target-crash-txn"),
    ) as producer:
        replicator = roles.start("replicator", env)
        deduplicator = roles.start("deduplicator", env)
        deduplicator.wait_for_log(r'staging partitions assigned" partitions=\d', timeout_s=60)
        time.sleep(2)
        target_cluster.broker.kill()
        time.sleep(2)
        target_cluster.broker.restart()
        time.sleep(5)
        produced = producer.stop()
    assert produced > 1000

    exits = []

    def orchestrator() -> None:
        # librdkafka #5456/#5511: send_offsets_to_transaction may hang after the coordinator's
        # broker died; the deduplicator then exits 1 at its hard deadline, and is restarted.
        if not deduplicator.is_running():
            exits.append(deduplicator.returncode)
            deduplicator.start()

    source = read_source(source_cluster.bootstrap_servers, [topic])
    destination = _await_destination(target_cluster, source, 240, orchestrator)
    assert_exactly_once(source_cluster, source, destination)
    assert exits in ([], [1]), deduplicator.log_tail()
    if exits:
        assert "blocked past its hard deadline" in deduplicator.log_text()
    else:
        assert "stopped by a fatal error" not in deduplicator.log_text(), deduplicator.log_tail()
    assert deduplicator.terminate(30) == 0
    assert replicator.terminate(30) == 0


# tests/replication/producer_fault/sitecustomize.py fails stage 2's first transactional producer.
PRODUCER_FAULT = Path(__file__).parent / "producer_fault"


def test_a_producer_librdkafka_gives_up_is_replaced_and_nothing_is_lost_or_doubled(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    """librdkafka gives stage 2's transactional producer up for good over its own state (seen in
    a SIGTERM roll of a three-node target: "sequence desynchronization with broker"): stage 2
    replaces it in the process instead of exiting, the failed producer's open transaction never
    becomes visible, and every source record arrives once."""
    topic = unique_topic("producer-fails")
    env = _traffic_flow(source_cluster, target_cluster, tmp_path, unique_topic, {topic: 3})
    fault = {
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(PRODUCER_FAULT), os.environ.get("PYTHONPATH")])
        ),
        "TEST_PRODUCER_FAILS_AFTER": "1500",
    }
    with ContinuousProducer(
        source_cluster.bootstrap_servers, {topic: 3}, records_per_second=500
    ) as producer:
        replicator = roles.start("replicator", env)
        deduplicator = roles.start("deduplicator", {**env, **fault})
        deduplicator.wait_for_log("transactional producer failed; replacing it", timeout_s=90)
        deduplicator.wait_for_log(r"OUT_OF_ORDER_SEQUENCE_NUMBER|sequence desynchronization")
        # Records produced after the failure too, for the replacement to copy. (Not a count
        # against TEST_PRODUCER_FAILS_AFTER: that counts changelog records as well.)
        at_failure = producer.acknowledged
        deadline = time.monotonic() + 30
        while producer.acknowledged < at_failure + 500:
            assert time.monotonic() < deadline, (at_failure, producer.acknowledged)
            time.sleep(0.1)
        producer.stop()

    source = read_source(source_cluster.bootstrap_servers, [topic])
    destination = _await_destination(target_cluster, source, 120)
    assert_exactly_once(source_cluster, source, destination)
    assert deduplicator.is_running(), deduplicator.log_tail()
    assert "stopped by a fatal error" not in deduplicator.log_text(), deduplicator.log_tail()
    assert deduplicator.terminate(30) == 0
    assert replicator.terminate(30) == 0


# In `make chaos` (74 s here): `exactly chaos` in `make test` runs two deduplicators under
# SIGKILLs too.
@pytest.mark.chaos
def test_exactly_once_with_two_deduplicators_and_a_third_killed(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    """Scale-out: two instances share staging; a third joins, takes partitions, and is
    SIGKILLed while it holds them; the group gives them back and nothing is lost or doubled."""
    topics = {unique_topic("scale-a"): 6, unique_topic("scale-b"): 6}
    env = _traffic_flow(
        source_cluster,
        target_cluster,
        tmp_path,
        unique_topic,
        topics,
        # A killed static member keeps its partitions until its session ends (45 s by default).
        KAFKA_CLUSTERS_DESTINATION_PROPERTIES_SESSION_TIMEOUT_MS="6000",
    )

    def instance(name: str):
        return roles.start(
            "deduplicator",
            {
                **env,
                "REPLICATION_INSTANCE_ID": name,
                "STATE_DIR": str(tmp_path / name),
                "METRICS_PORT": str(free_port()),
            },
            name=f"deduplicator-{name}",
        )

    with ContinuousProducer(
        source_cluster.bootstrap_servers,
        topics,
        records_per_second=500,
        transactional_id=unique_topic("scale-txn"),
    ) as producer:
        replicator = roles.start("replicator", env)
        first, second = instance("a"), instance("b")
        for member in (first, second):
            member.wait_for_log(r'staging partitions assigned" partitions=\d', timeout_s=60)
        third = instance("c")
        third.wait_for_log(r'staging partitions assigned" partitions=\d', timeout_s=60)
        time.sleep(2)  # the third instance commits transactions of its own before it dies
        third.kill()
        time.sleep(8)  # past its session: its partitions move back to the other two
        produced = producer.stop()
    assert produced > 1000
    source = read_source(source_cluster.bootstrap_servers, tuple(topics))
    destination = _await_destination(target_cluster, source)
    assert_exactly_once(source_cluster, source, destination)
    for member in (first, second):
        # Each survivor did its share, and none of them ever had to give up.
        written = total(
            scrape(member.env["METRICS_PORT"]), "exactly_deduplicator_records_written_total"
        )
        assert written > 0, member.name
        assert "stopped by a fatal error" not in member.log_text(), member.log_tail()
        assert member.terminate(30) == 0
    assert replicator.terminate(30) == 0


def test_a_garbage_staging_record_is_dead_lettered_and_the_rest_flows_on(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    topic = unique_topic("dlq")
    create_topic(source_cluster.bootstrap_servers, topic, 2)
    flow = unique_topic("flow").replace(".", "-")[-90:]
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": re.escape(topic),
        "REPLICATION_FLOW": flow,
        "METRICS_PORT": "0",
        "STATE_DIR": str(tmp_path / "state"),
    }
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    for i in range(100):
        producer.produce(topic, value=b"before-%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    replicator = roles.start("replicator", env)
    deduplicator = roles.start("deduplicator", env)
    deduplicator.wait_for_log("staging partitions assigned", timeout_s=60)
    garbage = Producer({"bootstrap.servers": target_cluster.bootstrap_servers})
    garbage.produce(FlowNames(flow).staging, value=b"\x00not an envelope", partition=0)
    assert garbage.flush(30) == 0
    for i in range(100):
        producer.produce(topic, value=b"after-%d" % i, partition=i % 2)
    assert producer.flush(30) == 0

    source = read_source(source_cluster.bootstrap_servers, [topic])
    destination = _await_destination(target_cluster, source)
    assert_exactly_once(source_cluster, source, destination)
    dead = read_source(target_cluster.bootstrap_servers, [FlowNames(flow).deadletter])
    records = [r for rs in dead.values() for r in rs]
    assert [r.value for r in records] == [b"\x00not an envelope"]
    reason = dict(records[0].headers)["exactly.reason"].decode()
    assert reason.startswith("not an envelope:")
    assert "dead-lettered" in deduplicator.log_text()
    assert deduplicator.terminate(30) == 0
    assert replicator.terminate(30) == 0


def test_a_changelog_partitioned_unlike_staging_stops_stage_2_at_start_up(
    target_cluster, source_cluster, unique_topic, roles, tmp_path
):
    """Stage 2 keeps its state in one changelog partition, or (a flow made before it did) in
    as many as staging has: a changelog made by hand with another count would leave staging
    partitions without state, so stage 2 refuses to start (exit 1) and names both topics and
    counts, every time."""
    flow = _flow_name(unique_topic)
    names = FlowNames(flow)
    create_topic(target_cluster.bootstrap_servers, names.staging, 3)
    create_topic(
        target_cluster.bootstrap_servers, names.changelog, 2, {"cleanup.policy": "compact"}
    )
    env = _flow_env(source_cluster, target_cluster, tmp_path, flow, re.escape(unique_topic("x")))
    line = f"changelog topic {names.changelog} has 2 partitions and staging topic {names.staging} 3"
    for _ in range(2):
        deduplicator = roles.start("deduplicator", env)
        assert deduplicator.wait(60) == 1
        assert line in deduplicator.log_text()


@pytest.mark.parametrize("layout", ["shared", "co-partitioned"])
def test_both_changelog_layouts_copy_exactly_once_through_a_restart_with_an_empty_disk(
    source_cluster, target_cluster, unique_topic, roles, tmp_path, layout
):
    """A new flow's changelog has one partition, each record naming its staging partition in a
    header; a flow made before keeps the changelog it has, one partition per staging partition,
    and stage 2 goes on with it. Either way a stage 2 SIGKILLed and restarted with its state
    directory gone restores every partition and copies each record once."""
    topics = {unique_topic("layout"): 6}
    env = _traffic_flow(source_cluster, target_cluster, tmp_path, unique_topic, topics)
    names = FlowNames(env["REPLICATION_FLOW"])
    staging_partitions = 12  # stage 1's default
    if layout == "co-partitioned":
        create_topic(
            target_cluster.bootstrap_servers,
            names.changelog,
            staging_partitions,
            {"cleanup.policy": "compact"},
        )
    with ContinuousProducer(
        source_cluster.bootstrap_servers, topics, records_per_second=500
    ) as producer:
        replicator = roles.start("replicator", env)
        deduplicator = roles.start("deduplicator", env)
        await_records(target_cluster.bootstrap_servers, set(topics), 200, 120)
        deduplicator.kill()
        shutil.rmtree(tmp_path / "state")
        deduplicator.start()
        time.sleep(2)
        producer.stop()
    source = read_source(source_cluster.bootstrap_servers, tuple(topics))
    assert_exactly_once(source_cluster, source, _await_destination(target_cluster, source))
    assert re.search(
        r"state restored\" partition=\d+ from_offset=0 records=[1-9]", deduplicator.log_text()
    )
    assert deduplicator.terminate(30) == 0
    assert replicator.terminate(30) == 0

    # Where the state is: one partition (shared) or staging's count (co-partitioned), each
    # record naming its staging partition.
    admin = AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers})
    found = admin.list_topics(names.changelog, timeout=30).topics[names.changelog].partitions
    assert len(found) == (1 if layout == "shared" else staging_partitions)
    lanes_by_partition: dict[int, set[int]] = {}
    for record in read_all(target_cluster.bootstrap_servers, names.changelog, len(found)):
        lane = int(dict(record.headers)["exactly.lane"])
        lanes_by_partition.setdefault(record.partition, set()).add(lane)
    if layout == "shared":
        assert set(lanes_by_partition) == {0}
        assert len(lanes_by_partition[0]) > 1
    else:
        assert len(lanes_by_partition) > 1
        assert all(lanes == {p} for p, lanes in lanes_by_partition.items())


@pytest.mark.skipif(
    not source_has_consumer_group_protocol(),
    reason="the consumer group protocol is generally available from Kafka 4.0",
)
def test_both_stages_on_the_consumer_group_protocol_copy_exactly_once_through_restarts(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    """`group.protocol=consumer` (KIP-848, the Java consumer's default since Kafka 4) given for
    both clusters: neither stage adds what that protocol refuses (a client-side assignor: stage 1
    exited 1 at start-up), and each resumes where its group committed."""
    topics = {unique_topic("kip848"): 3}
    env = _traffic_flow(
        source_cluster,
        target_cluster,
        tmp_path,
        unique_topic,
        topics,
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_GROUP_PROTOCOL="consumer",
        KAFKA_CLUSTERS_DESTINATION_PROPERTIES_GROUP_PROTOCOL="consumer",
    )
    target = target_cluster.bootstrap_servers
    with ContinuousProducer(
        source_cluster.bootstrap_servers, topics, records_per_second=500
    ) as producer:
        replicator = roles.start("replicator", env)
        deduplicator = roles.start("deduplicator", env)
        before = sum(len(r) for r in await_records(target, set(topics), 200, 120).values())
        assert deduplicator.terminate(30) == 0
        assert replicator.terminate(30) == 0
        replicator.start()
        deduplicator.start()
        await_records(target, set(topics), before + 200, 120)
        producer.stop()
    source = read_source(source_cluster.bootstrap_servers, tuple(topics))
    assert_exactly_once(source_cluster, source, _await_destination(target_cluster, source))
    assert deduplicator.terminate(30) == 0
    assert replicator.terminate(30) == 0


@pytest.mark.skipif(
    source_has_consumer_group_protocol(), reason="the source has the consumer group protocol"
)
def test_stage_1_on_the_consumer_group_protocol_of_a_source_without_it_says_so(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    """Against brokers without KIP-848's protocol (before Kafka 4.0) librdkafka retries the
    group in silence and stage 1 copies nothing: it must say which group and why, not stall
    without a word (it did: found by `make test-old-source`)."""
    topics = {unique_topic("kip848old"): 1}
    env = _traffic_flow(
        source_cluster,
        target_cluster,
        tmp_path,
        unique_topic,
        topics,
        KAFKA_CLUSTERS_SOURCE_PROPERTIES_GROUP_PROTOCOL="consumer",
    )
    replicator = roles.start("replicator", env)
    deadline = time.monotonic() + UNASSIGNED_WARN_S + 60
    while not (said := re.findall(r".*subscribed but given no partition.*", replicator.log_text())):
        assert replicator.is_running(), replicator.log_tail()
        assert time.monotonic() < deadline, replicator.log_tail()
        time.sleep(0.5)
    assert "level=warning" in said[0], said
    assert "group.protocol=consumer" in said[0], said
    assert replicator.terminate(30) == 0


# The group notices the SIGKILLed static member after this long (the broker's minimum).
_SESSION_TIMEOUT_MS = 6000
# How long the idle instance may take to restore the partition after the holder's SIGKILL: the
# group notices the static member gone after its session; a holder killed between its
# send_offsets and its commit leaves staging offsets that are not stable until the broker aborts
# that transaction, up to the transaction timeout after it began plus the broker's check for timed
# out transactions (Kafka's default: every 10 s); then the next ask of the offsets (5 s), the
# restore, and room for a loaded machine (docs/design.md §4, invariant 5: killed before the
# commit). 60 s was once too short in CI, the holder killed mid-commit.
_TAKEOVER_S = (_SESSION_TIMEOUT_MS + TRANSACTION_TIMEOUT_MS) / 1000 + 10 + 30


@pytest.mark.slow
def test_a_stage_2_instance_given_no_partition_says_so_and_takes_over_when_the_other_dies(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    """Two stage 2 instances and one staging partition: the one given nothing warns once, after
    UNASSIGNED_WARN_S, naming the group and that other members may hold every partition
    (runtime/assignment_watch.py); the holder SIGKILLed, it takes the partition, says it came
    after a long wait, and the copy is exactly once. In make test-slow: over a minute of
    waiting is the point."""
    topic = unique_topic("idle")
    env = _traffic_flow(
        source_cluster,
        target_cluster,
        tmp_path,
        unique_topic,
        {topic: 2},
        REPLICATION_STAGING_PARTITIONS="1",
        KAFKA_CLUSTERS_DESTINATION_PROPERTIES_SESSION_TIMEOUT_MS=str(_SESSION_TIMEOUT_MS),
    )
    group = FlowNames(env["REPLICATION_FLOW"]).deduplicator_group
    assigned = r'staging partitions assigned" partitions=\d'
    with ContinuousProducer(source_cluster.bootstrap_servers, {topic: 2}) as producer:
        roles.start("replicator", env)
        # Named so that the holder's instance id sorts first: stage 2's eager range assignor
        # orders static members by it, and would hand the partition to a newcomer sorting first.
        holder = roles.start(
            "deduplicator",
            {**env, "REPLICATION_INSTANCE_ID": "holder", "STATE_DIR": str(tmp_path / "h")},
            name="holder",
        )
        holder.wait_for_log(assigned, timeout_s=60)
        idle = roles.start(
            "deduplicator",
            {**env, "REPLICATION_INSTANCE_ID": "idle", "STATE_DIR": str(tmp_path / "i")},
            name="idle",
        )
        said = idle.wait_for_log(".*subscribed but given no partition.*", UNASSIGNED_WARN_S + 60)
        line = said.group(0)
        assert "level=warning" in line, line
        assert f"group={group}" in line, line
        assert "other members of the group may hold every partition" in line, line
        assert "subscribed but given no partition" not in holder.log_text()
        holder.kill()
        idle.wait_for_log(assigned, timeout_s=_TAKEOVER_S)
        idle.wait_for_log("partitions assigned after a long wait", timeout_s=5)
        time.sleep(2)
        producer.stop()
    source = read_source(source_cluster.bootstrap_servers, (topic,))
    assert_exactly_once(source_cluster, source, _await_destination(target_cluster, source))
    assert idle.terminate(30) == 0


def test_with_on_bad_envelope_stop_a_garbage_record_stops_stage_2_every_time(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    """REPLICATION_ON_BAD_ENVELOPE=stop: the bad record stops stage 2 (exit 1, a line naming it)
    and is never committed past, so the restarted instance stops on the same record again
    rather than skip it (invariant 7: nothing silently skipped)."""
    topic = unique_topic("stop")
    create_topic(source_cluster.bootstrap_servers, topic, 1)
    flow = unique_topic("flow").replace(".", "-")[-90:]
    names = FlowNames(flow)
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": re.escape(topic),
        "REPLICATION_FLOW": flow,
        "REPLICATION_STAGING_PARTITIONS": "1",
        "REPLICATION_ON_BAD_ENVELOPE": "stop",
        "METRICS_PORT": "0",
        "STATE_DIR": str(tmp_path / "state"),
    }
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    for i in range(50):
        producer.produce(topic, value=b"before-%d" % i)
    assert producer.flush(30) == 0
    replicator = roles.start("replicator", env)
    deduplicator = roles.start("deduplicator", env)
    source = read_source(source_cluster.bootstrap_servers, [topic])
    assert_exactly_once(source_cluster, source, _await_destination(target_cluster, source))

    garbage = Producer({"bootstrap.servers": target_cluster.bootstrap_servers})
    delivered = []
    garbage.produce(
        names.staging,
        value=b"\x00not an envelope",
        partition=0,
        on_delivery=lambda error, message: delivered.append(message.offset()),
    )
    assert garbage.flush(30) == 0
    bad_offset = delivered[0]
    for i in range(50):
        producer.produce(topic, value=b"after-%d" % i)
    assert producer.flush(30) == 0

    line = f"staging record at partition 0 offset {bad_offset}: not an envelope"
    assert deduplicator.wait(60) == 1
    assert line in deduplicator.log_text()
    again = roles.start("deduplicator", env)
    assert again.wait(60) == 1
    assert line in again.log_text()

    group = Consumer(
        {
            "bootstrap.servers": target_cluster.bootstrap_servers,
            "group.id": names.deduplicator_group,
        }
    )
    try:
        [committed] = group.committed([TopicPartition(names.staging, 0)], timeout=30)
    finally:
        group.close()
    assert committed.offset <= bad_offset
    assert replicator.terminate(30) == 0


FLOOR_RECORDS = 30
FLOOR_SPACING_S = 0.1  # 3 s of records, each alone in staging when stage 2 looks


def test_at_a_low_rate_the_commit_floor_bounds_the_transactions(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    """REPLICATION_COMMIT_MIN_INTERVAL_MS: at a low rate stage 2 commits once per floor rather
    than once per record that arrives alone (issue 34's low-rate axis). What a user sees of it:
    fewer transaction markers on the destination, and every record there all the same."""
    topic = unique_topic("floor")
    create_topic(source_cluster.bootstrap_servers, topic, 1)
    env = _flow_env(
        source_cluster,
        target_cluster,
        tmp_path,
        _flow_name(unique_topic),
        re.escape(topic),
        REPLICATION_COMMIT_INTERVAL_MS="1000",
        REPLICATION_COMMIT_MIN_INTERVAL_MS="1000",
    )
    roles.start("replicator", env)
    stage2 = roles.start("deduplicator", env)
    stage2.wait_for_log(r'staging partitions assigned" partitions=\d', timeout_s=60)
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    for n in range(FLOOR_RECORDS):
        producer.produce(topic, value=b"v%d" % n, key=b"k%d" % n, partition=0)
        producer.flush(10)
        time.sleep(FLOOR_SPACING_S)
    copied = await_records(target_cluster.bootstrap_servers, [topic], FLOOR_RECORDS, 60)
    assert [r.value for r in copied[(topic, 0)]] == [b"v%d" % n for n in range(FLOOR_RECORDS)]
    (end,) = _destination_ends(target_cluster.bootstrap_servers, topic, 1)
    # One marker per transaction that wrote the partition. Committing whenever staging ran dry
    # makes about one per record here (30); a 1 s floor over 3 s of records, about 3 or 4.
    markers = end - FLOOR_RECORDS
    assert 1 <= markers <= 6, f"{markers} transactions for {FLOOR_RECORDS} records over 3 s"

"""Topics renamed by a regular expression (issue 19) as users set it up: both stages and offset
sync as processes write and translate onto the renamed destination, and two source topics
renamed onto one name: the one replicated first keeps its name and the other is left out (a clash
the flow meets first at start-up, a fresh flow or a new rename, stops it with one line before
anything is copied)."""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from envelope import HEADER_PROVENANCE, decode_provenance
from exactly.acls import flow_grants
from runtime import ErrorClass, classify, kafka_error_of
from runtime.errors import DestinationCollisionError
from runtime.names import FlowNames
from runtime.settings import load_settings, role_environment
from tests.commands import run_exactly
from tests.kafka_helpers import create_topic
from tests.offsetsync.groups import await_committed, commit_offsets
from tests.replication.scrape import await_metric, free_port
from tests.replication.staging import read_source, read_staging
from tests.replication.test_deduplicator import (
    _await_destination,
    _flow_env,
    _flow_name,
    assert_exactly_once,
)
from validator.errors import InputError
from validator.snapshot import _pick_topics

RENAME = {
    "REPLICATION_TOPICS_RENAME_PATTERN": r"(.*)\.orders",
    "REPLICATION_TOPICS_RENAME_REPLACEMENT": r"\1.sales",
    "REPLICATION_DESTINATION_TOPIC": "dc1.{topic}",
}
PARTITIONS = 3
RECORDS = 120
PER_TRANSACTION = 20


def _produce(bootstrap: str, topic: str, transactional_id: str) -> None:
    """RECORDS records over PARTITIONS partitions, in transactions of PER_TRANSACTION: the
    commit markers make source and destination offsets differ, so that a translation that
    copied the source offset would be caught."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(30)
    for first in range(0, RECORDS, PER_TRANSACTION):
        producer.begin_transaction()
        for i in range(first, first + PER_TRANSACTION):
            producer.produce(
                topic,
                key=b"key-%d" % i,
                value=b"value-%d" % i,
                partition=i % PARTITIONS,
                headers=[("n", b"%d" % i), ("n", None)],
            )
        producer.commit_transaction(30)


def _rename_flow(source_cluster, target_cluster, tmp_path, unique_topic, base: str) -> dict:
    return _flow_env(
        source_cluster,
        target_cluster,
        tmp_path,
        _flow_name(unique_topic),
        re.escape(base) + r"\..*",
        **RENAME,
    )


def test_a_renamed_topic_is_copied_exactly_once_and_its_groups_follow_it(
    source_cluster, target_cluster, unique_topic, unique_group, roles, tmp_path
):
    base = unique_topic("rename")
    orders, payments = f"{base}.orders", f"{base}.payments"
    # The pattern renames orders; payments does not match and keeps its name; the template
    # applies to both.
    renamed = {orders: f"dc1.{base}.sales", payments: f"dc1.{base}.payments"}
    for topic in renamed:
        create_topic(source_cluster.bootstrap_servers, topic, PARTITIONS)
        _produce(source_cluster.bootstrap_servers, topic, unique_topic("txn"))
    env = _rename_flow(source_cluster, target_cluster, tmp_path, unique_topic, base)
    roles.start("replicator", env)
    roles.start("deduplicator", {**env, "REPLICATION_COMMIT_MAX_RECORDS": "25"})

    source = read_source(source_cluster.bootstrap_servers, list(renamed))
    assert sum(len(records) for records in source.values()) == 2 * RECORDS
    on_destination = {(renamed[t], p): records for (t, p), records in source.items()}
    written = _await_destination(target_cluster, on_destination)
    back = {destination: topic for topic, destination in renamed.items()}
    destination = {(back[t], p): records for (t, p), records in written.items()}
    assert_exactly_once(source_cluster, source, destination)
    # No other name was made: not the source's, not the rename without the template.
    topics = AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers}).list_topics(
        timeout=30
    )
    assert {orders, payments, f"{base}.sales"}.isdisjoint(topics.topics)

    # A group that processed part of orders on the source resumes on dc1.<base>.sales: its
    # offset there is the destination offset of the first record it has not processed.
    group = unique_group("rename")
    processed = {p: source[(orders, p)][15].offset for p in range(PARTITIONS)}
    commit_offsets(source_cluster.bootstrap_servers, group, orders, processed)
    translated = {
        p: next(
            record.offset
            for record in destination[(orders, p)]
            if decode_provenance(dict(record.headers)[HEADER_PROVENANCE]).offset >= processed[p]
        )
        for p in range(PARTITIONS)
    }
    assert translated != processed  # the markers moved them: an untranslated copy would fail
    roles.start(
        "offsetsync",
        {**env, "OFFSETSYNC_GROUPS_INCLUDE": re.escape(group), "OFFSETSYNC_INTERVAL_MS": "300"},
    )
    await_committed(target_cluster.bootstrap_servers, group, renamed[orders], translated)


def _staged(target_cluster, env) -> dict[str, set[bytes]]:
    """The values in the flow's envelopes in staging now, by source topic."""
    staging = FlowNames(env["REPLICATION_FLOW"]).staging
    try:
        envelopes = read_staging(target_cluster.bootstrap_servers, staging)
    except LookupError:  # stage 1 has not created it yet
        return {}
    except KafkaException as exc:  # its partitions without a leader yet
        if classify(kafka_error_of(exc)) is not ErrorClass.RETRIABLE:
            raise
        return {}
    values: dict[str, set[bytes]] = {}
    for staged in envelopes:
        values.setdefault(staged.envelope.topic, set()).update(
            record.value for record in staged.envelope.records
        )
    return values


def _await_staged(target_cluster, env, topic: str, value: bytes, replicator) -> None:
    deadline = time.monotonic() + 60
    while value not in _staged(target_cluster, env).get(topic, set()):
        assert replicator.is_running(), replicator.log_tail()
        assert time.monotonic() < deadline, replicator.log_tail()
        time.sleep(0.5)


def _not_log_events(output: str) -> list[str]:
    """The lines of a role's output that are not its log events (nor the test's start marker):
    the one line of a configuration error, and a traceback if there were one."""
    return [line for line in output.splitlines() if not line.startswith(("ts=", "=== start"))]


def test_a_topic_renamed_onto_a_replicated_ones_name_is_left_out_and_stage_1_copies_on(
    source_cluster, target_cluster, unique_topic, roles, tmp_path
):
    base = unique_topic("collide")
    orders, sales = f"{base}.orders", f"{base}.sales"
    why = (
        f"REPLICATION_TOPICS_RENAME_PATTERN: source topics {orders} and {sales} would both be "
        f"copied to dc1.{base}.sales: one destination topic per source topic (rename them "
        "apart, or leave one out with REPLICATION_TOPICS_EXCLUDE)"
    )
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    create_topic(source_cluster.bootstrap_servers, orders)
    producer.produce(orders, value=b"an order")
    assert producer.flush(30) == 0
    env = _rename_flow(source_cluster, target_cluster, tmp_path, unique_topic, base)
    port = str(free_port())

    # Replicating orders alone, until its record is in staging.
    replicator = roles.start("replicator", {**env, "METRICS_PORT": port})
    _await_staged(target_cluster, env, orders, b"an order", replicator)
    # A topic made later with the same destination name: left out, said and counted; orders,
    # there first, keeps its name and goes on being copied.
    create_topic(source_cluster.bootstrap_servers, sales)
    producer.produce(sales, value=b"a sale")
    assert producer.flush(30) == 0
    await_metric(port, "exactly_replicator_topics_left_out", 1, topic=sales)
    left_out = 'msg="source topic not replicated: its destination name collides"'
    assert replicator.log_text().count(left_out) == 1  # once, not every discovery round
    assert f"topic={sales}" in replicator.log_text()
    assert why in replicator.log_text()
    producer.produce(orders, value=b"a second order")
    assert producer.flush(30) == 0
    _await_staged(target_cluster, env, orders, b"a second order", replicator)

    # A restart meets both topics: orders was replicated, so it goes on and sales stays out.
    assert replicator.terminate() == 0
    restarted = roles.start("replicator", {**env, "METRICS_PORT": port}, name="restarted")
    await_metric(port, "exactly_replicator_topics_left_out", 1, topic=sales)
    assert restarted.is_running(), restarted.log_tail()
    assert left_out in restarted.log_text()
    assert _staged(target_cluster, env).keys() == {orders}

    assert restarted.terminate() == 0

    # At start-up a clash the flow has not met is the settings' error: exit 2, one line, nothing
    # subscribed. A new rename of this flow that sends refunds onto orders' name:
    refunds = f"{base}.refunds"
    create_topic(source_cluster.bootstrap_servers, refunds)
    renamed = {**env, "REPLICATION_TOPICS_RENAME_PATTERN": r"(.*)\.(orders|refunds)"}
    clash = (
        f"source topics {orders} and {refunds} would both be copied to dc1.{base}.sales: one "
        "destination topic per source topic"
    )
    # And a fresh flow over the same topics.
    fresh = _rename_flow(source_cluster, target_cluster, tmp_path, unique_topic, base)
    for settings, words in ((renamed, clash), (fresh, why)):
        started = run_exactly("replicator", env=role_environment(settings), timeout_s=120)
        assert started.returncode == 2, started.stderr
        [line] = _not_log_events(started.stderr)
        assert line.startswith("exactly replicator: configuration error: "), line
        assert words in line
        assert "subscribed" not in started.stderr


def test_the_audit_and_the_acls_refuse_the_same_collision():
    """What stage 1 stops on at start-up (and a running one leaves out), `exactly validate` and
    `exactly acls` refuse with the same words."""
    settings = load_settings(
        {
            "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "source:9092",
            "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "target:9092",
            "REPLICATION_TOPICS_INCLUDE": "eu.*",
            **RENAME,
        }
    )
    why = (
        "REPLICATION_TOPICS_RENAME_PATTERN: source topics eu.orders and eu.sales would both be "
        "copied to dc1.eu.sales"
    )
    with pytest.raises(InputError, match=re.escape(why)):
        _pick_topics(settings, (), dict.fromkeys(["eu.orders", "eu.sales", "us.orders"]))
    with pytest.raises(DestinationCollisionError, match=re.escape(why)):
        flow_grants(settings, ["eu.sales", "eu.orders"])
    # Apart, the renamed pair is what both work on.
    assert _pick_topics(settings, (), dict.fromkeys(["eu.orders", "us.orders"])) == [
        ("eu.orders", "dc1.eu.sales")
    ]
    grants = flow_grants(settings, ["eu.orders"])
    assert {(g.role, g.name) for g in grants if g.resource == "TOPIC" and "eu" in g.name} >= {
        ("replicator", "eu.orders"),
        ("replicator", "dc1.eu.sales"),
        ("deduplicator", "dc1.eu.sales"),
    }

"""Destination topics on a target whose brokers create topics on request (Kafka's default,
auto.create.topics.enable=true, and the official image's): found by `make test-images`, where
stage 1's own check for the destination created it with the broker's one partition a moment
before its create of six, and stage 2 then stopped on "Local: Unknown partition"."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, ConfigResource

from replicator.topics import SourceTopic, ensure_destination, ensure_destinations
from runtime import admin_client, load_settings


def _creates_topics_on_request(admin: AdminClient) -> bool:
    broker = next(iter(admin.list_topics(timeout=10).brokers))
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker))
    entries = admin.describe_configs([resource])[resource].result(10)
    return entries["auto.create.topics.enable"].value == "true"


def test_the_destination_gets_the_sources_partitions_where_brokers_create_topics_on_request(
    target_cluster, unique_topic, monkeypatch
):
    observer = AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers})
    assert _creates_topics_on_request(observer), "the test's target must, as Kafka's default"
    monkeypatch.setenv("KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS", "unused:9092")
    monkeypatch.setenv(
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS", target_cluster.bootstrap_servers
    )
    monkeypatch.setenv("REPLICATION_TOPICS_INCLUDE", "orders")
    name = unique_topic("orders")
    ensure_destination(
        admin_client(load_settings().destination), SourceTopic(name, name, 6, b"\0" * 16, {}), {}
    )
    assert len(observer.list_topics(name, timeout=10).topics[name].partitions) == 6


def test_many_new_destinations_are_made_together_and_a_refused_one_stops_none_of_the_others(
    target_cluster, unique_topic, monkeypatch
):
    """Issue 34: a start-up that finds hundreds of topics creates their destinations in one
    request; the one the broker refuses (an invalid config) is reported, the others are made,
    each with its source's partitions and configs."""
    monkeypatch.setenv("KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS", "unused:9092")
    monkeypatch.setenv(
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS", target_cluster.bootstrap_servers
    )
    monkeypatch.setenv("REPLICATION_TOPICS_INCLUDE", "many.*")
    # The role's own client: it never creates a topic by asking for it (the brokers would).
    admin = admin_client(load_settings().destination)
    good = [
        SourceTopic(name, name, n, b"\0" * 16, {"retention.ms": "86400000"})
        for n, name in enumerate((unique_topic(f"many{i}") for i in range(8)), start=1)
    ]
    bad_name = unique_topic("refused")
    bad = SourceTopic(bad_name, bad_name, 2, b"\0" * 16, {"retention.ms": "a week"})

    failures = ensure_destinations(admin, [*good[:4], bad, *good[4:]], {})

    assert list(failures) == [bad_name]
    topics = admin.list_topics(timeout=10).topics
    assert bad_name not in topics
    assert {t.name: len(topics[t.name].partitions) for t in good} == {
        t.name: t.partitions for t in good
    }
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t.name) for t in good]
    for future in admin.describe_configs(resources).values():
        assert future.result(10)["retention.ms"].value == "86400000"
    # Asked again (a restart), nothing is created and nothing fails.
    assert ensure_destinations(admin, good, {}) == {}

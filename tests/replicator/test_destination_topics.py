"""Destination topics on a target whose brokers create topics on request (Kafka's default,
auto.create.topics.enable=true, and the official image's): found by `make test-images`, where
stage 1's own check for the destination created it with the broker's one partition a moment
before its create of six, and stage 2 then stopped on "Local: Unknown partition"."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, ConfigResource

from replicator.topics import SourceTopic, ensure_destination
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
        admin_client(load_settings().destination), SourceTopic(name, name, 6, b"\0" * 16, {})
    )
    assert len(observer.list_topics(name, timeout=10).topics[name].partitions) == 6

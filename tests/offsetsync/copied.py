"""A source topic of numbered records and its copy `<topic>.copy` on the target, written as
stage 2 writes (provenance header, same partitions), and what stage 1 records of it in the
flow's meta topic: what offset sync translates across."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka.admin import AdminClient

from offsetsync.source_ids import source_topic_ids
from replicator.flowrecords import FlowRecords
from runtime import Settings
from tests.kafka_helpers import create_topic, produce_numbered, read_all
from tests.validator.planting import copy_to_destination


def copied_topic(source_cluster, target_cluster, topic: str, partitions: int, records: int):
    """The source's records as read back, and the copy's name."""
    copy = f"{topic}.copy"
    create_topic(source_cluster.bootstrap_servers, topic, partitions)
    produce_numbered(source_cluster.bootstrap_servers, topic, partitions, 0, records)
    source = read_all(source_cluster.bootstrap_servers, topic, partitions)
    copy_to_destination(
        target_cluster.bootstrap_servers,
        copy,
        source,
        source_cluster_id=source_cluster.cluster_id,
        faults=False,
        partitions=partitions,
    )
    return source, copy


def stage_1_records(target_cluster, settings: Settings) -> FlowRecords:
    """The flow's meta topic as stage 1 keeps it (replicator/flowrecords.py), made if missing and
    read: what it records there, written by its own code."""
    admin = AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers})
    records = FlowRecords(settings)
    records.load(admin, lambda new: admin.create_topics([new])[new.topic].result(30))
    return records


def record_taken_in(source_cluster, target_cluster, settings: Settings, topics: Iterable[str]):
    """Stage 1's record of each of ``topics`` taken in (its source topic id), which it writes
    before it copies a record of it: offset sync translates only a topic so recorded."""
    names = set(topics)
    admin = AdminClient({"bootstrap.servers": source_cluster.bootstrap_servers})
    ids = source_topic_ids(admin, names)  # the ids as offset sync reads them
    assert ids.keys() == names, f"not on the source: {names - ids.keys()}"
    stage_1_records(target_cluster, settings).record_topic_ids(ids)

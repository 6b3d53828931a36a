"""A source topic of numbered records and its copy `<topic>.copy` on the target, written as
stage 2 writes (provenance header, same partitions): what offset sync translates across."""

from __future__ import annotations

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

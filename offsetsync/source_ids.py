"""The ids the source gives its topics now, to tell a topic stage 1 took in from one deleted and
recreated under its name since (docs/design.md §3.2, invariant 7).

A recreated topic's groups commit the new topic's offsets, while the destination holds the old
topic's copies for as long as stage 1 holds the new one back (REPLICATION_ON_TOPIC_RECREATED's
default, ``stop``): the provenance header names a cluster, partition and offset, not a topic, so
translated, the new offsets would move a group on the target to the old topic's records."""

from __future__ import annotations

from collections.abc import Collection

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from runtime import kafka_error_of, raise_if_refused
from runtime.topics import admin_result, topic_id_bytes

_TIMEOUT_S = 30.0


def source_topic_ids(admin: AdminClient, topics: Collection[str]) -> dict[str, str]:
    """Each of ``topics``' id on the source, as stage 1 records it (hex). A topic the source no
    longer has is left out: deleted and not recreated, the groups' offsets on it are still the
    recorded topic's, and so are its copies. Any other failure raises: a topic is never
    translated for want of knowing which topic it is."""
    if not topics:
        return {}
    futures = admin.describe_topics(TopicCollection(sorted(topics)))
    ids: dict[str, str] = {}
    for name, future in futures.items():
        try:
            # Given the admin: a refused credential is said within a second, not after 30 s.
            description = admin_result(future, _TIMEOUT_S, admin)
        except KafkaException as exc:
            raise_if_refused(exc, "source", {"TOPIC": ("DESCRIBE", name)})
            if kafka_error_of(exc).code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
            continue
        ids[name] = topic_id_bytes(description.topic_id).hex()
    return ids

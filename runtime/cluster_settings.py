"""One Kafka cluster's settings: where it is, the seed's one topic, librdkafka passthrough.

Part of the settings schema (runtime/settings.py: ``Settings.source``, ``Settings.destination``),
and what every client of a cluster is configured from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from runtime.settings_types import Servers, TopicName
from runtime.settings_variables import BOOTSTRAP_ALIAS

RECONNECT_BACKOFF_MAX_MS = 1000


class ClusterSettings(BaseModel):
    """One Kafka cluster: where it is, the seed's one topic, and librdkafka passthrough."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True)

    # mypy checks Field like a dataclass field, whose alias must be a literal; pydantic's is not.
    bootstrap_servers: Servers = Field(  # type: ignore[literal-required]
        alias=BOOTSTRAP_ALIAS,
        description="The cluster's brokers (the source's or the target's, as the name says): a "
        "comma-separated `host:port` list, IPv6 in brackets (`[::1]:9092`).",
    )
    topic: TopicName | None = Field(
        None,
        alias="TOPIC",
        description="The seed's one-topic form. `KAFKA_CLUSTERS_SOURCE_TOPIC`: one source topic "
        "to replicate; not together with `REPLICATION_TOPICS_INCLUDE`. "
        "`KAFKA_CLUSTERS_DESTINATION_TOPIC`: its name on the target (default: the source topic's "
        "name); needs `KAFKA_CLUSTERS_SOURCE_TOPIC`.",
    )
    # Not variables themselves: filled from <cluster>_PROPERTIES_* (runtime.properties).
    properties: dict[str, str] = Field(default_factory=dict)
    secret_properties: dict[str, SecretStr] = Field(default_factory=dict)
    # The file each `_FILE` property's value was read from, by property name (watched by
    # runtime/credential_files.py: a renewed secret is loaded by a restart).
    property_files: dict[str, str] = Field(default_factory=dict)

    def client_config(self, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
        """bootstrap.servers and the passthrough properties, ready for confluent_kafka;
        ``overrides`` replace properties before what we derive from them is worked out (a
        `_FILE` value read again by runtime/credential_files.py)."""
        config = {
            "bootstrap.servers": ",".join(self.bootstrap_servers),
            # Never create a topic by asking for it. Brokers create one on any metadata request
            # that names it (auto.create.topics.enable, on by default), and librdkafka's producers
            # and admin clients ask that way: stage 1's check for a destination topic created it
            # with the broker's num.partitions (1) a moment before its own create (6), which then
            # answered "already exists", and stage 2 could not write the source's partition 3.
            # Every topic of a flow is created by the role that owns it, as its source has it.
            "allow.auto.create.topics": "false",
        }
        config.update(self.properties)
        config.update(
            {name: value.get_secret_value() for name, value in self.secret_properties.items()}
        )
        config.update(overrides or {})
        reconnect_max = _reconnect_backoff_max_ms(config.get("reconnect.backoff.ms"))
        if reconnect_max is not None:
            config.setdefault("reconnect.backoff.max.ms", str(reconnect_max))
        return config


_PLAIN_MS = re.compile(r"\s*(0|[1-9][0-9]{0,6})\s*")


def _reconnect_backoff_max_ms(first_wait: str | None) -> int | None:
    """Our longest wait between two tries to reach a broker that went away, given the user's
    ``reconnect.backoff.ms`` (None: not ours to set). Java's clients' default, where
    librdkafka's is 10 s: a transactional producer asks for a moved coordinator only when a try
    to reach the old one fails, and comes back to a restarted broker only at its next try; 10 s
    apart, an abort waited on a dead transaction coordinator 2.3 s past the broker session, and
    a controlled roll of the target stood still 2.1-5.8 s a node against 1.6-3.8 s at 1 s
    (docs/replicated-clusters.md). librdkafka refuses a maximum below the first wait, so a
    longer first wait raises ours to it, and a first wait written any other way than plain
    digits (librdkafka also reads hex, signs and trailing text) leaves librdkafka's own."""
    if first_wait is None:
        return RECONNECT_BACKOFF_MAX_MS
    if not _PLAIN_MS.fullmatch(first_wait):
        return None
    return max(RECONNECT_BACKOFF_MAX_MS, int(first_wait))

"""Stage 1's clients: what its invariants and its loop need (incremental assignment) is set by
the role whatever the user gives, never anything the protocol the user chose refuses; the rest
is the user's to change, as for stage 2's producer."""

from replicator.clients import consumer_config, producer_config
from replicator.topics import StagingTopic
from runtime import load_settings

CLUSTERS = {
    "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "source:9092",
    "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "target:9092",
}
STAGING = StagingTopic("staging", 12, 8 * 1024 * 1024, {})


def _config(**properties: str) -> dict[str, object]:
    settings = load_settings(
        {
            **CLUSTERS,
            **{f"KAFKA_CLUSTERS_DESTINATION_PROPERTIES_{k}": v for k, v in properties.items()},
        }
    )
    return producer_config(settings, STAGING, lambda error: None)


def test_the_users_linger_wins():
    assert _config()["linger.ms"] == 5
    assert _config(LINGER_MS="50")["linger.ms"] == "50"


def test_what_invariant_2_needs_is_not_the_users_to_change():
    config = _config(
        ACKS="1", ENABLE_IDEMPOTENCE="false", MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION="20"
    )
    assert (config["acks"], config["enable.idempotence"]) == ("all", True)
    assert config["enable.gapless.guarantee"] is True
    assert config["max.in.flight.requests.per.connection"] == 5


def test_the_source_consumer_leaves_the_assignor_to_the_broker_under_kip_848():
    classic = consumer_config(load_settings(CLUSTERS), lambda error: None)
    assert classic["partition.assignment.strategy"] == "cooperative-sticky"
    settings = load_settings(
        {**CLUSTERS, "KAFKA_CLUSTERS_SOURCE_PROPERTIES_GROUP_PROTOCOL": "consumer"}
    )
    # librdkafka refuses to create a consumer of that protocol with an assignor of its own.
    assert "partition.assignment.strategy" not in consumer_config(settings, lambda error: None)

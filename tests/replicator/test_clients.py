"""Stage 1's staging producer: what invariant 2 needs is set by the role whatever the user
gives; anything else is the user's to change, as for stage 2's producer."""

from replicator.clients import producer_config
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

"""Stage 2's transactional producer retries CONCURRENT_TRANSACTIONS quickly by default
(deduplicator.clients.TRANSACTION_RETRY_DEFAULTS), and a user's own property wins."""

from deduplicator.clients import producer_config
from runtime import load_settings

CLUSTERS = {
    "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "source:9092",
    "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "target:9092",
}


def test_the_producer_retries_a_busy_coordinator_within_tens_of_milliseconds():
    config = producer_config(load_settings(CLUSTERS), "txn-id", lambda error: None)
    # librdkafka's own 100 ms, doubling to 1 s, is what stretched commits (issue 35).
    assert (config["retry.backoff.ms"], config["retry.backoff.max.ms"]) == (20, 100)


def test_the_users_retry_backoff_wins():
    settings = load_settings(
        {
            **CLUSTERS,
            "KAFKA_CLUSTERS_DESTINATION_PROPERTIES_RETRY_BACKOFF_MS": "250",
            "KAFKA_CLUSTERS_DESTINATION_PROPERTIES_RETRY_BACKOFF_MAX_MS": "2000",
        }
    )
    config = producer_config(settings, "txn-id", lambda error: None)
    assert (config["retry.backoff.ms"], config["retry.backoff.max.ms"]) == ("250", "2000")
    assert config["transactional.id"] == "txn-id"


def test_the_users_linger_wins():
    settings = load_settings({**CLUSTERS, "KAFKA_CLUSTERS_DESTINATION_PROPERTIES_LINGER_MS": "50"})
    assert producer_config(settings, "txn-id", lambda error: None)["linger.ms"] == "50"

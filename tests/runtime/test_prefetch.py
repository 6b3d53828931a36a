"""Both stages' consumers bound their prefetching (runtime.PREFETCH_DEFAULTS), and a user's own
librdkafka property always wins over our default."""

import pytest

from deduplicator.clients import consumer_config as stage2_consumer
from replicator.clients import consumer_config as stage1_consumer
from runtime import PREFETCH_DEFAULTS, load_settings

CLUSTERS = {
    "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "source:9092",
    "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "target:9092",
}
# (the stage's consumer config, the cluster whose properties it reads)
STAGES = [
    pytest.param(stage1_consumer, "SOURCE", id="stage 1"),
    pytest.param(stage2_consumer, "DESTINATION", id="stage 2"),
]


@pytest.mark.parametrize(("config_of", "cluster"), STAGES)
def test_defaults_bound_the_prefetch(config_of, cluster):
    config = config_of(load_settings(CLUSTERS), lambda error: None)
    # librdkafka's own values (1 s backoff, 100 000 records, 64 MiB a partition) are the slow,
    # memory-hungry path that PREFETCH_DEFAULTS exists to avoid.
    assert config["fetch.queue.backoff.ms"] == 20
    assert config["queued.min.messages"] == 20_000
    assert config["queued.max.messages.kbytes"] == 32 * 1024
    # A fetch answered at 32 KiB or after 50 ms, not at the first byte (issue 35).
    assert config["fetch.min.bytes"] == 32 * 1024
    assert config["fetch.wait.max.ms"] == 50
    assert set(PREFETCH_DEFAULTS) <= set(config)


@pytest.mark.parametrize(("config_of", "cluster"), STAGES)
def test_the_users_property_wins(config_of, cluster):
    settings = load_settings(
        {
            **CLUSTERS,
            f"KAFKA_CLUSTERS_{cluster}_PROPERTIES_FETCH_QUEUE_BACKOFF_MS": "500",
            f"KAFKA_CLUSTERS_{cluster}_PROPERTIES_QUEUED_MAX_MESSAGES_KBYTES": "4096",
            f"KAFKA_CLUSTERS_{cluster}_PROPERTIES_FETCH_WAIT_MAX_MS": "500",
        }
    )
    config = config_of(settings, lambda error: None)
    assert config["fetch.queue.backoff.ms"] == "500"
    assert config["queued.max.messages.kbytes"] == "4096"
    assert config["fetch.wait.max.ms"] == "500"
    assert config["queued.min.messages"] == 20_000

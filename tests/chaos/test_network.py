"""Network faults as exactly chaos applies them: a cluster made with a proxied listener, reached
through toxiproxy, and a black hole, resets and latency felt by a real client."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from exactly.chaos.network import Toxiproxy, ensure_toxiproxy, listener_name
from localkafka import LocalCluster


@pytest.mark.chaos
@pytest.mark.kafka
def test_a_client_through_its_proxy_feels_each_fault_and_recovers_when_it_heals(tmp_path: Path):
    listener = listener_name("replicator")
    cluster = LocalCluster.create(tmp_path / "cluster", "net", proxied=[listener])
    network = Toxiproxy(ensure_toxiproxy(), tmp_path / "toxiproxy.log")
    try:
        cluster.start()
        network.start()
        listen, via_proxy = cluster.proxied_endpoint(listener)
        network.add_link("replicator@net", via_proxy, listen)
        admin = AdminClient(
            # Longer than the latency toxic's round trip (2 +- 1 s each way).
            {"bootstrap.servers": f"127.0.0.1:{via_proxy}", "socket.timeout.ms": 10000}
        )
        metadata = admin.list_topics(timeout=10)
        # The broker sends the client back through the proxy, not to its own port.
        assert [(b.host, b.port) for b in metadata.brokers.values()] == [("127.0.0.1", via_proxy)]

        network.break_link("replicator@net", "blackhole")
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=4)
        network.heal_link("replicator@net")
        assert admin.list_topics(timeout=15).brokers

        network.break_link("replicator@net", "reset")
        with pytest.raises(KafkaException):
            admin.list_topics("reset-topic", timeout=4)
        network.heal_link("replicator@net")
        assert admin.list_topics(timeout=15).brokers

        network.break_link("replicator@net", "latency")
        started = time.monotonic()
        admin.list_topics("absent-topic", timeout=30)
        assert time.monotonic() - started > 1.0  # 2 s +- 1 s each way
        network.heal_link("replicator@net")
    finally:
        network.stop()
        cluster.stop()

"""Network faults as exactly chaos applies them: a cluster made with a proxied listener, reached
through toxiproxy, and a black hole, resets and latency felt by a real client."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from exactly.chaos.errors import ChaosError
from exactly.chaos.network import Toxiproxy, ensure_toxiproxy, listener_name
from localkafka import LocalCluster, free_ports


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
        network.add_link("replicator@net", {2: (via_proxy, listen)})
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


def test_a_link_to_a_frozen_client_heals_in_the_background_once_the_client_reads(tmp_path: Path):
    """A latency toxic cannot come off while its client does not read (a role frozen by
    SIGSTOP: toxiproxy flushes what the toxic holds first). Healing must not wait there: the
    fault loop that would thaw the role is the one calling it (a CI run once died of it)."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def pump(connection: socket.socket) -> None:
        with contextlib.suppress(OSError), connection:
            while not stop.is_set():
                connection.sendall(os.urandom(65536))

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                threading.Thread(target=pump, args=(server.accept()[0],), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    network = Toxiproxy(ensure_toxiproxy(), tmp_path / "toxiproxy.log")
    (listen,) = free_ports(1)
    clients: list[socket.socket] = []
    try:
        network.start()
        network.add_link("deduplicator-2@net", {1: (listen, server.getsockname()[1])})
        network.break_link("deduplicator-2@net", "latency")
        for _ in range(4):
            client = socket.socket()
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # full at once
            client.connect(("127.0.0.1", listen))
            clients.append(client)  # reads nothing: frozen
        time.sleep(4)  # the toxic holds data the clients do not take

        started = time.monotonic()
        network.heal_link("deduplicator-2@net")
        assert time.monotonic() - started < 1.0
        assert network.healing("deduplicator-2@net")
        unhealed = network.await_healed(2.0)
        assert list(unhealed) == ["deduplicator-2@net"]
        with pytest.raises(ChaosError, match="still coming off"):
            network.break_link("deduplicator-2@net", "reset")

        def read(client: socket.socket) -> None:  # the clients thaw
            with contextlib.suppress(OSError):
                while client.recv(1 << 20):
                    pass

        for client in clients:
            threading.Thread(target=read, args=(client,), daemon=True).start()
        assert network.await_healed(60.0) == {}
        network.break_link("deduplicator-2@net", "reset")  # the link takes faults again
    finally:
        stop.set()
        network.stop()
        server.close()
        for client in clients:
            client.close()


def test_a_fault_on_a_link_of_several_nodes_cuts_the_instance_from_every_node(tmp_path: Path):
    """A cluster of three nodes: one proxy per node on the link; a reset on the link resets
    the connections through each of them, and healing restores each."""
    servers = [socket.create_server(("127.0.0.1", 0)) for _ in range(3)]

    def echo(server: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection = server.accept()[0]
                with contextlib.suppress(OSError), connection:
                    while data := connection.recv(1024):
                        connection.sendall(data)

    for server in servers:
        threading.Thread(target=echo, args=(server,), daemon=True).start()
    network = Toxiproxy(ensure_toxiproxy(), tmp_path / "toxiproxy.log")
    ports = free_ports(3)
    routes = {
        node: (port, server.getsockname()[1])
        for node, port, server in zip((1, 2, 3), ports, servers, strict=True)
    }

    def answers(port: int) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 5) as c:
            c.settimeout(5)
            c.sendall(b"ping")
            return c.recv(4) == b"ping"
        return False

    try:
        network.start()
        network.add_link("replicator@three", routes)
        assert all(answers(port) for port in ports)
        network.break_link("replicator@three", "reset")
        assert not any(answers(port) for port in ports)
        network.heal_link("replicator@three")
        assert network.await_healed(30.0) == {}
        assert all(answers(port) for port in ports)
        with pytest.raises(ChaosError, match="no network link"):
            network.break_link("replicator@nowhere", "reset")
    finally:
        network.stop()
        for server in servers:
            server.close()

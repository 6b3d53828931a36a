"""`exactly run`: every role of a flow in one process tree, as one container runs them."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid

from prometheus_client.parser import text_string_to_metric_families

from localkafka import free_port_block
from tests.deploy.deployed import queried_metrics
from tests.files import replace_file
from tests.kafka_helpers import produce_numbered
from tests.replication.processes import role_processes
from tests.replication.scrape import await_metric, await_total, sample, scrape, total
from tests.replication.staging import read_source
from tests.replication.test_deduplicator import (
    _await_destination,
    _traffic_flow,
    assert_exactly_once,
)

_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}


def _exported_names(expositions) -> set[str]:
    """Every name a query may use: samples, and for a labelled family without samples yet the
    family's own names (a counter's _total, a histogram's _bucket...)."""
    names = set()
    for text in expositions:
        for family in text_string_to_metric_families(text):
            suffixes = _SUFFIXES.get(family.type, ("",))
            names |= {s.name for s in family.samples}
            names |= {family.name + suffix for suffix in suffixes}
    return names


def _assert_copied_exactly_once(source_cluster, target_cluster, topic: str) -> None:
    """Every record the source topic holds now reaches the destination exactly once."""
    source = read_source(source_cluster.bootstrap_servers, [topic])
    assert_exactly_once(source_cluster, source, _await_destination(target_cluster, source))


def test_exactly_run_restarts_a_killed_role_and_copies_exactly_once(
    source_cluster, target_cluster, tmp_path, unique_topic
):
    topic = unique_topic("orders")
    env = _traffic_flow(source_cluster, target_cluster, tmp_path, unique_topic, {topic: 3})
    port = free_port_block(4)
    env.update(METRICS_PORT=str(port), OFFSETSYNC_GROUPS_INCLUDE=f"g{uuid.uuid4().hex[:8]}.*")
    produce_numbered(source_cluster.bootstrap_servers, topic, 3, 0, 600)
    with role_processes(tmp_path) as processes:
        supervisor = processes.start("exactly", env, args=("run",), name="run")
        started = supervisor.wait_for_log(r"role started.*child=deduplicator.*pid=(\d+)", 60)
        for role in ("replicator", "offsetsync"):
            supervisor.wait_for_log(f"role started.*child={role}")
        _assert_copied_exactly_once(source_cluster, target_cluster, topic)
        # Every metric the shipped dashboard and alert rules query is one of these processes'.
        exported = _exported_names(scrape(port + i) for i in range(4))
        for where, names in queried_metrics().items():
            assert names, where
            assert names <= exported, (where, sorted(names - exported))
        # Each role serves its own metrics on the ports after the process's own.
        assert total(scrape(port + 1), "exactly_replicator_records_total") == 600
        assert await_total(port + 2, "exactly_deduplicator_records_written_total", 600) == 600
        assert total(scrape(port + 3), "exactly_offsetsync_cycle_seconds_count") > 0
        # Every sample names its flow (the alerts aggregate by it), process metrics included.
        for i in range(4):
            for family in text_string_to_metric_families(scrape(port + i)):
                for found in family.samples:
                    assert found.labels.get("flow") == env["REPLICATION_FLOW"], (i, found)
        # Stage 2's backlog, per staging partition, is 0 once every record is on the destination.
        deadline = time.monotonic() + 15  # the gauge follows within its 5 s interval
        while True:
            metrics = scrape(port + 2)
            drained = "exactly_deduplicator_backlog_records{" in metrics and (
                total(metrics, "exactly_deduplicator_backlog_records") == 0
            )
            if drained or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert drained, [line for line in metrics.splitlines() if "backlog_records{" in line]

        # A crash of one role: started again, counted, and nothing lost or duplicated.
        os.kill(int(started.group(1)), signal.SIGKILL)
        supervisor.wait_for_log("role exited; starting again.*child=deduplicator.*exit_status=-9")
        await_metric(port, "exactly_run_role_restarts_total", 1, role="deduplicator")
        supervisor.wait_for_log(r"role started.*child=deduplicator.*start=2", 30)
        produce_numbered(source_cluster.bootstrap_servers, topic, 3, 600, 600)
        _assert_copied_exactly_once(source_cluster, target_cluster, topic)
        metrics = scrape(port)
        assert sample(metrics, "exactly_run_role_restarts_total", role="deduplicator") == 1
        assert sample(metrics, "exactly_run_role_restarts_total", role="replicator") == 0
        assert sample(metrics, "exactly_run_role_up", role="deduplicator") == 1

        # SIGTERM drains every role, and the whole tree exits 0.
        assert supervisor.terminate(90) == 0
        log = supervisor.log_text()
        for role in ("replicator", "deduplicator", "offsetsync"):
            assert f'role drained" child={role}' in log, supervisor.log_tail()


def test_exactly_run_stops_everything_when_a_role_says_its_configuration_is_wrong(
    source_cluster, target_cluster, tmp_path
):
    # Offset sync needs a topic selection: the process's own check lets it through, the role
    # exits 2, and starting it again would fail the same way.
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "OFFSETSYNC_GROUPS_INCLUDE": "app.*",
        "REPLICATION_FLOW": f"f{uuid.uuid4().hex[:8]}",
        "METRICS_PORT": "0",
        "STATE_DIR": str(tmp_path / "state"),
    }
    with role_processes(tmp_path) as processes:
        supervisor = processes.start("exactly", env, args=("run",), name="run")
        assert supervisor.wait(90) == 2, supervisor.log_tail()
        log = supervisor.log_text()
        assert "exactly offsetsync: configuration error: REPLICATION_TOPICS_INCLUDE" in log
        assert (
            "exactly run: configuration error: offsetsync: the role exited 2: its configuration "
            "is wrong"
        ) in log
        assert "role exited; starting again" not in log


def test_json_logs_and_process_metrics_on_the_address_asked(
    source_cluster, target_cluster, tmp_path
):
    port = free_port_block(3)
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": f"none-{uuid.uuid4().hex[:8]}",
        "REPLICATION_FLOW": f"f{uuid.uuid4().hex[:8]}",
        "METRICS_PORT": str(port),
        "METRICS_HOST": "127.0.0.1",
        "EXACTLY_LOG_FORMAT": "json",
        "STATE_DIR": str(tmp_path / "state"),
    }
    with role_processes(tmp_path) as processes:
        supervisor = processes.start("exactly", env, args=("run",), name="run")
        supervisor.wait_for_log('"msg": "deduplicator started"', 60)
        for each in (port, port + 1, port + 2):  # the process's own, the replicator's, stage 2's
            assert sample(scrape(each), "process_resident_memory_bytes") > 10_000_000
        assert supervisor.terminate(90) == 0
        events = [json.loads(line) for line in supervisor.log_text().splitlines()[1:]]
    served = [e for e in events if e["msg"] == "serving metrics and health"]
    assert {(e["role"], e["host"]) for e in served} == {
        ("run", "127.0.0.1"),
        ("replicator", "127.0.0.1"),
        ("deduplicator", "127.0.0.1"),
    }


def test_exactly_run_starts_roles_again_at_once_when_their_credential_files_change(
    source_cluster, target_cluster, tmp_path, unique_topic
):
    """A property read from a file (here the harmless client.id) is a credential file like a
    certificate: when it changes, each role using it drains, exits 3 and is started again at
    once, with no back-off and nothing lost or duplicated."""
    topic = unique_topic("renewed")
    env = _traffic_flow(source_cluster, target_cluster, tmp_path, unique_topic, {topic: 2})
    client_id = tmp_path / "client-id"
    client_id.write_text("exactly-before\n")
    port = free_port_block(3)
    env.update(
        METRICS_PORT=str(port),
        EXACTLY_CREDENTIALS_CHECK_MS="500",
        KAFKA_CLUSTERS_DESTINATION_PROPERTIES_CLIENT_ID_FILE=str(client_id),
    )
    produce_numbered(source_cluster.bootstrap_servers, topic, 2, 0, 300)
    with role_processes(tmp_path) as processes:
        supervisor = processes.start("exactly", env, args=("run",), name="run")
        _assert_copied_exactly_once(source_cluster, target_cluster, topic)

        replace_file(client_id, b"exactly-after\n")
        for role in ("replicator", "deduplicator"):
            supervisor.wait_for_log(f"role starting again with renewed credentials.*child={role}")
            supervisor.wait_for_log(rf"role started.*child={role}.*start=2", 30)
        produce_numbered(source_cluster.bootstrap_servers, topic, 2, 300, 300)
        _assert_copied_exactly_once(source_cluster, target_cluster, topic)
        metrics = scrape(port)
        assert sample(metrics, "exactly_run_role_restarts_total", role="deduplicator") == 1
        assert sample(metrics, "exactly_run_role_up", role="deduplicator") == 1
        assert supervisor.terminate(90) == 0
        log = supervisor.log_text()
    assert "role exited; starting again" not in log
    assert "exit_status=3" in log

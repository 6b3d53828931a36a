"""`exactly kafka up|status|kill|restart|down` from a shell, as docs/demo.md documents it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from localkafka import ClusterRegistry
from runtime import load_settings
from tests.commands import run_exactly


def _running_pids(state_dir: Path) -> dict[str, int]:
    pids = {}
    for pid_file in state_dir.glob("*/*/pid"):
        pid = int(pid_file.read_text())
        if _alive(pid):
            pids[f"{pid_file.parent.parent.name}/{pid_file.parent.name}"] = pid
    return pids


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


def test_up_status_kill_restart_down_leave_no_process(tmp_path):
    env = {**os.environ, "LOCALKAFKA_STATE_DIR": str(tmp_path / "clusters")}
    up = run_exactly("kafka", "up", env=env)
    try:
        assert up.returncode == 0, up.stderr
        bootstraps = dict(
            re.findall(r"^(source|target): running .* bootstrap=(\S+)", up.stdout, re.M)
        )
        assert set(bootstraps) == {"source", "target"}
        assert f"export KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS={bootstraps['source']}" in up.stdout
        cluster_ids = {
            name: AdminClient({"bootstrap.servers": b}).list_topics(timeout=10).cluster_id
            for name, b in bootstraps.items()
        }
        assert cluster_ids["source"] != cluster_ids["target"]
        pids = _running_pids(tmp_path / "clusters")
        assert set(pids) == {
            "source/broker",
            "source/controller",
            "target/broker",
            "target/controller",
        }

        status = run_exactly("kafka", "status", env=env)
        assert status.returncode == 0, status.stderr
        assert status.stdout.count(": running (broker pid") == 2

        killed = run_exactly("kafka", "kill", "target", env=env)
        assert killed.returncode == 0, killed.stderr
        assert not _alive(pids["target/broker"])
        assert _alive(pids["target/controller"])
        status = run_exactly("kafka", "status", env=env)
        assert status.returncode == 1
        assert "target: degraded (only the controller runs" in status.stdout

        restarted = run_exactly("kafka", "restart", "target", env=env)
        assert restarted.returncode == 0, restarted.stderr
        assert f"bootstrap={bootstraps['target']}" in restarted.stdout
        restarted_ids = AdminClient({"bootstrap.servers": bootstraps["target"]}).list_topics(
            timeout=10
        )
        assert restarted_ids.cluster_id == cluster_ids["target"]
    finally:
        down = run_exactly("kafka", "down", env=env)
    assert down.returncode == 0, down.stderr
    assert "source: stopped" in down.stdout
    assert "target: stopped" in down.stdout
    assert _running_pids(tmp_path / "clusters") == {}
    assert run_exactly("kafka", "status", env=env).returncode == 1


def test_status_names_an_unknown_cluster(tmp_path):
    env = {**os.environ, "LOCALKAFKA_STATE_DIR": str(tmp_path / "clusters")}
    result = run_exactly("kafka", "status", "nosuch", env=env)
    assert result.returncode == 1
    assert "no cluster in" in result.stderr
    assert "nosuch" in result.stderr
    assert "Traceback" not in result.stderr


def test_up_secure_prints_what_reaches_each_cluster_through_its_secured_listener(tmp_path):
    env = {**os.environ, "LOCALKAFKA_STATE_DIR": str(tmp_path / "clusters")}
    up = run_exactly("kafka", "up", "--secure", "source", "target", env=env)
    try:
        assert up.returncode == 0, up.stderr
        exports = dict(re.findall(r"^export (\w+)=(.*)$", up.stdout, re.M))
        assert exports["KAFKA_CLUSTERS_SOURCE_PROPERTIES_SECURITY_PROTOCOL"] == "SASL_SSL"
        assert exports["KAFKA_CLUSTERS_DESTINATION_PROPERTIES_SECURITY_PROTOCOL"] == "SSL"
        password_file = Path(exports["KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD_FILE"])
        assert password_file.read_text().strip() not in up.stdout  # by its file, never shown
        settings = load_settings({**exports, "REPLICATION_TOPICS_INCLUDE": "none"})
        for cluster in (settings.source, settings.destination):
            assert AdminClient(cluster.client_config()).list_topics(timeout=15).brokers
        # The same listener refuses a client without credentials.
        unauthenticated = AdminClient(
            {
                "bootstrap.servers": settings.destination.client_config()["bootstrap.servers"],
                "log_level": "0",
            }
        )
        with pytest.raises(KafkaException):
            unauthenticated.list_topics(timeout=3)

        again = run_exactly("kafka", "up", "source", env=env)  # made secure, stays secure
        assert again.returncode == 0, again.stderr
        assert "secured: SASL_SSL=" in again.stdout
    finally:
        down = run_exactly("kafka", "down", "--purge", env=env)
    assert down.returncode == 0, down.stderr
    assert _running_pids(tmp_path / "clusters") == {}


def test_up_secure_refuses_a_cluster_made_without_security(tmp_path):
    env = {**os.environ, "LOCALKAFKA_STATE_DIR": str(tmp_path / "clusters")}
    registry = ClusterRegistry(tmp_path / "clusters")
    registry.get_or_create("plain")  # made, never started
    up = run_exactly("kafka", "up", "--secure", "plain", env=env)
    assert up.returncode == 1
    assert "cluster 'plain' was made without secured listeners" in up.stderr
    assert "exactly kafka down --purge plain" in up.stderr

"""Refused credentials stop a role at once with one line saying so, where librdkafka reports
only a "Broker transport failure" that start-up would retry for minutes."""

from __future__ import annotations

import pytest

from tests.kafka_helpers import create_topic
from tests.replication.processes import role_processes
from tests.secured import secured_flow


@pytest.mark.parametrize("role", ["replicator", "offsetsync"])
def test_a_wrong_password_stops_the_role_naming_the_refusal(
    source_cluster, target_cluster, tmp_path, unique_topic, role
):
    topic = unique_topic("auth")
    create_topic(source_cluster.bootstrap_servers, topic, 1)
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": topic,
        "REPLICATION_FLOW": unique_topic("flow").replace(".", "-")[-90:],
        "OFFSETSYNC_GROUPS_INCLUDE": "auth-group",
        "METRICS_PORT": "0",
    }
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password\n")
    secured = secured_flow(source_cluster, target_cluster, env, [topic], ["auth-group"])[role]
    secured["KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD_FILE"] = str(wrong)
    with role_processes(tmp_path) as roles:
        process = roles.start(role, secured)
        status = process.wait(60)  # not the 2 minutes transient errors are waited out
        log = process.log_text()
    assert status == 1, log[-3000:]
    [line] = [line for line in log.splitlines() if "stopped by a fatal error" in line]
    source = secured["KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS"]
    assert f"authentication to {source} failed" in line
    assert "SASL authentication error" in line
    assert "not-the-password" not in log

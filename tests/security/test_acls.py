"""Each role with one of its ACLs taken away: it stops with one line that names the operation
and the resource it was refused, not a hang or a retry loop."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from exactly.acls import flow_grants
from runtime import load_settings
from tests.kafka_helpers import create_topic
from tests.replication.processes import role_processes
from tests.secured import secured_clusters, secured_flow


def _env(source_cluster, target_cluster, tmp_path, unique_topic, topic):
    return {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": topic,
        "REPLICATION_FLOW": unique_topic("flow").replace(".", "-")[-90:],
        "OFFSETSYNC_GROUPS_INCLUDE": "acl-test-group",
        "METRICS_PORT": "0",
        "STATE_DIR": str(tmp_path / "state"),
    }


# (role, the grant taken away: its cluster, resource type and the end of its name ("" for the
# copied topic), the operation)
DENIALS = [
    ("replicator", "source", "GROUP", ".replicator", "READ"),
    ("replicator", "source", "TOPIC", "", "DESCRIBE_CONFIGS"),  # was retried every 5 s
    ("replicator", "target", "TOPIC", "", "CREATE"),  # the destination topic: retried too
    ("replicator", "target", "TOPIC", ".staging", "WRITE"),  # showed only as a gap, retried
    ("replicator", "target", "TOPIC", ".meta", "WRITE"),  # was taken for written
    ("deduplicator", "target", "TRANSACTIONAL_ID", ".deduplicator.", "WRITE"),
    ("deduplicator", "target", "GROUP", ".deduplicator", "READ"),
    ("deduplicator", "target", "TOPIC", "", "WRITE"),  # the destination: was abort and retry
    ("offsetsync", "target", "TOPIC", ".checkpoints", "CREATE"),
]


@pytest.mark.parametrize(("role", "cluster", "resource", "end", "operation"), DENIALS)
def test_a_role_refused_one_acl_stops_naming_the_operation_and_the_resource(
    source_cluster, target_cluster, tmp_path, unique_topic, role, cluster, resource, end, operation
):
    secured_clusters(source_cluster, target_cluster)
    topic = unique_topic("acl")
    create_topic(source_cluster.bootstrap_servers, topic, 2)
    producer = Producer({"bootstrap.servers": source_cluster.bootstrap_servers})
    for i in range(20):  # records to copy: a refused write shows only when there are some
        producer.produce(topic, key=b"%d" % i, value=b"v")
    assert producer.flush(30) == 0
    env = _env(source_cluster, target_cluster, tmp_path, unique_topic, topic)
    [taken] = [
        g
        for g in flow_grants(load_settings(env), [topic], ["acl-test-group"])
        if (g.role, g.cluster, g.resource) == (role, cluster, resource)
        and (g.name.endswith(end) if end else g.name == topic)
    ]
    envs = secured_flow(
        source_cluster,
        target_cluster,
        env,
        [topic],
        ["acl-test-group"],
        leave_out=(taken, operation),
    )
    with role_processes(tmp_path) as roles:
        if role == "deduplicator":  # it waits for the staging topic stage 1 creates
            roles.start("replicator", envs["replicator"]).wait_for_log("replicator started")
        process = roles.start(role, envs[role])
        status = process.wait(90)
        log = process.log_text()
    assert status == 1, log[-3000:]
    [line] = [line for line in log.splitlines() if "stopped by a fatal error" in line]
    assert "not authorized" in line
    assert operation in line
    assert taken.name in line, line

"""`exactly acls`: each role's grants for the flow in the environment, as a table and as
kafka-acls.sh commands that Kafka's own AclCommand accepts."""

from __future__ import annotations

import os
import shlex
import subprocess

from confluent_kafka.admin import AdminClient

from exactly.acls import allowed_acls
from localkafka import ensure_kafka
from localkafka.node import java_executable
from tests.commands import run_exactly

ACL_COMMAND = "org.apache.kafka.tools.AclCommand"  # what kafka-acls.sh runs
FLOW_ENV = {
    "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "source:9092",
    "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "target:9092",
    "REPLICATION_TOPICS_INCLUDE": "orders.*",
    "REPLICATION_FLOW": "dr",
}


def _acls(*args: str):
    return run_exactly("acls", *args, env={**os.environ, **FLOW_ENV})


def test_every_role_gets_its_grants_on_each_cluster_for_the_named_topics_and_groups():
    table = _acls("--topic", "orders", "--group", "billing")
    assert table.returncode == 0, table.stderr
    rows = [line.split("#")[0].split() for line in table.stdout.splitlines()]
    replicator = "source User:replicator TOPIC literal orders READ,DESCRIBE,DESCRIBE_CONFIGS"
    assert replicator.split() in rows
    ids = "target User:deduplicator TRANSACTIONAL_ID prefixed exactly.dr.deduplicator."
    assert [*ids.split(), "WRITE,DESCRIBE"] in rows
    assert ["target", "User:offsetsync", "GROUP", "literal", "billing", "READ,DESCRIBE"] in rows
    assert {(row[0], row[1]) for row in rows} == {
        (cluster, f"User:{role}")
        for cluster in ("source", "target")
        for role in ("replicator", "offsetsync", "validator")
    } | {("target", "User:deduplicator")}  # stage 2 never reaches the source

    renamed = _acls("--topic", "orders", "--principal", "deduplicator=User:CN=stage2")
    assert "User:CN=stage2" in renamed.stdout
    bad = _acls("--topic", "orders", "--principal", "deduplicator")
    assert bad.returncode == 2
    assert "--principal" in bad.stderr


def test_the_printed_commands_grant_with_kafkas_own_acl_tool(target_cluster, unique_topic):
    topic = unique_topic("acl-cmd")
    printed = _acls("--topic", topic, "--commands")
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    commands = [line for line in lines if "--transactional-id" in line]  # a prefixed one
    commands += [
        line
        for line in lines
        if "User:replicator" in line and line.endswith("--topic __exactly.dr.staging")
    ]
    assert len(commands) == 2, printed.stdout
    distribution = ensure_kafka()
    for command in commands:
        bootstrap = "$KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS"
        argv = shlex.split(command.replace(bootstrap, target_cluster.bootstrap_servers))
        assert argv[0] == "kafka-acls.sh"
        done = subprocess.run(
            [java_executable(), "-cp", distribution.classpath, ACL_COMMAND, *argv[1:]],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    admin = AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers})
    found = allowed_acls(admin)
    granted = {(b.principal, b.restype.name, b.name, b.operation.name) for b in found}
    assert ("User:deduplicator", "TRANSACTIONAL_ID", "exactly.dr.deduplicator.", "WRITE") in (
        granted
    )
    assert ("User:replicator", "TOPIC", "__exactly.dr.staging", "DESCRIBE_CONFIGS") in granted

"""A consumer that joins a stage's group with the stage's own group.instance.id fences the
stage's member, as the stage's own later join does after a coordinator moved (three-node tests:
two target nodes down, a source coordinator killed). The stage makes its clients anew and goes
on without exiting, and every record arrives exactly once: stage 1 reads again from its commit
points and stage 2 drops what arrives twice; stage 2 restores its partitions from the changelog.
"""

from __future__ import annotations

import time

import pytest

from runtime.names import FlowNames
from tests.replication.datamix import ContinuousProducer
from tests.replication.intruder import fence_static_member
from tests.replication.test_deduplicator import _assert_copied_and_stopped, _traffic_flow

INSTANCE = "fenced"
# Each stage's log line for an assignment of partitions.
ASSIGNED = {
    "replicator": r'partitions assigned" count=[1-9]',
    "deduplicator": r'staging partitions assigned" partitions=\d',
}


@pytest.mark.parametrize("role", list(ASSIGNED))
def test_a_stage_fenced_as_a_static_member_joins_again_and_copies_exactly_once(
    source_cluster, target_cluster, unique_topic, roles, tmp_path, role
):
    topic = unique_topic("fenced")
    env = _traffic_flow(
        source_cluster,
        target_cluster,
        tmp_path,
        unique_topic,
        {topic: 4},
        REPLICATION_INSTANCE_ID=INSTANCE,
    )
    names = FlowNames(env["REPLICATION_FLOW"])
    if role == "replicator":
        # The group's one protocol: an intruder on another would be refused, not join.
        where = (source_cluster, names.replicator_group, topic)
        extra = {"partition.assignment.strategy": "cooperative-sticky"}
    else:
        where = (target_cluster, names.deduplicator_group, names.staging)
        extra = {}
    cluster, group, joined_topic = where
    with ContinuousProducer(
        source_cluster.bootstrap_servers, {topic: 4}, records_per_second=300
    ) as producer:
        stages = {name: roles.start(name, env) for name in ("replicator", "deduplicator")}
        fenced = stages[role]
        fenced.wait_for_log(ASSIGNED[role], timeout_s=60)
        # Something committed first: stage 1's new consumer then starts from a commit point,
        # not from the start, and reads again only what followed it.
        time.sleep(3)
        fence_static_member(
            cluster.bootstrap_servers,
            group,
            names.group_instance_id(role, INSTANCE),
            joined_topic,
            **extra,
        )
        fenced.wait_for_log(rf"fenced as a static member[\s\S]*{ASSIGNED[role]}", timeout_s=120)
        time.sleep(2)
        produced = producer.stop()
    _assert_copied_and_stopped(
        source_cluster, target_cluster, topic, produced, list(stages.values())
    )

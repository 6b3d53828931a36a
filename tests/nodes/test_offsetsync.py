"""Offset sync while the group coordinators move: a group commits on the source, the node
coordinating it on the source is SIGKILLed, the group commits again with its new coordinator,
and the target's coordinator of the group dies too; offset sync rides it out and the group
resumes on the target exactly where it stopped (issue 31)."""

from __future__ import annotations

import time

from confluent_kafka import KafkaException

from exactly.harness.errors import DemoError
from exactly.harness.failover import process_and_stop, resume_on_target
from localkafka.replicas import group_coordinator
from tests.kafka_helpers import produce_numbered, read_all
from tests.nodes.flow import HOLD_S, PARTITIONS, RESTART_S, assert_both_verdicts, make_flow
from tests.offsetsync.groups import await_committed
from tests.replication.staging import await_records

RECORDS = 1200


def test_offsetsync_follows_a_group_whose_coordinators_move(
    three_nodes, roles, unique_topic, unique_group, tmp_path
):
    source, target = three_nodes["source"], three_nodes["target"]
    group = unique_group("moving")
    flow = make_flow(
        three_nodes,
        unique_topic,
        tmp_path,
        OFFSETSYNC_GROUPS_INCLUDE=group,
        OFFSETSYNC_INTERVAL_MS="300",
    )
    produce_numbered(source.bootstrap_servers, flow.topic, PARTITIONS, 0, RECORDS)
    stages = [roles.start(role, flow.env) for role in ("replicator", "deduplicator")]
    await_records(target.bootstrap_servers, {flow.topic}, RECORDS, 180)
    sync = roles.start("offsetsync", flow.env)

    process_and_stop(
        source.bootstrap_servers, group, flow.topic, dict.fromkeys(range(PARTITIONS), 30)
    )
    await_committed(target.bootstrap_servers, group, flow.topic, partitions=PARTITIONS)

    # Its source coordinator dies between two commits of the group; the second commit goes to
    # the node that took the coordinator's partition over.
    node = group_coordinator(source.bootstrap_servers, group)
    source.kill_node(node)
    committed = _commit_while_it_moves(source, group, flow.topic, 120)
    source.start_node(node, tie_to_parent=True, ready_timeout_s=RESTART_S)
    # And the target's coordinator of the group, where offset sync commits.
    node = group_coordinator(target.bootstrap_servers, group)
    target.kill_node(node)
    time.sleep(HOLD_S)
    target.start_node(node, tie_to_parent=True, ready_timeout_s=RESTART_S)

    expected = {p: 120 for p in range(PARTITIONS)}
    assert committed == expected  # no transaction markers on this source: offsets are counts
    _await_resumed_exactly(source, target, group, flow.topic, expected)
    for role in (sync, *stages):
        assert role.is_running(), f"{role.name} exited {role.returncode}\n{role.log_tail()}"
        assert role.terminate(30) == 0, role.log_tail()
    # The records the group read were copied before the coordinators moved; both verdicts
    # still end the scenario, as they end every other one.
    records, _ = assert_both_verdicts(flow, 60)
    assert records == RECORDS


def _commit_while_it_moves(source, group, topic, count, timeout_s=60.0):
    """The group processes ``count`` records of each partition and commits, as an application
    does while its coordinator moves: a commit refused meanwhile is tried again."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return process_and_stop(
                source.bootstrap_servers, group, topic, dict.fromkeys(range(PARTITIONS), count)
            )
        except (KafkaException, DemoError):
            assert time.monotonic() < deadline, "the group could not commit for 60 s"
            time.sleep(1)


def _await_resumed_exactly(source, target, group, topic, expected, timeout_s=120.0):
    """The group, resumed on the target, reads exactly the records it had not processed on the
    source. First the target's committed offsets are awaited from outside the group: a consumer
    that joined it to look would keep it active, and offset sync leaves an active group alone."""
    records = read_all(source.bootstrap_servers, topic, PARTITIONS)
    unread = {
        p: [r.value for r in records if r.partition == p][offset:] for p, offset in expected.items()
    }
    # Where each partition's first unread record sits on the target (stage 2's commit markers
    # make the target's offsets differ from the source's); every value is unique.
    copied = {r.value: r.offset for r in read_all(target.bootstrap_servers, topic, PARTITIONS)}
    await_committed(
        target.bootstrap_servers,
        group,
        topic,
        {p: copied[values[0]] for p, values in unread.items()},
        timeout_s=timeout_s,
    )
    read = resume_on_target(target.bootstrap_servers, group, topic, PARTITIONS)
    assert {p: [r.value for r in records] for p, records in read.items()} == unread

"""One node of three SIGKILLed under traffic, chosen for what it leads or coordinates at that
moment, and started again 8 s later: nothing lost or duplicated, no role exits, and the
destination stalls no longer than Kafka's own failover makes it, plus on the target a producer
that librdkafka left hanging and stage 2 replaced (issue 31)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from localkafka import LocalCluster
from localkafka.replicas import group_coordinator, leader_of, transaction_coordinator
from tests.nodes.flow import (
    FAILOVER_S,
    HOLD_S,
    HUNG_PRODUCER_S,
    RESTART_S,
    Flow,
    make_flow,
    run_through,
)

WHOLE_STALL_BOUND_S = 10.0

# What is killed: (cluster, which node of it, whether the whole destination must keep moving).
VICTIMS: dict[str, tuple[str, Callable[[Flow, LocalCluster], int], bool]] = {
    "source partition leader": (
        "source",
        lambda flow, cluster: leader_of(cluster.bootstrap_servers, flow.topic, 0),
        True,
    ),
    "stage 1 group coordinator": (
        "source",
        lambda flow, cluster: group_coordinator(
            cluster.bootstrap_servers, flow.names.replicator_group
        ),
        True,
    ),
    "staging partition leader": (
        "target",
        lambda flow, cluster: leader_of(cluster.bootstrap_servers, flow.names.staging, 0),
        False,
    ),
    "destination partition leader": (
        "target",
        lambda flow, cluster: leader_of(cluster.bootstrap_servers, flow.topic, 0),
        False,
    ),
    "stage 2 transaction coordinator": (
        "target",
        lambda flow, cluster: transaction_coordinator(
            cluster.bootstrap_servers, flow.transactional_id
        ),
        False,
    ),
    "stage 2 group coordinator": (
        "target",
        lambda flow, cluster: group_coordinator(
            cluster.bootstrap_servers, flow.names.deduplicator_group
        ),
        False,
    ),
}


@pytest.mark.parametrize("victim", list(VICTIMS))
def test_a_node_killed_for_what_it_leads(three_nodes, roles, unique_topic, tmp_path, victim):
    side, which, others_flow = VICTIMS[victim]
    flow = make_flow(three_nodes, unique_topic, tmp_path)
    cluster = three_nodes[side]

    def kill_and_restart() -> None:
        node = which(flow, cluster)
        cluster.kill_node(node)
        time.sleep(HOLD_S)
        cluster.start_node(node, tie_to_parent=True, ready_timeout_s=RESTART_S)

    stall, _ = run_through(flow, roles, kill_and_restart, label=f"SIGKILL {side} {victim}")
    if others_flow:
        # The dead node's own partitions move once the controllers fence it.
        assert stall.partition_s <= FAILOVER_S, stall
        # The partitions it did not lead go on (issue 31's target is 5 s; measured here 2.9-5.3
        # s on a loaded machine, where the 28-39 s of a blocking discovery would fail this).
        assert stall.whole_s <= WHOLE_STALL_BOUND_S, stall
    else:
        # One transaction spans every partition stage 2 writes: it waits for the new leader or
        # coordinator, and for a producer librdkafka left hanging to be replaced (7.4-29.3 s
        # measured here; issue 31's target, session + 5 s, is not met on the target side).
        assert stall.partition_s <= FAILOVER_S + HUNG_PRODUCER_S, stall
        assert stall.whole_s <= FAILOVER_S + HUNG_PRODUCER_S, stall

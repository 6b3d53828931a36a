"""One node cut off from the roles by the network while it stays alive and in its cluster (a
toxiproxy black hole: connections stay open, nothing passes), then reconnected: the node keeps
leading what it led, so its partitions wait for the network; nothing is lost or duplicated, no
role exits, and the flow resumes soon after the network heals (issue 31). A black hole shorter
than the clients' request timeouts refuses no connection: the roles log no broker out of reach,
only the stall shows it."""

from __future__ import annotations

import time

import pytest

from localkafka import LocalCluster
from localkafka.replicas import group_coordinator, leader_of
from tests.nodes.flow import ROLES_LISTENER, STALLS, make_flow, run_through

CUT_S = 20.0
# How soon after the network heals partition 0 must move again: librdkafka notices a
# connection that lost data by its request timeout (the role's clients: 30 s at most).
RESUME_BOUND_S = 40.0


def _through_proxies(cluster: LocalCluster) -> str:
    ports = cluster.proxied_endpoints(ROLES_LISTENER).values()
    return ",".join(f"127.0.0.1:{via_proxy}" for _, via_proxy in ports)


@pytest.mark.parametrize(
    ("side", "which"),
    [
        ("source", "partition leader"),
        ("target", "partition leader"),
        # Every call of stage 2's commit that needs its group coordinator then hangs until its
        # request fails, and each replacement producer meets the same coordinator: stage 2 once
        # exited after its third hang, while the cut lasted (deduplicator/limits.py).
        ("target", "stage 2 group coordinator"),
    ],
)
def test_a_node_cut_off_from_the_roles(
    three_nodes, network, roles, unique_topic, tmp_path, side, which
):
    flow = make_flow(
        three_nodes,
        unique_topic,
        tmp_path,
        KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS=_through_proxies(three_nodes["source"]),
        KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS=_through_proxies(three_nodes["target"]),
    )
    cluster = three_nodes[side]
    healed: list[float] = []

    def cut_off_and_reconnect() -> None:
        if which == "partition leader":
            node = leader_of(cluster.bootstrap_servers, flow.topic, 0)
        else:
            node = group_coordinator(cluster.bootstrap_servers, flow.names.deduplicator_group)
        link = f"{side}.node{node}"
        network.break_link(link, "blackhole")
        try:
            time.sleep(CUT_S)
        finally:
            network.heal_link(link)
            assert not network.await_healed(60)
        healed.append(time.monotonic())

    _, watch = run_through(
        flow,
        roles,
        cut_off_and_reconnect,
        label=f"{side} node ({which}) cut off for {CUT_S:.0f} s",
        settle_s=RESUME_BOUND_S + 5,
    )
    # Partition 0's longest gap from the heal on: the first arrival once it heals.
    resumed = watch.stall(healed[0], healed[0] + RESUME_BOUND_S + 5, 0).partition_s
    STALLS.append(f"  partition 0 moved again {resumed:.1f} s after the network healed")
    assert resumed <= RESUME_BOUND_S, resumed

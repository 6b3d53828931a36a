"""Every node of the source, then of the target, restarted one at a time as an upgrade does
(the next once every replica is in sync again), under traffic: nothing lost or duplicated, no
role exits, and each node's restart stalls the destination only briefly (issue 31)."""

from __future__ import annotations

import time

import pytest

from tests.nodes.flow import (
    FAILOVER_S,
    HOLD_S,
    HUNG_PRODUCER_S,
    RESTART_S,
    STALLS,
    make_flow,
    run_through,
)


@pytest.mark.timeout(1800)  # six restarts, each waiting for every replica to be in sync
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_rolling_restart_of_both_clusters(three_nodes, roles, unique_topic, tmp_path, how):
    flow = make_flow(three_nodes, unique_topic, tmp_path)
    windows: list[tuple[str, float, float]] = []

    def roll() -> None:
        for side in ("source", "target"):
            cluster = three_nodes[side]
            for node in sorted(cluster.nodes):
                started = time.monotonic()
                cluster.restart_node(
                    node,
                    crash=how == "SIGKILL",
                    down_s=HOLD_S,
                    ready_timeout_s=RESTART_S,
                    tie_to_parent=True,
                )
                windows.append((f"{side} node {node}", started, time.monotonic()))

    _, watch = run_through(flow, roles, roll, label=f"rolling restart ({how}), source then target")
    stalls = {name: watch.stall(since, until, 0).whole_s for name, since, until in windows}
    STALLS.append(
        f"  per node ({how}): " + ", ".join(f"{name} {s:.1f} s" for name, s in stalls.items())
    )
    for name, stall in stalls.items():
        if name.startswith("source") and how == "SIGTERM":
            # Leadership handed over before the node stops: stage 1 barely notices (1.0-4.9 s
            # measured; issue 31's target of 2 s per node is not met on this machine).
            assert stall <= 10.0, stalls
        else:
            # A target node's coordinators move even on a controlled shutdown: the offsets of
            # stage 2's group reloaded for up to 7.6 s, and librdkafka left send_offsets hanging
            # in about one target restart in two (flow.py). Measured per target node: 2.7-19.7
            # s on a controlled shutdown, 12.1-31.8 s on SIGKILL.
            assert stall <= FAILOVER_S + HUNG_PRODUCER_S, stalls

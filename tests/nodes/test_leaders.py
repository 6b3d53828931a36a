"""Every partition of the flow handed to another leader at once under traffic, as an
operator's reassignment and preferred leader election do (no node dies; the old leader hands
over): nothing lost or duplicated, no role exits, and the destination barely pauses (issue 31)."""

from __future__ import annotations

import time

import pytest

from localkafka.replicas import move_leaders
from tests.nodes.flow import STALLS, make_flow, run_through

# A handover needs no session to time out: the clients learn the new leader from the old one's
# NOT_LEADER answer and a metadata refresh, which may cost the transaction in flight one retry
# and the next one its wait for the first's markers: about one more transaction cycle (the
# longest gap with the move in it was 2.2-4.6 s here, 1.2-3.6 s before it).
HANDOVER_EXTRA_S = 4.0
# The flow's ordinary cadence, measured just before the handover: on three nodes every
# replicated write answers in 0.2-0.75 s here (six JVMs on two cores), so stage 2's transaction
# cycle alone leaves gaps of 1.2-3.6 s, and one handover run measured 5.06 s in all. A bound
# without it measured the machine's load, not the handover.
STEADY_S = 10.0


@pytest.mark.parametrize("side", ["source", "target"])
def test_leaders_move_during_the_copy(three_nodes, roles, unique_topic, tmp_path, side):
    flow = make_flow(three_nodes, unique_topic, tmp_path)
    cluster = three_nodes[side]
    topics = [flow.topic, flow.transactional_topic]
    if side == "target":
        topics += [flow.names.staging, flow.names.changelog]
    moved: dict[tuple[str, int], int] = {}
    marks: list[float] = []

    def move() -> None:
        marks.append(time.monotonic())
        time.sleep(STEADY_S)
        marks.append(time.monotonic())
        moved.update(move_leaders(cluster.bootstrap_servers, topics))

    label = f"every {side} leader of the flow moved"
    stall, watch = run_through(flow, roles, move, label=label)
    assert len(moved) > len(topics), moved
    steady_at, moving_at = marks
    ordinary = watch.stall(steady_at, moving_at, 0).whole_s
    STALLS.append(f"  its longest gap before the move {ordinary:.1f} s")
    # The whole window, the steady part with it: a gap that began just before the move (the
    # reassignment tool's JVM starting) counts whole, not cut in two at the move's start.
    assert stall.whole_s <= ordinary + HANDOVER_EXTRA_S, (stall, ordinary)

"""Every partition of the flow handed to another leader at once under traffic, as an
operator's reassignment and preferred leader election do (no node dies; the old leader hands
over): nothing lost or duplicated, no role exits, and the destination barely pauses (issue 31)."""

from __future__ import annotations

import pytest

from localkafka.replicas import move_leaders
from tests.nodes.flow import make_flow, run_through

# A handover needs no session to time out: the clients learn the new leader from the old one's
# NOT_LEADER answer and a metadata refresh.
HANDOVER_STALL_BOUND_S = 5.0


@pytest.mark.parametrize("side", ["source", "target"])
def test_leaders_move_during_the_copy(three_nodes, roles, unique_topic, tmp_path, side):
    flow = make_flow(three_nodes, unique_topic, tmp_path)
    cluster = three_nodes[side]
    topics = [flow.topic, flow.transactional_topic]
    if side == "target":
        topics += [flow.names.staging, flow.names.changelog]
    moved: dict[tuple[str, int], int] = {}

    def move() -> None:
        moved.update(move_leaders(cluster.bootstrap_servers, topics))

    stall, _ = run_through(flow, roles, move, label=f"every {side} leader of the flow moved")
    assert len(moved) > len(topics), moved
    assert stall.whole_s <= HANDOVER_STALL_BOUND_S, stall

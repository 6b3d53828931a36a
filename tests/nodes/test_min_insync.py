"""Two of the target's three nodes down at once: fewer replicas than min.insync.replicas, so
Kafka refuses every write. The flow stalls, says so, and resumes when they return, losing and
duplicating nothing; no role exits (issue 31)."""

from __future__ import annotations

import contextlib
import threading
import time

from localkafka.scrape import scrape, total
from tests.nodes.flow import RESTART_S, make_flow, run_through
from tests.replication.scrape import free_port

DOWN_S = 20.0


def test_target_below_min_insync_stalls_and_resumes(three_nodes, roles, unique_topic, tmp_path):
    flow = make_flow(three_nodes, unique_topic, tmp_path)
    target = three_nodes["target"]
    port = free_port()
    unreachable: list[float] = []

    def two_down() -> None:
        first, second = sorted(target.nodes)[:2]
        stop = threading.Event()

        def sample() -> None:  # what an operator's scraper sees, once a second
            while not stop.wait(1.0):
                with contextlib.suppress(OSError):
                    unreachable.append(total(scrape(port), "exactly_broker_unreachable_seconds"))

        # From the first node's stop until both are back: a client notices a node gone only
        # when it next needs it (one run's DOWN_S went by with no failed connection yet).
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            target.stop_node(first)
            target.kill_node(second)
            time.sleep(DOWN_S)
            target.start_node(second, tie_to_parent=True, in_sync=False, ready_timeout_s=RESTART_S)
            target.start_node(first, tie_to_parent=True, ready_timeout_s=RESTART_S)
        finally:
            stop.set()
            sampler.join(10)

    stall, _ = run_through(
        flow,
        roles,
        two_down,
        label="two target nodes down for 20 s",
        deduplicator_env={"METRICS_PORT": str(port)},
    )
    # Nothing can be written while they are down; it all arrives once they are back.
    assert stall.whole_s >= DOWN_S / 2, stall
    assert max(unreachable, default=0.0) > 0, "stage 2's metrics showed no broker out of reach"

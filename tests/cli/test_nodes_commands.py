"""`exactly kafka up`, `exactly demo` and `exactly chaos` with `--nodes 3`, as a user types them
(issue 31): three replicating nodes a cluster, a node killed and restarted on its own, the demo
and a short chaos run exactly once by both verdicts, nothing left running.

Marked `nodes`: each command makes clusters of its own (three JVMs a cluster), so `make
test-nodes` runs this file in a pytest run of its own, never beside tests/nodes' shared
clusters."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.chaos.test_chaos_run import run_clean
from tests.cli.test_demo import AUDIT_LINE, VERDICT_LINE, _survivors
from tests.commands import run_exactly
from tests.kafka_helpers import await_partitions

pytestmark = [pytest.mark.nodes, pytest.mark.kafka]

_RUNNING = re.compile(r"^source: running \(node 1 pid \d+, node 2 pid \d+, node 3 pid \d+\)", re.M)
_EXPORT = re.compile(r"^export KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS=(\S+)$", re.M)


def _env(tmp_path: Path) -> dict[str, str]:
    # A state directory of its own: apart from the suite's clusters and from any `exactly kafka
    # up` of the person running the tests.
    return {**os.environ, "LOCALKAFKA_STATE_DIR": str(tmp_path / "state")}


def test_kafka_up_with_three_nodes_replicates_and_a_node_restarts_alone(tmp_path):
    env = _env(tmp_path)
    try:
        up = run_exactly("kafka", "up", "source", "--nodes", "3", env=env, timeout_s=300)
        assert up.returncode == 0, up.stdout + up.stderr
        assert _RUNNING.search(up.stdout), up.stdout
        exported = _EXPORT.search(up.stdout)
        assert exported, up.stdout
        bootstrap = exported.group(1)
        assert len(bootstrap.split(",")) == 3, bootstrap

        # A topic made without a replication factor, as the product's and a user's are.
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("replicated", 3)])["replicated"].result(60)
        # The broker that answers may not know the new topic's partitions yet (CI once listed
        # none, a moment after the create).
        await_partitions(admin, "replicated", 3)
        partitions = admin.list_topics("replicated", timeout=30).topics["replicated"].partitions
        assert sorted(len(p.replicas) for p in partitions.values()) == [3, 3, 3], partitions
        config = admin.describe_configs([ConfigResource("topic", "replicated")])
        (entries,) = [future.result(30) for future in config.values()]
        assert entries["min.insync.replicas"].value == "2"
        assert entries["unclean.leader.election.enable"].value == "false"
        del admin  # its connections go before the nodes do

        killed = run_exactly("kafka", "kill", "source", "--node", "2", env=env)
        assert killed.returncode == 0, killed.stdout + killed.stderr
        assert "source: killed node 2" in killed.stdout
        degraded = run_exactly("kafka", "status", "source", env=env)
        assert degraded.returncode == 1, degraded.stdout  # not every node runs
        assert "source: degraded (only the node 1, node 3 run)" in degraded.stdout

        restarted = run_exactly("kafka", "restart", "source", "--node", "2", env=env, timeout_s=300)
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        assert _RUNNING.search(restarted.stdout), restarted.stdout
        assert run_exactly("kafka", "status", "source", env=env).returncode == 0
    finally:
        down = run_exactly("kafka", "down", env=env, timeout_s=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "source: stopped" in down.stdout
    assert _survivors(tmp_path) == []


@pytest.mark.timeout(900)  # beyond the command's own 600 s: a hung demo is killed by that first
def test_the_demo_on_three_nodes_survives_a_target_node_killed_and_is_exactly_once(tmp_path):
    result = run_exactly("demo", "--nodes", "3", "--duration", "20", env=_env(tmp_path),
                         timeout_s=600)  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert re.search(r"killed target node \d \(leader of \S+\[0\]\) with SIGKILL", output), output
    assert "restarted the target's stopped node" in output
    verdict = VERDICT_LINE.search(result.stdout)
    assert verdict, output
    audited = AUDIT_LINE.search(output)
    assert audited, output
    assert audited.group(1) == audited.group(2) == verdict.group(1)
    assert re.search(r"^FAILOVER EXACT: demo-app resumed on the target", output, re.M), output
    assert "nothing left running" in output
    assert "Traceback" not in output
    assert _survivors(tmp_path) == []


# Also marked chaos: `make chaos` runs it, by hand, and `make test-nodes` (CI) leaves it out. Its
# three to four minutes did not fit in CI's 90 beside the rest (109 minutes on a slow day);
# test-slow's two-minute run keeps `exactly chaos` itself in CI, on clusters of one node.
@pytest.mark.chaos
@pytest.mark.timeout(1200)  # beyond run_clean's own 900 s
def test_a_short_chaos_run_on_three_nodes_picks_single_nodes_and_ends_exactly_once(tmp_path):
    report = run_clean(
        tmp_path,
        *("--nodes", "3", "--minutes", "2", "--faults", "12", "--rate", "500", "--seed", "7"),
    )
    assert report["nodes_per_cluster"] == 3
    verdict = report["verdict"]
    assert (verdict["missing"], verdict["duplicated"], verdict["changed"]) == (0, 0, 0)
    assert verdict["matched"] == verdict["source"] > 0
    assert report["validate"]["exit_status"] == 0, report["validate"]
    # On clusters of three, a broker fault takes one node, never the whole cluster.
    node_faults = [f for f in report["fault_timeline"] if f["kind"] in ("broker", "controller")]
    assert node_faults, report["fault_timeline"]
    assert all(f.get("node") in (1, 2, 3) for f in node_faults), node_faults
    assert _survivors(tmp_path) == []

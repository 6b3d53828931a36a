"""REPLICATION_WORKERS: one container runs a stage as several processes, each a group member
with an identity and a state directory of its own, supervised like `exactly run`'s roles."""

from __future__ import annotations

import os
import signal
import time
import uuid

from exactly.supervise import plan, roles_of
from localkafka import free_port_block
from runtime import load_settings
from tests.kafka_helpers import produce_numbered
from tests.replication.processes import role_processes
from tests.replication.scrape import await_metric, await_total, sample, scrape, total
from tests.replication.staging import read_source
from tests.replication.test_deduplicator import (
    _await_destination,
    _traffic_flow,
    assert_exactly_once,
)

BASE = {
    "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "127.0.0.1:1",
    "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "127.0.0.1:2",
    "REPLICATION_TOPICS_INCLUDE": "orders",
    "REPLICATION_INSTANCE_ID": "pod-0",
    "STATE_DIR": "/data/state",
}


def test_without_workers_each_role_is_one_child_on_the_ports_exactly_run_always_used():
    settings = load_settings({**BASE, "METRICS_PORT": "9400", "OFFSETSYNC_GROUPS_INCLUDE": "a.*"})
    plans = plan(settings, roles_of(settings))
    assert [(p.name, p.role, p.metrics_port) for p in plans] == [
        ("replicator", "replicator", 9401),
        ("deduplicator", "deduplicator", 9402),
        ("offsetsync", "offsetsync", 9403),
    ]
    assert all(p.env == {"METRICS_PORT": str(p.metrics_port)} for p in plans)


def test_workers_have_their_own_identity_state_directory_and_port():
    settings = load_settings({**BASE, "METRICS_PORT": "9400", "REPLICATION_WORKERS": "3"})
    plans = plan(settings, ["deduplicator"])
    assert [p.name for p in plans] == ["deduplicator-1", "deduplicator-2", "deduplicator-3"]
    assert {p.role for p in plans} == {"deduplicator"}
    assert [p.env for p in plans] == [
        {
            "METRICS_PORT": str(9400 + n),
            "REPLICATION_WORKERS": "1",
            "REPLICATION_INSTANCE_ID": f"pod-0-{n}",
            "STATE_DIR": f"/data/state/worker-{n}",
        }
        for n in (1, 2, 3)
    ]
    # exactly run: both stages as workers, offset sync once; no metrics port, none for any.
    settings = load_settings(
        {
            **BASE,
            "REPLICATION_WORKERS": "2",
            "OFFSETSYNC_GROUPS_INCLUDE": "a.*",
            "METRICS_PORT": "0",
        }
    )
    plans = plan(settings, roles_of(settings))
    assert [p.name for p in plans] == [
        "replicator-1",
        "replicator-2",
        "deduplicator-1",
        "deduplicator-2",
        "offsetsync",
    ]
    assert {p.metrics_port for p in plans} == {0}
    assert plans[-1].env == {"METRICS_PORT": "0"}


def _assigned_once_settled(ports: list[int], metric: str, partitions: int) -> list[float]:
    """Each worker's assigned partitions, once every worker has some (the later one joins a
    group the earlier one already holds) or a minute has passed."""
    deadline = time.monotonic() + 60
    while True:
        assigned = [sample(scrape(port), metric) or 0 for port in ports]
        if (min(assigned) > 0 and sum(assigned) == partitions) or time.monotonic() > deadline:
            return assigned
        time.sleep(0.2)


def test_a_stage_run_as_module_refuses_to_be_one_worker_of_several(tmp_path):
    env = {**BASE, "REPLICATION_WORKERS": "2", "METRICS_PORT": "0"}
    with role_processes(tmp_path) as processes:
        stage = processes.start("deduplicator", env)
        assert stage.wait(60) == 2
    assert (
        "exactly deduplicator: configuration error: REPLICATION_WORKERS=2: `python -m "
        "deduplicator` is one worker; `exactly deduplicator` or `exactly run` starts 2"
    ) in stage.log_text()


def test_two_workers_of_each_stage_share_the_partitions_and_copy_exactly_once_through_a_crash(
    source_cluster, target_cluster, tmp_path, unique_topic
):
    topic = unique_topic("orders")
    env = _traffic_flow(source_cluster, target_cluster, tmp_path, unique_topic, {topic: 6})
    stage1_port, stage2_port = free_port_block(3), free_port_block(3)
    env["REPLICATION_WORKERS"] = "2"
    env["REPLICATION_INSTANCE_ID"] = f"pod-{uuid.uuid4().hex[:6]}"
    produce_numbered(source_cluster.bootstrap_servers, topic, 6, 0, 600)
    with role_processes(tmp_path) as processes:
        stage1 = processes.start(
            "exactly", {**env, "METRICS_PORT": str(stage1_port)}, args=("replicator",)
        )
        stage2 = processes.start(
            "exactly",
            {**env, "METRICS_PORT": str(stage2_port)},
            args=("deduplicator",),
            name="deduplicators",
        )
        started = stage2.wait_for_log(r"role started.*child=deduplicator-2.*pid=(\d+)", 60)
        stage1.wait_for_log("role started.*child=replicator-2", 60)
        source = read_source(source_cluster.bootstrap_servers, [topic])
        assert_exactly_once(source_cluster, source, _await_destination(target_cluster, source))
        # Both workers of each stage are members: each serves its own metrics after the
        # supervisor's port and holds its share of the partitions (the second to start joins a
        # group the first already holds, so the first may have copied everything so far).
        stage1_ports, stage2_ports = (
            [port + n for n in (1, 2)] for port in (stage1_port, stage2_port)
        )
        replicators = "exactly_replicator_assigned_partitions"
        assert _assigned_once_settled(stage1_ports, replicators, 6) == [3, 3]
        deduplicators = "exactly_deduplicator_assigned_partitions"
        assert _assigned_once_settled(stage2_ports, deduplicators, 12) == [6, 6]
        written = "exactly_deduplicator_records_written_total"
        assert await_total(tuple(stage2_ports), written, 600) == 600
        copied = [total(scrape(port), "exactly_replicator_records_total") for port in stage1_ports]

        # A crash of one worker: started again by its supervisor; nothing lost or duplicated.
        os.kill(int(started.group(1)), signal.SIGKILL)
        stage2.wait_for_log("role exited; starting again.*child=deduplicator-2.*exit_status=-9")
        await_metric(stage2_port, "exactly_run_role_restarts_total", 1, role="deduplicator-2")
        produce_numbered(source_cluster.bootstrap_servers, topic, 6, 600, 600)
        source = read_source(source_cluster.bootstrap_servers, [topic])
        assert_exactly_once(source_cluster, source, _await_destination(target_cluster, source))
        assert sample(scrape(stage2_port), "exactly_run_role_up", role="deduplicator-2") == 1
        # The new records of all 6 source partitions went through both stage-1 workers.
        copied_since = [
            total(scrape(port), "exactly_replicator_records_total") - before
            for port, before in zip(stage1_ports, copied, strict=True)
        ]
        assert sum(copied_since) >= 600
        assert min(copied_since) > 0, copied_since

        # SIGTERM drains every worker, and each supervisor exits 0.
        assert stage1.terminate(90) == 0
        assert stage2.terminate(90) == 0
    for name in ("deduplicator-1", "deduplicator-2"):
        assert f'role drained" child={name}' in stage2.log_text()
    identities = {f"{env['REPLICATION_INSTANCE_ID']}-{n}" for n in (1, 2)}
    for identity in identities:
        assert f"identity={identity}" in stage2.log_text()

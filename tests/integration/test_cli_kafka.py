"""`exactly kafka up|status|kill|restart|down` from a shell, as the README documents it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from confluent_kafka.admin import AdminClient

from tests.commands import run_exactly


def _running_pids(state_dir: Path) -> dict[str, int]:
    pids = {}
    for pid_file in state_dir.glob("*/*/pid"):
        pid = int(pid_file.read_text())
        if _alive(pid):
            pids[f"{pid_file.parent.parent.name}/{pid_file.parent.name}"] = pid
    return pids


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status


def test_up_status_kill_restart_down_leave_no_process(tmp_path):
    env = {**os.environ, "LOCALKAFKA_STATE_DIR": str(tmp_path / "clusters")}
    up = run_exactly("kafka", "up", env=env)
    try:
        assert up.returncode == 0, up.stderr
        bootstraps = dict(
            re.findall(r"^(source|target): running .* bootstrap=(\S+)", up.stdout, re.M)
        )
        assert set(bootstraps) == {"source", "target"}
        assert f"export KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS={bootstraps['source']}" in up.stdout
        cluster_ids = {
            name: AdminClient({"bootstrap.servers": b}).list_topics(timeout=10).cluster_id
            for name, b in bootstraps.items()
        }
        assert cluster_ids["source"] != cluster_ids["target"]
        pids = _running_pids(tmp_path / "clusters")
        assert set(pids) == {
            "source/broker",
            "source/controller",
            "target/broker",
            "target/controller",
        }

        status = run_exactly("kafka", "status", env=env)
        assert status.returncode == 0, status.stderr
        assert status.stdout.count(": running (broker pid") == 2

        killed = run_exactly("kafka", "kill", "target", env=env)
        assert killed.returncode == 0, killed.stderr
        assert not _alive(pids["target/broker"])
        assert _alive(pids["target/controller"])
        status = run_exactly("kafka", "status", env=env)
        assert status.returncode == 1
        assert "target: degraded (only the controller runs" in status.stdout

        restarted = run_exactly("kafka", "restart", "target", env=env)
        assert restarted.returncode == 0, restarted.stderr
        assert f"bootstrap={bootstraps['target']}" in restarted.stdout
        restarted_ids = AdminClient({"bootstrap.servers": bootstraps["target"]}).list_topics(
            timeout=10
        )
        assert restarted_ids.cluster_id == cluster_ids["target"]
    finally:
        down = run_exactly("kafka", "down", env=env)
    assert down.returncode == 0, down.stderr
    assert "source: stopped" in down.stdout
    assert "target: stopped" in down.stdout
    assert _running_pids(tmp_path / "clusters") == {}
    assert run_exactly("kafka", "status", env=env).returncode == 1


def test_status_names_an_unknown_cluster(tmp_path):
    env = {**os.environ, "LOCALKAFKA_STATE_DIR": str(tmp_path / "clusters")}
    result = run_exactly("kafka", "status", "nosuch", env=env)
    assert result.returncode == 1
    assert "no cluster in" in result.stderr
    assert "nosuch" in result.stderr
    assert "Traceback" not in result.stderr

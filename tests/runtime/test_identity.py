"""The instance identity and its host-local claim (runtime/identity.py), without Kafka."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from runtime.errors import IdentityTakenError
from runtime.identity import IdentityClaim, host_identity
from runtime.settings import load_settings
from runtime.values import check_flow_name

_HOLD = """
import sys, time
from pathlib import Path
from runtime.identity import IdentityClaim
IdentityClaim("flow", "replicator", "me", Path(sys.argv[1]))
print("held", flush=True)
time.sleep(60)
"""


def test_the_host_name_is_the_default_identity_and_a_valid_client_id(monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "pod 0/ünïcode.example")
    assert host_identity() == "pod-0-n-code.example"
    assert check_flow_name(host_identity())
    monkeypatch.setattr("socket.gethostname", lambda: "x" * 300)
    assert host_identity() == "x" * 100


def test_settings_take_the_host_name_unless_an_instance_id_is_given(monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "worker-7")
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": "a:9092",
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": "b:9092",
        "REPLICATION_TOPICS_INCLUDE": "t",
    }
    assert load_settings(env).identity == "worker-7"
    assert load_settings({**env, "REPLICATION_INSTANCE_ID": "pod-1"}).identity == "pod-1"


def test_a_second_claim_names_the_holder_and_a_closed_one_is_free_again(tmp_path):
    first = IdentityClaim("flow", "replicator", "me", tmp_path)
    with pytest.raises(IdentityTakenError) as taken:
        IdentityClaim("flow", "replicator", "me", tmp_path)
    message = str(taken.value)
    assert message.startswith("REPLICATION_INSTANCE_ID='me': another replicator of flow 'flow'")
    assert "(pid " in message
    assert "give each instance its own" in message
    # Another role, flow or identity is another claim.
    for other in (("flow", "deduplicator", "me"), ("other", "replicator", "me")):
        IdentityClaim(*other, tmp_path).close()
    IdentityClaim("flow", "replicator", "you", tmp_path).close()
    first.close()
    IdentityClaim("flow", "replicator", "me", tmp_path).close()


def test_a_sigkilled_holders_claim_is_free_at_once(tmp_path):
    with subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline() == "held\n"
            with pytest.raises(IdentityTakenError, match=rf"\(pid {holder.pid}\)"):
                IdentityClaim("flow", "replicator", "me", tmp_path)
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait(10)
    IdentityClaim("flow", "replicator", "me", tmp_path).close()


def test_no_claim_and_no_failure_where_nothing_can_be_written(tmp_path):
    read_only = tmp_path / "read-only"
    read_only.mkdir(mode=0o500)
    claim = IdentityClaim("flow", "replicator", "me", read_only / "missing")
    assert claim.skipped is not None
    assert "no writable temporary directory" in claim.skipped
    claim.close()

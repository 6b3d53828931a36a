"""docker-compose.yml and k8s/ checked without a Docker engine or a Kubernetes cluster (issue 14):
each file against its schema, strictly, and the environment each gives a role run as a plain
process against the local clusters: it starts, becomes ready and copies exactly once, so the
deployed configuration cannot drift from the settings contract. The manifests' own checks, rendered
with kustomize: test_kubernetes.py."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from runtime.http import Health, serve_http
from tests.deploy.deployed import (
    COMPOSE_FILE,
    ROLES,
    compose_environment,
    compose_service,
    healthcheck_argv,
    kubernetes_environment,
    load_yaml_documents,
)
from tests.deploy.dockerfile import stage_instructions
from tests.kafka_helpers import create_topic, produce_numbered
from tests.replication.processes import role_processes
from tests.replication.scrape import free_port
from tests.replication.staging import read_source
from tests.replication.test_deduplicator import _await_destination, assert_exactly_once

_BIN = Path(sys.executable).parent


def test_the_compose_file_passes_the_compose_specification(tmp_path):
    # The schema validator does not resolve YAML merge keys: validate the file as compose reads
    # it (anchors merged), or a typo inside an anchor would go unseen.
    (compose,) = load_yaml_documents(COMPOSE_FILE)
    resolved = tmp_path / "docker-compose.json"
    resolved.write_text(json.dumps(compose))
    done = subprocess.run(
        [_BIN / "check-jsonschema", "--builtin-schema", "vendor.compose-spec", resolved],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(ROLES) <= set(compose["services"])
    assert compose["services"]["validator"]["profiles"] == ["validate"]
    (volume,) = compose["services"]["deduplicator"]["volumes"]
    assert volume.split(":")[0] in compose["volumes"]  # a named volume, not a container's disk


def _local(env: dict[str, str], clusters, names: dict[str, str]) -> dict[str, str]:
    """The deployed environment with what differs here replaced, and only that: the clusters'
    addresses, names unique to this test (topic, flow, groups), a free metrics port, a state
    directory of the test's own."""
    local = dict(env)
    replaced = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": clusters[0].bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": clusters[1].bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": re.escape(names["topic"]),
        "REPLICATION_FLOW": names["flow"],
        "OFFSETSYNC_GROUPS_INCLUDE": names["groups"],
        "METRICS_PORT": str(free_port()),
    }
    for name, value in replaced.items():
        assert name in env, f"the deployed environment has no {name}"
        local[name] = value
    if "STATE_DIR" in env:
        local["STATE_DIR"] = names["state"]
    return local


def _await_ready(port: str, process) -> None:
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        assert process.is_running(), process.log_tail()
        assert time.monotonic() < deadline, process.log_tail()
        time.sleep(0.3)


def _flow_names(what: str, tmp_path: Path) -> dict[str, str]:
    """Names of a test flow of its own: topic, flow, offset sync's groups, state directory."""
    return {
        "topic": f"deployed.{what}.{uuid.uuid4().hex[:8]}",
        "flow": f"deployed-{what}-{uuid.uuid4().hex[:8]}",
        "groups": f"g{uuid.uuid4().hex[:8]}.*",
        "state": str(tmp_path / "state"),
    }


@pytest.mark.parametrize("where", ["compose", "kubernetes"])
def test_the_deployed_environment_of_every_role_copies_exactly_once(
    where, source_cluster, target_cluster, tmp_path
):
    names = _flow_names(where, tmp_path)
    create_topic(source_cluster.bootstrap_servers, names["topic"], 3)
    produce_numbered(source_cluster.bootstrap_servers, names["topic"], 3, 0, 300)
    deployed = compose_environment if where == "compose" else kubernetes_environment
    with role_processes(tmp_path) as processes:
        started = {}
        for role in ROLES:
            env = _local(deployed(role), (source_cluster, target_cluster), names)
            started[role] = (processes.start(role, env), env["METRICS_PORT"])
        for process, port in started.values():
            _await_ready(port, process)
        source = read_source(source_cluster.bootstrap_servers, [names["topic"]])
        assert_exactly_once(source_cluster, source, _await_destination(target_cluster, source))
        for role, (process, _port) in started.items():
            assert process.terminate(90) == 0, (role, process.log_tail())


# What the apache/kafka image formats its storage with when CLUSTER_ID is not set
# (/etc/kafka/docker/configure): the id both compose clusters would otherwise share.
_KAFKA_IMAGE_DEFAULT_CLUSTER_ID = "5L6g3nShT-eMCtK--X86sw"


def test_each_compose_cluster_has_a_valid_cluster_id_of_its_own():
    ids = {
        name: str(compose_service(name)["environment"].get("CLUSTER_ID", ""))
        for name in ("source-kafka", "target-kafka")
    }
    assert ids["source-kafka"] != ids["target-kafka"], ids
    for name, cluster_id in ids.items():
        # Kafka's Uuid.fromString: 22 characters of base64url without padding, 16 bytes; and
        # not starting with "-", which Kafka's own random ids avoid (a command line reads it as
        # an option).
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id), (name, cluster_id)
        raw = base64.urlsafe_b64decode(cluster_id + "==")
        assert len(raw) == 16, (name, cluster_id)
        assert base64.urlsafe_b64encode(raw).rstrip(b"=").decode() == cluster_id, cluster_id
        assert not cluster_id.startswith("-"), (name, cluster_id)
        assert cluster_id != _KAFKA_IMAGE_DEFAULT_CLUSTER_ID, name


def _healthcheck(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The healthcheck as Docker runs it in the roles' container: the container's environment
    and the image's PATH, its virtual environment first (here the test's, which has the same
    packages)."""
    return subprocess.run(
        argv,
        env={**env, "PATH": f"{_BIN}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_compose_healthcheck_of_every_role_reflects_its_healthz(
    source_cluster, target_cluster, tmp_path
):
    checks = {r: healthcheck_argv(compose_service(r)["healthcheck"]["test"]) for r in ROLES}
    # One definition of health: the image's own HEALTHCHECK (for `docker run`) is the same.
    (image_check,) = [i for i in stage_instructions("exactly") if i.keyword == "HEALTHCHECK"]
    kind, _, words = image_check.arguments.partition(" ")
    assert kind == "CMD", image_check
    for role, argv in checks.items():
        assert argv == json.loads(words), role
        assert argv[0] == "python", argv  # the image has no curl; its venv has python
    names = _flow_names("health", tmp_path)
    create_topic(source_cluster.bootstrap_servers, names["topic"], 3)
    with role_processes(tmp_path) as processes:
        started = {}
        for role in ROLES:
            env = _local(compose_environment(role), (source_cluster, target_cluster), names)
            started[role] = (processes.start(role, env), env)
        for role, (process, env) in started.items():
            _await_ready(env["METRICS_PORT"], process)
            healthy = _healthcheck(checks[role], env)
            assert healthy.returncode == 0, (role, healthy.stderr)
        for role, (process, _env) in started.items():
            assert process.terminate(90) == 0, (role, process.log_tail())
        # Nothing on the port any more: refused, unhealthy.
        for role, (_process, env) in started.items():
            gone = _healthcheck(checks[role], env)
            assert gone.returncode == 1, (role, gone.stdout, gone.stderr)
            assert "Connection refused" in gone.stderr, gone.stderr
    # A process that answers but is not live (its /healthz says 503): unhealthy as well.
    health = Health()
    health.set_live(False, "the main loop is stuck")
    port = free_port()
    server = serve_http(port, registry=CollectorRegistry(), health=health, host="127.0.0.1")
    assert server is not None
    try:
        env = {**compose_environment("replicator"), "METRICS_PORT": str(port)}
        stuck = _healthcheck(checks["replicator"], env)
        assert stuck.returncode == 1, (stuck.stdout, stuck.stderr)
        assert "HTTP Error 503" in stuck.stderr, stuck.stderr
        health.set_live(True)
        assert _healthcheck(checks["replicator"], env).returncode == 0
    finally:
        server.close()

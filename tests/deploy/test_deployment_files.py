"""docker-compose.yml and k8s/ checked without a Docker engine or a Kubernetes cluster (issue 14):
each file against its schema, strictly, and the environment each gives a role run as a plain
process against the local clusters: it starts, becomes ready and copies exactly once, so the
deployed configuration cannot drift from the settings contract."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from runtime import load_settings
from tests.deploy.deployed import (
    COMPOSE_FILE,
    K8S_DIR,
    ROLES,
    compose_environment,
    kubernetes_environment,
    kubernetes_resources,
    kustomization_references,
    load_yaml_documents,
)
from tests.kafka_helpers import create_topic, produce_numbered
from tests.replication.processes import role_processes
from tests.replication.scrape import free_port
from tests.replication.staging import read_source
from tests.replication.test_deduplicator import _await_destination, assert_exactly_once

_BIN = Path(sys.executable).parent


def test_every_kubernetes_manifest_passes_strict_validation():
    files = sorted({path for path, _resource in kubernetes_resources()})
    assert {f.name for f in files} >= {
        "flow-config.yaml",
        "deduplicator.yaml",
        "replicator.yaml",
        "offsetsync.yaml",
        "disruption-budgets.yaml",
        "validator.yaml",
    }
    # --strict: a misspelled field is an error, not something Kubernetes silently drops.
    done = subprocess.run(
        [_BIN / "kubernetes-validate", "--strict", "--quiet", *files],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_stages_keep_their_identity_and_state_and_drain_before_they_are_killed():
    kinds = {(r["kind"], r["metadata"]["name"]): r for _p, r in kubernetes_resources()}
    statefulset = kinds[("StatefulSet", "exactly-deduplicator")]
    pod = statefulset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert kubernetes_environment("deduplicator")["REPLICATION_INSTANCE_ID"] == (
        "exactly-deduplicator-0"
    )
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    state_dir = kubernetes_environment("deduplicator")["STATE_DIR"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == claim["metadata"]["name"]]
    assert state_dir.startswith(mount["mountPath"] + "/")
    # Longer than the 60 s a drain may take (exactly.supervise.DRAIN_S, a role's own drain).
    assert pod["terminationGracePeriodSeconds"] > 60
    # Stage 1's pods keep their names too: a pod's name is its default identity (its static
    # group membership), so a rollout's new pod takes its partitions back at once.
    replicator = kinds[("StatefulSet", "exactly-replicator")]
    assert "REPLICATION_INSTANCE_ID" not in kubernetes_environment("replicator")
    assert replicator["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 60
    offsetsync = kinds[("Deployment", "exactly-offsetsync")]
    assert offsetsync["spec"]["replicas"] == 1
    assert offsetsync["spec"]["strategy"]["type"] == "Recreate"
    for job in (kinds[("Job", "exactly-validate")], kinds[("CronJob", "exactly-validate-hourly")]):
        spec = job["spec"] if job["kind"] == "Job" else job["spec"]["jobTemplate"]["spec"]
        assert spec["backoffLimit"] == 0  # exit 1 is a verdict, never retried


def _kustomize() -> Path | None:
    """kustomize as `make install` builds it (or one on PATH)."""
    cache = Path(os.environ.get("LOCALKAFKA_CACHE_DIR", Path.home() / ".cache/kafka-exactly"))
    built = sorted(cache.glob("tools/kustomize-*/kustomize"))
    found = built[-1] if built else shutil.which("kustomize")
    return Path(found) if found else None


def test_every_kustomization_renders_to_strictly_valid_manifests(tmp_path):
    kustomize = _kustomize()
    if kustomize is None:
        pytest.skip("no kustomize: `make install` builds it where a Go toolchain is")
    rendered = {}
    for directory in (K8S_DIR / "base", K8S_DIR / "overlays" / "example"):
        output = tmp_path / f"{directory.name}.yaml"
        done = subprocess.run(
            [kustomize, "build", directory], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        output.write_text(done.stdout)
        rendered[directory.name] = [d for d in yaml.safe_load_all(done.stdout) if d]
    done = subprocess.run(
        [_BIN / "kubernetes-validate", "--strict", "--quiet", *tmp_path.glob("*.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The overlay's patches reach every role: the credentials mounted, the images renamed.
    workloads = [r for r in rendered["example"] if r["kind"] in ("Deployment", "StatefulSet")]
    assert len(workloads) == len(ROLES)
    for workload in workloads:
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert "/etc/kafka-exactly/credentials" in mounts, workload["metadata"]["name"]
        assert container["image"].startswith("registry.example.com/kafka-exactly:")
    (deduplicator,) = [w for w in workloads if w["metadata"]["name"] == "exactly-deduplicator"]
    (container,) = deduplicator["spec"]["template"]["spec"]["containers"]
    assert "/var/lib/exactly" in {m["mountPath"] for m in container["volumeMounts"]}


def test_every_kustomization_names_files_that_exist():
    kustomizations = sorted(K8S_DIR.rglob("kustomization.yaml"))
    assert len(kustomizations) == 2
    for kustomization in kustomizations:
        for named in kustomization_references(kustomization):
            assert named.exists(), f"{kustomization} names {named}, which does not exist"


def test_the_example_overlays_configuration_loads(tmp_path):
    # The credentials its variables name, as the Secret mount would provide them: a password,
    # and a certificate with its key (librdkafka reads them when the settings are checked).
    overlay = K8S_DIR / "overlays" / "example"
    env = dict(
        line.split("=", 1)
        for line in (overlay / "flow.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    certificate, key = tmp_path / "certificate.pem", tmp_path / "key.pem"
    make_certificate = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    subprocess.run(
        [*make_certificate, "-subj", "/CN=test", "-keyout", key, "-out", certificate],
        check=True,
        capture_output=True,
        timeout=60,
    )
    mounted = {"source-password": "secret-from-the-mount\n", "target-client.key": key.read_text()}
    for name, value in list(env.items()):
        if value.startswith("/etc/kafka-exactly/credentials/"):
            local = tmp_path / Path(value).name
            local.write_text(mounted.get(local.name, certificate.read_text()))
            env[name] = str(local)
    settings = load_settings(env)
    assert settings.source.client_config()["security.protocol"] == "SASL_SSL"
    assert settings.source.client_config()["sasl.password"] == "secret-from-the-mount"
    assert settings.destination.client_config()["ssl.key.location"].endswith("target-client.key")
    assert settings.destination.client_config()["security.protocol"] == "SSL"


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


@pytest.mark.parametrize("where", ["compose", "kubernetes"])
def test_the_deployed_environment_of_every_role_copies_exactly_once(
    where, source_cluster, target_cluster, tmp_path
):
    names = {
        "topic": f"deployed.{where}.{uuid.uuid4().hex[:8]}",
        "flow": f"deployed-{where}-{uuid.uuid4().hex[:8]}",
        "groups": f"g{uuid.uuid4().hex[:8]}.*",
        "state": str(tmp_path / "state"),
    }
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

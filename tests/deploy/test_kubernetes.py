"""k8s/ as a user applies it, checked without a cluster (issues 14 and 32): every manifest strictly
valid; each kustomization rendered by kustomize, then read for what a cluster would make of it.
The credentials each pod is pointed at are mounted, and readable by the pod's user given the
modes and fsGroup the manifests set (read for real as that user, by the product's own settings
loader); a configuration change rolls every pod; the one-off audit is applied on demand, with the
flow's own settings; two flows share a namespace without selecting each other's pods."""

from __future__ import annotations

import base64
import copy
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime import load_settings
from tests.deploy.deployed import (
    K8S_DIR,
    ROLES,
    generated_config_maps,
    kubernetes_environment,
    kubernetes_resources,
    kustomization_references,
    kustomize_binary,
    kustomize_build,
    read_env_file,
)
from tests.replication.processes import REPOSITORY_ROOT

_BIN = Path(sys.executable).parent
BASE = K8S_DIR / "base"
EXAMPLE = K8S_DIR / "overlays" / "example"
VALIDATE_ONCE = EXAMPLE / "validate-once"
KUSTOMIZATIONS = (BASE, EXAMPLE, VALIDATE_ONCE)
NAME, INSTANCE, COMPONENT, VERSION = (
    f"app.kubernetes.io/{label}" for label in ("name", "instance", "component", "version")
)
# What a flow shares between its roles, so belongs to none of them.
SHARED_KINDS = ("ConfigMap", "Secret", "Namespace")
CONFIG_ERROR_EXIT_STATUS = 2

Resource = dict[str, Any]


@pytest.fixture(scope="module")
def rendered() -> dict[Path, list[Resource]]:
    if kustomize_binary() is None:
        pytest.skip("no kustomize: `make install` builds it where a Go toolchain is")
    return {directory: kustomize_build(directory) for directory in KUSTOMIZATIONS}


def _key(resource: Resource) -> tuple[str, str]:
    return resource["kind"], resource["metadata"]["name"]


def _pod_templates(resources: list[Resource]) -> Iterator[tuple[Resource, Resource]]:
    """(resource, the pod template it creates pods from), for every resource that has one."""
    for resource in resources:
        spec = resource.get("spec", {})
        if resource["kind"] == "CronJob":
            yield resource, spec["jobTemplate"]["spec"]["template"]
        elif "template" in spec:
            yield resource, spec["template"]


def _selectors(resources: list[Resource]) -> Iterator[tuple[Resource, dict[str, str]]]:
    for resource in resources:
        if resource["kind"] == "Service":
            yield resource, resource["spec"]["selector"]
        elif resource["kind"] in ("StatefulSet", "Deployment", "PodDisruptionBudget"):
            selector = resource["spec"]["selector"]
            assert set(selector) == {"matchLabels"}, resource["metadata"]["name"]
            yield resource, selector["matchLabels"]


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(name) == value for name, value in selector.items())


def _container_environment(
    resources: list[Resource], resource: Resource, container: Resource
) -> dict[str, str]:
    """The container's environment as Kubernetes builds it from the rendered manifests: the
    ConfigMaps it names (by their rendered, hashed names), then its own `env`."""
    config_maps = {r["metadata"]["name"]: r["data"] for r in resources if r["kind"] == "ConfigMap"}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(config_maps[source["configMapRef"]["name"]])
    for variable in container.get("env", []):
        if "value" in variable:
            env[variable["name"]] = str(variable["value"])
        else:
            assert variable["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
            env[variable["name"]] = f"{resource['metadata']['name']}-0"
    return env


def _named_paths(env: dict[str, str]) -> dict[str, str]:
    """The files a role reads at start: `_FILE` variables and librdkafka's `*.location`s."""
    return {
        name: value
        for name, value in env.items()
        if name.endswith(("_FILE", "_LOCATION")) and value.startswith("/")
    }


def _secret_mounts(template: Resource, container: Resource) -> list[tuple[str, Resource]]:
    """(mount path, Secret volume source) of each Secret the container mounts."""
    volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
    return [
        (mount["mountPath"], volumes[mount["name"]]["secret"])
        for mount in container.get("volumeMounts", [])
        if "secret" in volumes.get(mount["name"], {})
    ]


def _flow_pods(rendered: dict[Path, list[Resource]]) -> list[tuple[Resource, Resource]]:
    """Every pod of the example flow: its own, and validate-once's Job."""
    pods = list(_pod_templates(rendered[EXAMPLE]))
    pods += [(r, t) for r, t in _pod_templates(rendered[VALIDATE_ONCE]) if r["kind"] == "Job"]
    return pods


def test_every_kubernetes_manifest_passes_strict_validation():
    files = sorted({path for path, _resource in kubernetes_resources()})
    assert {f.name for f in files} >= {
        "deduplicator.yaml",
        "replicator.yaml",
        "offsetsync.yaml",
        "disruption-budgets.yaml",
        "validator.yaml",
        "job.yaml",
        "namespace.yaml",
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
    # One worker per pod, even with REPLICATION_WORKERS in flow.env: the stages scale by
    # replicas, and a pod's one scraped port (prometheus.io/port) serves all its metrics.
    for stage in ("replicator", "deduplicator"):
        assert kubernetes_environment(stage)["REPLICATION_WORKERS"] == "1", stage
        annotations = kinds[("StatefulSet", f"exactly-{stage}")]["spec"]["template"]["metadata"]
        scraped = annotations["annotations"]["prometheus.io/port"]
        assert kubernetes_environment(stage)["METRICS_PORT"] == scraped, stage
    offsetsync = kinds[("Deployment", "exactly-offsetsync")]
    assert offsetsync["spec"]["replicas"] == 1
    assert offsetsync["spec"]["strategy"]["type"] == "Recreate"
    for job in (kinds[("Job", "exactly-validate")], kinds[("CronJob", "exactly-validate-hourly")]):
        spec = job["spec"] if job["kind"] == "Job" else job["spec"]["jobTemplate"]["spec"]
        assert spec["backoffLimit"] == 0  # exit 1 is a verdict, never retried


def test_every_kustomization_names_files_that_exist():
    kustomizations = sorted(K8S_DIR.rglob("kustomization.yaml"))
    # base, its one-off audit (a component), the example overlay, its flow (a component) and
    # its one-off audit.
    assert len(kustomizations) == 5
    for kustomization in kustomizations:
        for named in kustomization_references(kustomization):
            assert named.exists(), f"{kustomization} names {named}, which does not exist"


def test_every_kustomization_renders_to_strictly_valid_manifests(rendered, tmp_path):
    for directory, resources in rendered.items():
        name = str(directory.relative_to(K8S_DIR)).replace("/", "-")
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump_all(resources))
    done = subprocess.run(
        [_BIN / "kubernetes-validate", "--strict", "--quiet", *sorted(tmp_path.glob("*.yaml"))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The overlay's patches reach every role: the credentials mounted, the images renamed.
    workloads = [r for r in rendered[EXAMPLE] if r["kind"] in ("Deployment", "StatefulSet")]
    assert len(workloads) == len(ROLES)
    for workload in workloads:
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert "/etc/kafka-exactly/credentials" in mounts, workload["metadata"]["name"]
        assert container["image"].startswith("registry.example.com/kafka-exactly:")
    (deduplicator,) = [w for w in workloads if w["metadata"]["name"] == "exactly-deduplicator"]
    (container,) = deduplicator["spec"]["template"]["spec"]["containers"]
    assert "/var/lib/exactly" in {m["mountPath"] for m in container["volumeMounts"]}


def test_the_example_overlay_puts_its_flow_in_a_namespace_it_creates(rendered):
    (namespace,) = [r for r in rendered[EXAMPLE] if r["kind"] == "Namespace"]
    others = [r for r in rendered[EXAMPLE] if r["kind"] != "Namespace"]
    assert {r["metadata"].get("namespace") for r in others} == {namespace["metadata"]["name"]}
    # The audit on demand leaves the namespace alone: deleting its Job must not delete it.
    assert not [r for r in rendered[VALIDATE_ONCE] if r["kind"] == "Namespace"]


def test_the_example_overlays_configuration_loads(tmp_path):
    # The credentials its variables name, as the Secret mount would provide them: a password,
    # and a certificate with its key (librdkafka reads them when the settings are checked).
    env = read_env_file(EXAMPLE / "flow" / "flow.env")
    certificate, key = _certificate(tmp_path)
    mounted = {"source-password": "secret-from-the-mount\n", "target-client.key": key}
    for name, value in list(env.items()):
        if value.startswith("/etc/kafka-exactly/credentials/"):
            local = tmp_path / Path(value).name
            local.write_text(mounted.get(local.name, certificate))
            env[name] = str(local)
    settings = load_settings(env)
    assert settings.source.client_config()["security.protocol"] == "SASL_SSL"
    assert settings.source.client_config()["sasl.password"] == "secret-from-the-mount"
    assert settings.destination.client_config()["ssl.key.location"].endswith("target-client.key")
    assert settings.destination.client_config()["security.protocol"] == "SSL"


_SELF_SIGNED = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]


def _certificate(directory: Path) -> tuple[str, str]:
    """A self-signed certificate and its key, PEM: what librdkafka parses at a client's start."""
    certificate, key = directory / "certificate.pem", directory / "key.pem"
    subprocess.run(
        [*_SELF_SIGNED, "-subj", "/CN=test", "-keyout", key, "-out", certificate],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return certificate.read_text(), key.read_text()


def test_every_pod_mounts_the_credentials_its_configuration_names(rendered):
    # The validator's pods were given the ConfigMap's _FILE paths and no mount (issue 32):
    # `exactly validate` would have exited 2 at every run.
    secrets = {r["metadata"]["name"]: r for r in rendered[VALIDATE_ONCE] if r["kind"] == "Secret"}
    pods = _flow_pods(rendered)
    assert {_key(r) for r, _t in pods} == {
        ("StatefulSet", "exactly-replicator"),
        ("StatefulSet", "exactly-deduplicator"),
        ("Deployment", "exactly-offsetsync"),
        ("CronJob", "exactly-validate-hourly"),
        ("Job", "exactly-validate"),
    }
    for resource, template in pods:
        (container,) = template["spec"]["containers"]
        paths = _named_paths(_container_environment(rendered[VALIDATE_ONCE], resource, container))
        assert paths, _key(resource)
        mounts = _secret_mounts(template, container)
        for variable, path in paths.items():
            found = [
                (mount_path, source)
                for mount_path, source in mounts
                if path.startswith(mount_path.rstrip("/") + "/")
            ]
            assert found, f"{_key(resource)}: {variable}={path} is on no mounted Secret"
            ((mount_path, source),) = found
            secret = secrets[source["secretName"]]
            assert path.removeprefix(mount_path.rstrip("/") + "/") in secret["data"], path


@pytest.fixture
def pod_volumes(as_pod_user: None) -> Iterator[Path]:
    """A directory for a pod's volumes that the pod's user can reach (pytest's own temporary
    directories are root's alone)."""
    with tempfile.TemporaryDirectory(prefix="kafka-exactly-pod-volumes-") as directory:
        os.chmod(directory, 0o755)
        yield Path(directory)


@pytest.fixture(scope="module")
def as_pod_user() -> None:
    """Switching to a pod's uid needs root, and an interpreter that uid may run."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("runs a role as the pods' uid: needs root and setpriv (util-linux)")
    probe = subprocess.run(
        ["setpriv", "--reuid=10001", "--regid=10001", "--clear-groups", _BIN / "exactly", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        pytest.skip(f"uid 10001 cannot run {_BIN / 'exactly'} here: {probe.stderr.strip()}")


def _start_as_pod_user(
    resources: list[Resource], resource: Resource, template: Resource, directory: Path
) -> subprocess.CompletedProcess[str]:
    """Load the pod's settings as the pod's user, against its Secrets laid out on disk as kubelet
    lays them out: `exactly config`, the settings loader every role runs first (exit 2 and
    one line on a file it cannot read)."""
    pod = template["spec"]
    context = pod["securityContext"]
    fs_group: int | None = context.get("fsGroup")
    (container,) = pod["containers"]
    env = _container_environment(resources, resource, container)
    secrets = {r["metadata"]["name"]: r for r in resources if r["kind"] == "Secret"}
    certificate, key = _certificate(directory)
    for index, (mount_path, source) in enumerate(_secret_mounts(template, container)):
        assert "items" not in source  # one mode for every file: defaultMode's
        volume = directory / f"volume-{index}"
        volume.mkdir()
        # kubelet's atomic writer makes the volume's directory searchable by every user; what
        # keeps the credentials to the pod's user is each file's mode and group.
        volume.chmod(0o755)
        for name, encoded in secrets[source["secretName"]]["data"].items():
            content = base64.b64decode(encoded).decode()
            if name.endswith(".pem"):
                content = certificate  # the placeholders in git are not PEM; real files are
            elif name.endswith(".key"):
                content = key
            path = volume / name
            path.write_text(content)
            # As kubelet leaves a Secret's files: root's, mode defaultMode (Kubernetes' default
            # 0644); with an fsGroup, the group is fsGroup and the group may read, since
            # SetVolumeOwnership (pkg/volume/volume_linux.go) ORs 0440 into a read-only
            # volume's modes.
            os.chown(path, 0, fs_group if fs_group is not None else 0)
            mode = source.get("defaultMode", 0o644) | (0o440 if fs_group is not None else 0)
            path.chmod(mode)
        prefix = mount_path.rstrip("/") + "/"
        env = {
            name: str(volume / value.removeprefix(prefix)) if value.startswith(prefix) else value
            for name, value in env.items()
        }
    # The supplementary groups a container runtime gives the pod's process.
    groups = ([fs_group] if fs_group is not None else []) + context.get("supplementalGroups", [])
    as_user = [
        "setpriv",
        f"--reuid={context['runAsUser']}",
        f"--regid={context['runAsGroup']}",
        f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups",
    ]
    return subprocess.run(
        [*as_user, _BIN / "exactly", "config"],
        env={"PATH": os.environ["PATH"], **env},
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_pod_reads_its_credentials_as_its_own_user(rendered, pod_volumes):
    for index, (resource, template) in enumerate(_flow_pods(rendered)):
        context = template["spec"]["securityContext"]
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] != 0
        directory = pod_volumes / str(index)
        directory.mkdir()
        done = _start_as_pod_user(rendered[VALIDATE_ONCE], resource, template, directory)
        assert done.returncode == 0, f"{_key(resource)}: {done.stderr}"
        # The secret read and masked, not left out.
        assert "KAFKA_CLUSTERS_SOURCE_PROPERTIES_SASL_PASSWORD=****" in done.stdout


def test_without_an_fs_group_no_pod_could_read_its_credentials(rendered, pod_volumes):
    # What the example overlay shipped before issue 32 for the replicator, offset sync and the
    # audits: the same files and modes, no fsGroup. The roles exited 2 at start, crash-looping.
    for index, (resource, template) in enumerate(_flow_pods(rendered)):
        without = copy.deepcopy(template)
        without["spec"]["securityContext"].pop("fsGroup", None)
        directory = pod_volumes / str(index)
        directory.mkdir()
        done = _start_as_pod_user(rendered[VALIDATE_ONCE], resource, without, directory)
        assert done.returncode == CONFIG_ERROR_EXIT_STATUS, f"{_key(resource)}: {done.stdout}"
        assert "cannot read the file: Permission denied" in done.stderr, done.stderr


def test_a_configuration_change_rolls_every_pod(rendered, tmp_path):
    # The raw reading of k8s/base that tests/deploy runs the roles with is what kustomize makes.
    (config_map,) = [r for r in rendered[BASE] if r["kind"] == "ConfigMap"]
    assert generated_config_maps(BASE) == {"kafka-exactly-flow": config_map["data"]}
    for directory, env_file in ((BASE, "flow.env"), (EXAMPLE, "flow/flow.env")):
        before = rendered[directory]
        (config_map,) = [r for r in before if r["kind"] == "ConfigMap"]
        name = config_map["metadata"]["name"]
        assert re.fullmatch(r"kafka-exactly-flow-[a-z0-9]{10}", name), name
        for resource, template in _pod_templates(before):
            for container in template["spec"]["containers"]:
                refs = [s["configMapRef"]["name"] for s in container["envFrom"]]
                assert refs == [name], _key(resource)
        # A user's edit, in a copy of k8s/: every pod template changes, so every pod rolls.
        copied = tmp_path / directory.name / "k8s"
        shutil.copytree(K8S_DIR, copied)
        edited = copied / directory.relative_to(K8S_DIR) / env_file
        edited.write_text(edited.read_text().replace("_FORMAT=json", "_FORMAT=text"))
        edited_render = kustomize_build(copied / directory.relative_to(K8S_DIR))
        after = {_key(r): t for r, t in _pod_templates(edited_render)}
        templates = {_key(r): t for r, t in _pod_templates(before)}
        assert set(after) == set(templates)
        for key, template in templates.items():
            assert after[key] != template, f"{key} keeps its pods through a config change"


def test_the_one_off_audit_is_applied_on_demand_with_the_flows_own_settings(rendered):
    for directory in (BASE, EXAMPLE):
        kinds = {_key(r) for r in rendered[directory]}
        assert ("CronJob", "exactly-validate-hourly") in kinds
        assert not [key for key in kinds if key[0] == "Job"], directory
    # validate-once renders the flow as the overlay does, unchanged, plus the Job.
    flow = [r for r in rendered[EXAMPLE] if r["kind"] != "Namespace"]
    (job,) = [r for r in rendered[VALIDATE_ONCE] if r["kind"] == "Job"]
    once = [r for r in rendered[VALIDATE_ONCE] if r is not job]
    assert sorted(once, key=_key) == sorted(flow, key=_key)
    # The Job's pod is the hourly audit's but for its command: the same image, namespace,
    # labels, user, ConfigMap and credentials.
    (cron,) = [r for r in flow if r["kind"] == "CronJob"]
    pods = []
    for template in (job["spec"]["template"], cron["spec"]["jobTemplate"]["spec"]["template"]):
        pod = copy.deepcopy(template)
        (container,) = pod["spec"]["containers"]
        pods.append((container.pop("command", None), container.pop("args"), pod))
    (job_command, job_args, job_pod), (_command, _args, cron_pod) = pods
    assert (job_command, job_args) == (None, ["validate"])
    assert job_pod == cron_pod
    assert job["metadata"]["namespace"] == cron["metadata"]["namespace"]
    assert job["metadata"]["labels"] == cron["metadata"]["labels"]
    assert job["spec"]["backoffLimit"] == 0  # exit 1 is a verdict, never retried


def test_every_resource_and_pod_carries_the_recommended_labels(rendered):
    project = tomllib.loads((REPOSITORY_ROOT / "pyproject.toml").read_text())["project"]
    instances = {}
    for directory, resources in rendered.items():
        for resource in resources:
            labels = resource["metadata"]["labels"]
            assert labels[NAME] == "kafka-exactly", _key(resource)
            assert {INSTANCE, VERSION} <= set(labels), _key(resource)
            if resource["kind"] not in SHARED_KINDS:
                assert labels[COMPONENT], _key(resource)
        (instance,) = {r["metadata"]["labels"][INSTANCE] for r in resources}
        instances[directory] = instance
        for resource, template in _pod_templates(resources):
            pod_labels = template["metadata"]["labels"]
            for label in (NAME, INSTANCE, COMPONENT, VERSION):
                assert pod_labels[label] == resource["metadata"]["labels"][label], label
            for container in template["spec"]["containers"]:
                tag = container["image"].rpartition(":")[2]
                # The version is the images' (k8s/base's `latest` images are this source's).
                assert pod_labels[VERSION] == (project["version"] if tag == "latest" else tag)
        for resource, selector in _selectors(resources):
            # Selectors cannot change: never the version, always what tells flows apart.
            assert {NAME, INSTANCE, COMPONENT} <= set(selector), _key(resource)
            assert VERSION not in selector, _key(resource)
        for resource in resources:
            for claim in resource.get("spec", {}).get("volumeClaimTemplates", []):
                assert VERSION not in claim["metadata"].get("labels", {}), _key(resource)
    assert instances[BASE] != instances[EXAMPLE] == instances[VALIDATE_ONCE]


def test_two_flows_share_a_namespace_without_selecting_each_others_pods(rendered, tmp_path):
    # A second flow beside the example, the way flow/kustomization.yaml says to make one.
    second = tmp_path / "payments"
    second.mkdir()
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(BASE, second)],
        "namespace": "kafka-exactly",
        "namePrefix": "payments-",
        "labels": [
            {
                "pairs": {INSTANCE: "payments"},
                "includeSelectors": True,
                "includeTemplates": True,
            }
        ],
    }
    (second / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    flows = {"example": rendered[EXAMPLE], "payments": kustomize_build(second)}

    def objects(resources: list[Resource]) -> set[tuple[str, str, str]]:
        return {
            (r["kind"], r["metadata"]["namespace"], r["metadata"]["name"])
            for r in resources
            if r["kind"] != "Namespace"
        }

    assert {ns for _k, ns, _n in objects(flows["payments"])} == {"kafka-exactly"}
    assert not objects(flows["example"]) & objects(flows["payments"])
    for flow, other in (("example", "payments"), ("payments", "example")):
        own_pods = [t["metadata"]["labels"] for _r, t in _pod_templates(flows[flow])]
        other_pods = [t["metadata"]["labels"] for _r, t in _pod_templates(flows[other])]
        for resource, selector in _selectors(flows[flow]):
            assert any(_selects(selector, pod) for pod in own_pods), _key(resource)
            assert not any(_selects(selector, pod) for pod in other_pods), (flow, _key(resource))
            # The instance is what tells them apart: without it, the other flow's pods match.
            without_instance = {k: v for k, v in selector.items() if k != INSTANCE}
            assert any(_selects(without_instance, pod) for pod in other_pods), _key(resource)


def test_every_pod_is_admitted_as_restricted_and_takes_no_service_variables(rendered):
    """Kubelet gives a pod <SERVICE>_SERVICE_HOST variables for every Service of its namespace:
    a Service named exactly-metrics would make EXACTLY_METRICS_SERVICE_HOST, which every role
    refuses as an unknown setting (exit 2). And a namespace enforcing the restricted Pod Security
    Standard admits no container that may escalate or keeps capabilities: the audits' did."""
    for resource, template in _flow_pods(rendered):
        spec = template["spec"]
        assert spec.get("enableServiceLinks") is False, _key(resource)
        for container in spec["containers"]:
            context = container.get("securityContext", {})
            assert context.get("allowPrivilegeEscalation") is False, _key(resource)
            assert context.get("capabilities", {}).get("drop") == ["ALL"], _key(resource)

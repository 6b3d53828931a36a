"""What docker-compose.yml and k8s/ give each role: its environment, read the way compose and
Kubernetes build it, so that a test can run the role with it as a plain process."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.replication.processes import REPOSITORY_ROOT

COMPOSE_FILE = REPOSITORY_ROOT / "docker-compose.yml"
DASHBOARD = REPOSITORY_ROOT / "deploy" / "grafana" / "dashboards" / "kafka-exactly.json"
ALERT_RULES = REPOSITORY_ROOT / "deploy" / "prometheus" / "alerts.yml"
K8S_DIR = REPOSITORY_ROOT / "k8s"
ROLES = ("replicator", "deduplicator", "offsetsync")
# The pod name a StatefulSet gives its first pod: what the downward API puts in
# REPLICATION_INSTANCE_ID for the deduplicator.
_FIRST_POD = {"exactly-deduplicator": "exactly-deduplicator-0"}


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    """Every document of a YAML file, anchors and merge keys resolved as compose resolves them."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def compose_environment(role: str) -> dict[str, str]:
    (compose,) = load_yaml_documents(COMPOSE_FILE)
    service = compose["services"][role]
    assert service["command"] == [role], service["command"]
    return {name: str(value) for name, value in service["environment"].items()}


def kubernetes_resources() -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every Kubernetes resource under k8s/ (not kustomizations, not patches)."""
    for path in sorted(K8S_DIR.rglob("*.yaml")):
        for document in load_yaml_documents(path):
            kind = document.get("kind") if isinstance(document, dict) else None
            if kind is not None and "apiVersion" in document and kind != "Kustomization":
                yield path, document


def kubernetes_environment(role: str) -> dict[str, str]:
    """The role's container environment in k8s/base: the ConfigMaps it takes whole (envFrom),
    then its own `env` (which wins), downward-API values as Kubernetes fills them."""
    resources = [r for path, r in kubernetes_resources() if path.parent.name == "base"]
    config_maps = {r["metadata"]["name"]: r["data"] for r in resources if r["kind"] == "ConfigMap"}
    (workload,) = [
        r
        for r in resources
        if r["kind"] in ("Deployment", "StatefulSet") and r["metadata"]["name"] == f"exactly-{role}"
    ]
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    assert container["args"] == [role], container["args"]
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(config_maps[source["configMapRef"]["name"]])
    for variable in container.get("env", []):
        env[variable["name"]] = _value(variable, workload["metadata"]["name"])
    return env


def _value(variable: Mapping[str, Any], workload: str) -> str:
    if "value" in variable:
        return str(variable["value"])
    field = variable["valueFrom"]["fieldRef"]["fieldPath"]
    assert field == "metadata.name", field
    return _FIRST_POD[workload]


def kustomization_references(path: Path) -> list[Path]:
    """The files and directories a kustomization.yaml names."""
    (kustomization,) = load_yaml_documents(path)
    named: list[str] = list(kustomization.get("resources", []))
    named += [p["path"] for p in kustomization.get("patches", []) if "path" in p]
    for generator in kustomization.get("configMapGenerator", []) + kustomization.get(
        "secretGenerator", []
    ):
        named += generator.get("envs", [])
        named += [f.split("=", 1)[-1] for f in generator.get("files", [])]
    return [path.parent / name for name in named]


def queried_metrics() -> dict[str, set[str]]:
    """Metric names in the Grafana dashboard's queries and the alert rules, by where."""
    expressions = {
        "dashboard": [
            target["expr"]
            for panel in json.loads(DASHBOARD.read_text())["panels"]
            for target in panel["targets"]
        ],
        "alerts": [
            rule["expr"]
            for group in load_yaml_documents(ALERT_RULES)[0]["groups"]
            for rule in group["rules"]
        ],
    }
    name = re.compile(r"\b((?:exactly|process)_[a-z0-9_]+)")
    return {
        where: {m for e in exprs for m in name.findall(e)} for where, exprs in expressions.items()
    }

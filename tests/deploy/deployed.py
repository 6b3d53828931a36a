"""What docker-compose.yml and k8s/ give each role: its environment, read the way compose and
Kubernetes build it, so that a test can run the role with it as a plain process."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping
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


def compose_service(name: str) -> dict[str, Any]:
    """A service of docker-compose.yml as compose reads it (anchors and merge keys resolved)."""
    (compose,) = load_yaml_documents(COMPOSE_FILE)
    service: dict[str, Any] = compose["services"][name]
    return service


def healthcheck_argv(test: list[str] | str) -> list[str]:
    """A compose healthcheck's `test` as Docker runs it in the container: CMD's words as they are,
    CMD-SHELL's string (or a plain string) through /bin/sh -c."""
    if isinstance(test, str):
        return ["/bin/sh", "-c", test]
    kind, *words = test
    assert kind in ("CMD", "CMD-SHELL"), test
    return words if kind == "CMD" else ["/bin/sh", "-c", *words]


def kubernetes_resources() -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every Kubernetes resource under k8s/ (not kustomizations or components, not patches)."""
    for path in sorted(K8S_DIR.rglob("*.yaml")):
        for document in load_yaml_documents(path):
            kind = document.get("kind") if isinstance(document, dict) else None
            api = str(document.get("apiVersion", "")) if kind is not None else ""
            if api and not api.startswith("kustomize.config.k8s.io/"):
                yield path, document


def read_env_file(path: Path) -> dict[str, str]:
    """An env file as kustomize's configMapGenerator reads it: NAME=value lines, # comments."""
    return _env_lines(path.read_text().splitlines())


def _env_lines(lines: Iterable[str]) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))
    return {name: value for name, value in pairs}


def generated_config_maps(directory: Path) -> dict[str, dict[str, str]]:
    """The data of the ConfigMaps a kustomization generates, by their names before the hash
    (the names its own resources use)."""
    (kustomization,) = load_yaml_documents(directory / "kustomization.yaml")
    generated: dict[str, dict[str, str]] = {}
    for generator in kustomization.get("configMapGenerator", []):
        data: dict[str, str] = {}
        for env_file in generator.get("envs", []):
            data.update(read_env_file(directory / env_file))
        data.update(_env_lines(generator.get("literals", [])))
        generated[generator["name"]] = data
    return generated


def kubernetes_environment(role: str) -> dict[str, str]:
    """The role's container environment in k8s/base: the ConfigMaps it takes whole (envFrom),
    then its own `env` (which wins), downward-API values as Kubernetes fills them."""
    resources = [r for path, r in kubernetes_resources() if path.parent.name == "base"]
    config_maps = generated_config_maps(K8S_DIR / "base")
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
    named += kustomization.get("components", [])
    named += [p["path"] for p in kustomization.get("patches", []) if "path" in p]
    for generator in kustomization.get("configMapGenerator", []) + kustomization.get(
        "secretGenerator", []
    ):
        named += generator.get("envs", [])
        named += [f.split("=", 1)[-1] for f in generator.get("files", [])]
    return [path.parent / name for name in named]


def built_tool(pattern: str, on_path: str | None = None) -> Path | None:
    """A tool the Makefile puts under <cache>/tools (``pattern``, globbed there: the last
    version sorted wins), with the cache as the Makefile computes it; else ``on_path`` found on
    PATH, if given; else None."""
    cache = Path(os.environ.get("LOCALKAFKA_CACHE_DIR", Path.home() / ".cache/kafka-exactly"))
    built = sorted(cache.glob(f"tools/{pattern}"))
    found = built[-1] if built else (shutil.which(on_path) if on_path else None)
    return Path(found) if found else None


def kustomize_binary() -> Path | None:
    """kustomize as `make install` builds it (or one on PATH)."""
    return built_tool("kustomize-*/kustomize", "kustomize")


def kustomize_build(directory: Path) -> list[dict[str, Any]]:
    """The resources `kubectl apply -k directory` would send, as kustomize renders them."""
    kustomize = kustomize_binary()
    assert kustomize is not None, "no kustomize: `make install` builds it where Go is"
    done = subprocess.run(
        [kustomize, "build", directory], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


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

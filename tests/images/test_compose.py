"""`docker compose up` of the shipped docker-compose.yml, with tests/images/compose.override.yml
putting in test-only stand-ins for the images no registry here serves: the two clusters come up
on their own cluster ids, traffic flows through the pipeline, Prometheus scrapes every role and
loads the alert rules, the roles turn healthy, the flow is exactly once by the validator's own
service, the roles drain and exit 0 on stop, and `docker compose down` leaves nothing behind.

The stack runs on the project network compose creates, as the shipped file wires it (services
reach each other by name); the one port it publishes is bound to loopback by the override."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.deployed import built_tool
from tests.images.conftest import note
from tests.images.engine import Engine
from tests.images.images import ensure_kafka_standin, ensure_prometheus_standin
from tests.replication.processes import REPOSITORY_ROOT
from tests.replication.scrape import free_port

pytestmark = [pytest.mark.images, pytest.mark.timeout(2400)]

COMPOSE_FILE = REPOSITORY_ROOT / "docker-compose.yml"
OVERRIDE = Path(__file__).with_name("compose.override.yml")
ROLES = ("replicator", "deduplicator", "offsetsync")


def compose_binary() -> Path:
    """Docker Compose v2, as `make test-images` builds it from the Go module proxy."""
    # Only the one built: a docker-compose on PATH may be Debian's v1.
    found = built_tool("compose-*/docker-compose")
    if found is None:
        pytest.fail("no docker-compose: `make test-images` builds it (Go module proxy)")
    return found


@dataclass
class Stack:
    engine: Engine
    project: str
    env: dict[str, str]
    prometheus: str

    def compose(
        self, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(compose_binary()), "--project-name", self.project,
             "--file", str(COMPOSE_FILE), "--file", str(OVERRIDE), *args],
            env=self.env, capture_output=True, text=True, timeout=timeout, cwd=REPOSITORY_ROOT,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"compose {' '.join(args)}: {done.returncode}\n{done.stderr}")
        return done

    def query(self, expression: str) -> list[dict]:
        url = f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)["data"]["result"]

    def api(self, path: str) -> dict:
        with urllib.request.urlopen(f"{self.prometheus}{path}", timeout=10) as response:
            return json.load(response)["data"]

    def containers(self) -> list[dict]:
        listed = self.compose("ps", "--all", "--format", "json").stdout
        # One JSON object per line (compose v2.21+), or one array.
        text = listed.strip()
        if text.startswith("["):
            return json.loads(text)
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def _await(what: str, check, timeout_s: float, stack: Stack) -> None:
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last is True:
                return
        except OSError as exc:  # Prometheus not listening yet
            last = exc
        time.sleep(2)
    logs = stack.compose("logs", "--tail", "30", check=False).stdout[-6000:]
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s (last: {last})\n{logs}")


@pytest.fixture
def stack(engine: Engine, roles_image: str, validator_image: str) -> Iterator[Stack]:
    port = free_port()
    env = {
        **os.environ,
        "DOCKER_HOST": engine.host,
        "EXACTLY_TEST_KAFKA_IMAGE": ensure_kafka_standin(engine),
        "EXACTLY_TEST_PROMETHEUS_IMAGE": ensure_prometheus_standin(engine),
        "EXACTLY_TEST_ROLES_IMAGE": roles_image,
        "EXACTLY_TEST_VALIDATOR_IMAGE": validator_image,
        "EXACTLY_TEST_PROMETHEUS_PORT": str(port),
    }
    stack = Stack(engine, f"exactly{uuid.uuid4().hex[:8]}", env, f"http://127.0.0.1:{port}")
    try:
        yield stack
    finally:
        stack.compose("--profile", "validate", "down", "--volumes", "--timeout", "90",
                      timeout=300, check=False)  # fmt: skip


def test_compose_up_copies_exactly_once_is_scraped_and_comes_down_clean(stack: Stack):
    started = time.monotonic()
    stack.compose("up", "--detach", "--no-build", timeout=600)

    # Prometheus scrapes every role and has loaded the shipped rules.
    def scraped() -> object:
        targets = stack.api("/api/v1/targets")["activeTargets"]
        health = {t["labels"]["job"]: t["health"] for t in targets}
        return health == dict.fromkeys(ROLES, "up") or health

    _await("every role scraped", scraped, 300, stack)
    rules = [r["name"] for g in stack.api("/api/v1/rules")["groups"] for r in g["rules"]]
    assert "ExactlyFlowStalled" in rules
    assert len(rules) >= 10, rules

    # Traffic flows through the pipeline, and every sample names the compose flow.
    def flowing() -> object:
        written = stack.query('sum(exactly_deduplicator_records_written_total{flow="compose"})')
        return (bool(written) and float(written[0]["value"][1]) >= 5000) or written

    _await("5,000 records on the destination", flowing, 420, stack)
    note(f"compose: up to 5,000 records copied in {time.monotonic() - started:.0f} s")

    # Docker runs the first health check one interval (10 s) after a container starts, and the
    # roles start only once both brokers are healthy: a role can copy before Docker has looked.
    # So the health is awaited, for the start period and three intervals, not read once.
    def healthy() -> object:
        health = {c["Service"]: c.get("Health", "") for c in stack.containers()}
        return {health[role] for role in ROLES} == {"healthy"} or health

    _await("every role healthy", healthy, 60, stack)

    # Traffic stopped and drained: the validator's own service proves the flow exactly once.
    stack.compose("stop", "traffic")

    def drained() -> object:
        behind = stack.query(
            'sum({__name__=~"exactly_replicator_lag_records|exactly_deduplicator_backlog_records"})'
        )
        return (bool(behind) and float(behind[0]["value"][1]) == 0) or behind

    _await("the flow caught up", drained, 300, stack)
    audit = stack.compose(
        "--profile", "validate", "run", "--rm", "validator", "validate", "--require-complete",
        timeout=900, check=False,
    )  # fmt: skip
    assert audit.returncode == 0, audit.stdout[-4000:] + audit.stderr[-4000:]

    # The two clusters are two: each has its own id.
    ids = {
        service: stack.compose(
            "exec", "-T", service, "grep", "cluster.id", "/tmp/kraft-combined-logs/meta.properties"
        ).stdout.strip()
        for service in ("source-kafka", "target-kafka")
    }
    assert len(set(ids.values())) == 2, ids

    # docker compose stop: every role drains and exits 0; down leaves nothing of the project.
    stack.compose("stop", "--timeout", "90", *ROLES, timeout=300)
    exits = {c["Service"]: c.get("ExitCode") for c in stack.containers() if c["Service"] in ROLES}
    assert exits == dict.fromkeys(ROLES, 0), exits
    stack.compose("--profile", "validate", "down", "--volumes", "--timeout", "90", timeout=300)
    left = stack.engine.docker(
        "ps", "--all", "--quiet", "--filter", f"label=com.docker.compose.project={stack.project}"
    ).stdout.split()
    assert left == []
    volumes = stack.engine.docker(
        "volume", "ls", "--quiet", "--filter", f"label=com.docker.compose.project={stack.project}"
    ).stdout.split()
    assert volumes == []

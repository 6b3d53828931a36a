"""Session-wide fixtures: two real Kafka clusters (source, target) and unique names per test."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.backends import KafkaBackend, choose_backend, stop_all, timed_start
from tests.replication.processes import RoleProcesses, role_processes

# The property tests share two cores with four Kafka JVMs: Hypothesis's timing checks (slow
# input generation, the per-example deadline) would measure the machine's load, not the code,
# and failed CI once (test_random_values_in_a_valid_layout, "input generation is slow").
settings.register_profile(
    "shared-machine", suppress_health_check=[HealthCheck.too_slow], deadline=None
)
settings.load_profile("shared-machine")

# Every Spark driver the tests start (in this process, or under `exactly validate` and
# spark-submit in a child, which inherit it) compiles with Java's first compiler only: the tests'
# audits last seconds, over which C2's compiler threads cost two shared cores more than their code
# saves (one audit test's session: 52-61 s, against 64-67 s with both; two runs each). localkafka's
# brokers do the same (LOCALKAFKA_JIT). Not the product's default: an audit of millions of
# records needs C2.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")

_CLUSTER_FIXTURES = {"source_cluster", "target_cluster", "kafka_clusters"}
_session_notes: list[str] = []


@pytest.fixture(scope="session")
def kafka_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, KafkaBackend]]:
    kind = choose_backend()
    # Under pytest's base temp: the last runs' broker data and logs are kept for post-mortems.
    base_dir = tmp_path_factory.mktemp("kafka", numbered=False)
    backends, seconds = timed_start(kind, base_dir)
    _session_notes.append(f"kafka backend: {kind}; both clusters ready in {seconds:.1f} s")
    for backend in backends.values():
        _session_notes.append(
            f"  {backend.name}: bootstrap={backend.bootstrap_servers} "
            f"cluster_id={backend.cluster_id}"
        )
    if kind == "localkafka":
        _session_notes.append(f"  broker data and logs: {base_dir}")
    try:
        yield backends
    finally:
        stop_all(backends)


@pytest.fixture(scope="session")
def source_cluster(kafka_clusters: dict[str, KafkaBackend]) -> KafkaBackend:
    return kafka_clusters["source"]


@pytest.fixture(scope="session")
def target_cluster(kafka_clusters: dict[str, KafkaBackend]) -> KafkaBackend:
    return kafka_clusters["target"]


def _name_factory(request: pytest.FixtureRequest, kind: str) -> Callable[[str], str]:
    # The test's own name makes a leftover topic traceable; the random suffix keeps reruns and
    # several calls within one test apart on the shared session clusters.
    test = re.sub(r"[^a-zA-Z0-9]+", "-", request.node.name).strip("-")[:80]

    def make(label: str = kind) -> str:
        return f"{label}.{test}.{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[RoleProcesses]:
    """The roles a test starts as OS processes (tests/replication/processes.py), each stopped
    after the test whatever it did."""
    with role_processes(tmp_path) as started:
        yield started


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> Callable[[str], str]:
    return _name_factory(request, "topic")


@pytest.fixture
def unique_group(request: pytest.FixtureRequest) -> Callable[[str], str]:
    return _name_factory(request, "group")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # `-m "not kafka"` runs the pure unit tests without starting any broker.
    for item in items:
        if _CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kafka)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    report = yield
    roles = getattr(item, "funcargs", {}).get("roles")
    if report.failed and report.when == "call" and isinstance(roles, RoleProcesses):
        # Before the fixture stops them: what each role was doing when the test gave up.
        roles.dump_stacks()
        for process in roles.started:
            report.sections.append(
                (f"role log: {process.name}{roles.ended(process)}", process.log_tail(80))
            )
    if report.failed and _CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
        clusters = item.funcargs.get("kafka_clusters") or {}
        for name in ("source_cluster", "target_cluster"):
            backend = item.funcargs.get(name)
            if backend is not None:
                clusters = {**clusters, backend.name: backend}
        for backend in clusters.values():
            if backend.broker is not None:
                report.sections.append((f"broker log: {backend.name}", backend.broker.log_tail(60)))
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _session_notes:
        terminalreporter.section("kafka clusters")
        for line in _session_notes:
            terminalreporter.write_line(line)

"""The roles' image (Dockerfile target `exactly`) built from the repository and run as a user runs
it: `docker run --read-only` with a tmpfs, as uid 10001, configured by environment variables
only, its state on a named volume, against the suite's local clusters (host network). It copies
the test data mix exactly once, `docker stop` drains it and it exits 0, `docker kill` then
`docker start` on the same volume and a start on an empty volume both stay exactly once, and the
container's health follows /healthz."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.images.conftest import note
from tests.images.engine import Engine
from tests.kafka_helpers import create_topic, produce_numbered
from tests.replication.datamix import create_data_mix
from tests.replication.scrape import free_port
from tests.replication.staging import assert_exactly_once, await_records, read_source

pytestmark = [pytest.mark.images, pytest.mark.timeout(2400)]

# Longer than a role's drain after SIGTERM (the open transaction, the acknowledged commit), as in
# docker-compose.yml's stop_grace_period.
GRACE_S = 90


def test_the_roles_image_holds_the_roles_and_no_spark_or_java(engine: Engine, roles_image: str):
    def run(*command: str) -> int:
        return engine.docker(
            "run", "--rm", "--network", "host", "--entrypoint", command[0], roles_image,
            *command[1:], check=False,
        ).returncode  # fmt: skip

    listed = engine.docker("run", "--rm", roles_image, "--help").stdout
    for command in ("run", "replicator", "deduplicator", "offsetsync", "validate"):
        assert f"  {command} " in listed, listed
    assert run("python", "-c", "import replicator, deduplicator, offsetsync") == 0
    assert run("python", "-c", "import pyspark") != 0
    assert run("sh", "-c", "command -v java") != 0
    user = engine.docker("run", "--rm", "--entrypoint", "id", roles_image).stdout
    assert user.startswith("uid=10001"), user
    assert engine.image_size_mb(roles_image) < 400


def _container_state(engine: Engine, name: str, field: str) -> str:
    return engine.docker("inspect", "--format", f"{{{{{field}}}}}", name).stdout.strip()


def _await_health(engine: Engine, name: str, wanted: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while (state := _container_state(engine, name, ".State.Health.Status")) != wanted:
        assert time.monotonic() < deadline, (state, engine.docker("logs", name).stderr[-3000:])
        time.sleep(1)


def test_the_roles_image_copies_exactly_once_through_stop_kill_and_an_empty_volume(
    engine: Engine, roles_image: str, source_cluster, target_cluster, unique_topic
):
    flow = f"img{uuid.uuid4().hex[:8]}"
    mix = create_data_mix(source_cluster.bootstrap_servers, unique_topic("image"))
    later = unique_topic("later")
    create_topic(source_cluster.bootstrap_servers, later, 3)
    metrics_port = free_port()
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": f"{mix.include_regex}|{later.replace('.', '[.]')}",
        "REPLICATION_FLOW": flow,
        "REPLICATION_INSTANCE_ID": "one",
        "METRICS_PORT": str(metrics_port),
        "METRICS_HOST": "127.0.0.1",
    }
    topics = [*mix.topics, later]
    volumes = [f"{flow}-state", f"{flow}-empty"]

    def start(name: str, volume: str) -> None:
        engine.docker(
            "run", "--detach", "--name", name, "--network", "host",
            "--read-only", "--tmpfs", "/tmp", "--user", "10001:10001",
            "--volume", f"{volume}:/var/lib/exactly",
            *[arg for key, value in env.items() for arg in ("--env", f"{key}={value}")],
            roles_image,
        )  # fmt: skip

    def exactly_once() -> None:
        source = read_source(source_cluster.bootstrap_servers, topics)
        expected = sum(len(records) for records in source.values())
        destination = await_records(target_cluster.bootstrap_servers, set(topics), expected, 180)
        assert_exactly_once(source_cluster, source, destination)

    names = [f"{flow}-a", f"{flow}-b"]
    try:
        start(names[0], volumes[0])
        _await_health(engine, names[0], "healthy")
        exactly_once()

        # SIGKILL, more records, the same container started again on its volume.
        engine.docker("kill", names[0])
        produce_numbered(source_cluster.bootstrap_servers, later, 3, 0, 3000)
        engine.docker("start", names[0])
        exactly_once()

        # docker stop: SIGTERM, the roles drain, and the container exits 0 within the grace.
        started = time.monotonic()
        engine.docker("stop", "--time", str(GRACE_S), names[0], timeout=GRACE_S + 30)
        stopped_in = time.monotonic() - started
        assert _container_state(engine, names[0], ".State.ExitCode") == "0", engine.docker(
            "logs", names[0]
        ).stderr[-3000:]
        assert stopped_in < GRACE_S
        note(f"roles' container: docker stop drained and exited 0 in {stopped_in:.1f} s")

        # A new container on an empty volume, same identity: state comes back from Kafka.
        produce_numbered(source_cluster.bootstrap_servers, later, 3, 3000, 3000)
        start(names[1], volumes[1])
        exactly_once()
        _await_health(engine, names[1], "healthy")
        logs = engine.docker("logs", names[1]).stderr
        assert "state restored" in logs, logs[-3000:]
    finally:
        engine.docker("rm", "--force", *names, check=False)
        engine.docker("volume", "rm", "--force", *volumes, check=False)


def test_the_container_health_follows_healthz(engine: Engine, roles_image: str):
    """The image's HEALTHCHECK asks /healthz: where nothing answers on the metrics port, the
    container turns unhealthy (the healthy case is in the test above)."""
    name = f"nohealth{uuid.uuid4().hex[:8]}"
    try:
        engine.docker(
            "run", "--detach", "--name", name, "--network", "host", "--entrypoint", "sleep",
            roles_image, "600",
        )  # fmt: skip
        _await_health(engine, name, "unhealthy", timeout_s=180)
    finally:
        engine.docker("rm", "--force", name, check=False)

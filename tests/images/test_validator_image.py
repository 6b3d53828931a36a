"""The validator's image (Dockerfile target `exactly-validator`) auditing a flow the roles' image
copied: `exactly validate --require-complete` in the container, as uid 10001, downloading and
compiling nothing, finds it clean; with one destination record written twice it finds the
duplicate and exits 1."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.images.conftest import note
from tests.images.engine import Engine
from tests.kafka_helpers import create_topic, produce_numbered
from tests.replication.staging import assert_exactly_once, await_records, read_source

pytestmark = [pytest.mark.images, pytest.mark.timeout(2400)]


@pytest.fixture
def copied_flow(
    engine: Engine, roles_image: str, source_cluster, target_cluster, unique_topic
) -> Iterator[dict[str, str]]:
    """A flow of two topics copied by the roles' image, traffic stopped: its environment."""
    topics = [unique_topic("audited-a"), unique_topic("audited-b")]
    for topic in topics:
        create_topic(source_cluster.bootstrap_servers, topic, 3)
        produce_numbered(source_cluster.bootstrap_servers, topic, 3, 0, 2000)
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": "|".join(t.replace(".", "[.]") for t in topics),
        "REPLICATION_FLOW": f"audit{uuid.uuid4().hex[:8]}",
        "METRICS_PORT": "0",
    }
    name = f"{env['REPLICATION_FLOW']}-roles"
    try:
        engine.docker(
            "run", "--detach", "--name", name, "--network", "host", "--read-only",
            "--tmpfs", "/tmp", "--tmpfs", "/var/lib/exactly:uid=10001,gid=10001",
            *[arg for key, value in env.items() for arg in ("--env", f"{key}={value}")],
            roles_image,
        )  # fmt: skip
        source = read_source(source_cluster.bootstrap_servers, topics)
        destination = await_records(target_cluster.bootstrap_servers, set(topics), 4000, 180)
        assert_exactly_once(source_cluster, source, destination)
        yield env
    finally:
        engine.docker("rm", "--force", name, check=False)


def _validate(engine: Engine, image: str, env: dict[str, str], out: Path) -> tuple[int, dict]:
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o777)  # the container's user (10001) writes the report here
    started = time.monotonic()
    done = engine.docker(
        "run", "--rm", "--network", "host", "--tmpfs", "/tmp",
        "--volume", f"{out}:/reports",
        *[arg for key, value in env.items() for arg in ("--env", f"{key}={value}")],
        image, "validate", "--require-complete", "--report", "/reports/report.json",
        "--chart", "/reports/report.html",
        timeout=900, check=False,
    )  # fmt: skip
    note(f"validator's container: exactly validate took {time.monotonic() - started:.0f} s")
    report = out / "report.json"
    assert report.exists(), done.stdout + done.stderr[-4000:]
    # Nothing downloaded or compiled at run time: the jars are in the image.
    assert "downloading" not in done.stderr.lower(), done.stderr[-4000:]
    return done.returncode, json.loads(report.read_text())


def _duplicate_one_record(bootstrap: str, topic: str) -> None:
    """Write the first record of partition 0 once more, headers (its provenance) and all."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        message = None
        deadline = time.monotonic() + 30
        while message is None or message.error() is not None:
            assert time.monotonic() < deadline, "no record to duplicate"
            message = consumer.poll(1.0)
    finally:
        consumer.close()
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(
        topic,
        key=message.key(),
        value=message.value(),
        headers=message.headers(),
        partition=0,
        timestamp=message.timestamp()[1],
    )
    assert producer.flush(30) == 0


def test_the_validator_image_proves_the_flow_clean_then_finds_a_planted_duplicate(
    engine: Engine, validator_image: str, copied_flow: dict[str, str], target_cluster, tmp_path
):
    status, report = _validate(engine, validator_image, copied_flow, tmp_path / "clean")
    assert status == 0, report["totals"]
    assert report["totals"]["matched"] == 4000

    topic = copied_flow["REPLICATION_TOPICS_INCLUDE"].split("|")[0].replace("[.]", ".")
    _duplicate_one_record(target_cluster.bootstrap_servers, topic)
    status, report = _validate(engine, validator_image, copied_flow, tmp_path / "dirty")
    assert status == 1, report["totals"]
    assert report["totals"]["duplicated"] == 1, report["totals"]

"""`exactly validate` against real Kafka (issue 6): a clean copy passes, each planted fault is
reported where it is, with and without the provenance header, on local[*] and on a standalone
Spark cluster; bad input is one line and exit 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Producer

from envelope import HEADER_PROVENANCE, encode_provenance
from tests.deploy.dockerfile import as_argv, stage_runs
from tests.kafka_helpers import create_topic
from tests.replication.processes import REPOSITORY_ROOT
from tests.validator.planting import Planted, copy_to_destination, create_source
from tests.validator.running import SPARK_SUBMIT_MASTER, Validation, run_validate
from tests.validator.spark_standalone import standalone_spark
from validator.kinds import DISCREPANCY_KINDS, IN_FLIGHT

pytestmark = pytest.mark.timeout(900)


def _env(source_cluster, target_cluster) -> dict[str, str]:
    return {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source_cluster.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target_cluster.bootstrap_servers,
    }


def _topic(label: str) -> str:
    return f"validate.{label}.{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def source_topic(source_cluster):
    """One source topic for every test here; each test copies it to a destination of its own."""
    topic = _topic("source")
    return topic, create_source(source_cluster.bootstrap_servers, topic)


def _copy(target_cluster, source_cluster, source_topic, *, provenance: bool, faults: bool):
    topic, records = source_topic
    destination = _topic("copy")
    planted = copy_to_destination(
        target_cluster.bootstrap_servers,
        destination,
        records,
        source_cluster_id=source_cluster.cluster_id if provenance else None,
        faults=faults,
    )
    # The source topic under the copy's name: the flow's rename rule, as a user would set it.
    settings = {
        "KAFKA_CLUSTERS_SOURCE_TOPIC": topic,
        "KAFKA_CLUSTERS_DESTINATION_TOPIC": destination,
    }
    return settings, planted


def _assert_planted_faults_reported(result: Validation, planted: list[Planted], match: str):
    assert result.status == 1, result.stderr
    report = result.report
    assert report["verdict"] == "discrepancy"
    assert {t["match"] for t in report["topics"]} == {match}
    # The merge met the faults and handed the topic to the join plan, which names them (the
    # progress lines: stderr, or stdout under spark-submit).
    assert "merging" in result.stdout + result.stderr, result.stdout + result.stderr
    assert {t["plan"] for t in report["topics"]} == {"join"}
    totals = report["totals"]
    planted_kinds = {p.kind for p in planted}
    for kind in DISCREPANCY_KINDS:
        assert totals[kind] == (1 if kind in planted_kinds else 0), (kind, totals)
    assert totals[IN_FLIGHT] == 0
    assert totals["outside_range"] == 0
    for fault in planted:
        reported = [
            (
                e["partition"],
                e["source_offset"],
                e["destination_partition"],
                e["destination_offset"],
            )
            for e in result.examples(fault.kind)
        ]
        wanted = {
            (
                fault.partition,
                fault.source_offset,
                fault.destination_partition,
                fault.destination_offset,
            )
        }
        if fault.or_at is not None:
            wanted.add((fault.partition, fault.or_at[0], fault.partition, fault.or_at[1]))
        assert wanted & set(reported), (fault, reported)
        # What a person reads on the terminal names the topic, partition and both offsets.
        assert f"source offset {fault.source_offset}" in result.stdout or fault.or_at
    assert "DISCREPANCY" in result.stdout
    assert result.chart.read_text().count("<svg") >= 1


@pytest.mark.slow
@pytest.mark.spark
def test_planted_faults_are_reported_by_provenance_on_a_standalone_spark_cluster(
    source_cluster, target_cluster, source_topic, tmp_path
):
    settings, planted = _copy(
        target_cluster, source_cluster, source_topic, provenance=True, faults=True
    )
    with standalone_spark(tmp_path / "spark") as spark:
        result = run_validate(
            # The cluster is on loopback, so the driver is reachable there too.
            {**_env(source_cluster, target_cluster), **settings, "SPARK_LOCAL_IP": "127.0.0.1"},
            tmp_path / "out",
            "--master",
            spark.master_url,
        )
        applications = spark.status()
    _assert_planted_faults_reported(result, planted, "provenance")
    assert result.report["master"] == spark.master_url
    # The work ran on the cluster's executors, not in the driver.
    ran = [*applications["activeapps"], *applications["completedapps"]]
    assert any(a["name"] == "exactly-validate" for a in ran), ran


@pytest.mark.slow
@pytest.mark.spark
def test_planted_faults_are_reported_by_content_without_the_header_under_spark_submit(
    source_cluster, target_cluster, source_topic, tmp_path
):
    settings, planted = _copy(
        target_cluster, source_cluster, source_topic, provenance=False, faults=True
    )
    result = run_validate(
        {**_env(source_cluster, target_cluster), **settings},
        tmp_path,
        spark_submit=True,
    )
    _assert_planted_faults_reported(result, planted, "content")
    assert result.report["master"] == SPARK_SUBMIT_MASTER  # spark-submit's, not overridden


def test_a_partial_copy_without_the_header_is_clean_from_since_with_the_rest_in_flight(
    source_cluster, target_cluster, source_topic, tmp_path
):
    topic, records = source_topic
    destination = _topic("partial")
    # Replication has reached offset 29 of each partition (past the aborted transaction's
    # offsets); the rest is on its way, which is not a loss.
    copied = [r for r in records if r.offset < 30]
    copy_to_destination(
        target_cluster.bootstrap_servers, destination, copied, source_cluster_id=None, faults=False
    )
    env = {
        **_env(source_cluster, target_cluster),
        "KAFKA_CLUSTERS_SOURCE_TOPIC": topic,
        "KAFKA_CLUSTERS_DESTINATION_TOPIC": destination,
    }
    # --since cuts both sides at the first record of that timestamp: the 6th of each partition.
    since = min(r.timestamp[1] for r in records if r.offset == 5)
    checked = [r for r in copied if r.offset >= 5]
    result = run_validate(env, tmp_path, "--since", str(since))
    assert result.status == 0, result.stdout + result.stderr
    report = result.report
    assert report["verdict"] == "clean"
    assert report["since_ms"] == since
    assert all(p["clean"] and p["match"] == "content" for p in report["partitions"])
    assert all(p["source_range"][0] == p["destination_range"][0] == 5 for p in report["partitions"])
    assert report["totals"]["matched"] == len(checked) == report["totals"]["destination_records"]
    assert report["totals"][IN_FLIGHT] == len(records) - len(copied)
    assert report["totals"]["missing"] == 0
    assert "EXACTLY ONCE" in result.stdout
    assert "still in flight" in result.stdout


# The merge handing the topic to the join (auto) in the default suite, the join alone in make
# test-spark (a Spark audit each: neither the default suite nor CI has room for it).
@pytest.mark.parametrize(
    "plan", [pytest.param("join", marks=[pytest.mark.slow, pytest.mark.spark]), "auto"]
)
def test_null_header_values_lost_in_the_copy_are_a_headers_mismatch(
    source_cluster, target_cluster, tmp_path, plan
):
    """[("h", null), ("v", null)] copied as [("h", "v")]: the same bytes in the same order, told
    apart only by which of them are null."""
    topic, destination = _topic("nulls"), _topic("nulls.copy")
    create_topic(source_cluster.bootstrap_servers, topic, 1)
    create_topic(target_cluster.bootstrap_servers, destination, 1)
    source = [[("h", None), ("v", None)], [("h", b"1")], [("h", b"")]]
    copied = [[("h", b"v")], [("h", b"1")], [("h", None)]]
    now = int(time.time() * 1000)  # within the topics' retention
    for bootstrap, name, lists, origin in (
        (source_cluster.bootstrap_servers, topic, source, False),
        (target_cluster.bootstrap_servers, destination, copied, True),
    ):
        producer = Producer({"bootstrap.servers": bootstrap})
        for offset, headers in enumerate(lists):
            if origin:
                provenance = encode_provenance(source_cluster.cluster_id, 0, offset)
                headers = [*headers, (HEADER_PROVENANCE, provenance)]
            producer.produce(name, value=b"v%d" % offset, headers=headers, timestamp=now + offset)
        assert producer.flush(30) == 0
    env = {
        **_env(source_cluster, target_cluster),
        "KAFKA_CLUSTERS_SOURCE_TOPIC": topic,
        "KAFKA_CLUSTERS_DESTINATION_TOPIC": destination,
    }
    result = run_validate(env, tmp_path, "--plan", plan)
    assert result.status == 1, result.stdout + result.stderr
    assert result.report is not None
    assert result.report["totals"]["headers_mismatch"] == 2, result.report["totals"]
    # Offset 2 (an empty value for a null one) hashed apart before; offset 0 did not.
    assert 0 in {e["source_offset"] for e in result.examples("headers_mismatch")}


@pytest.mark.parametrize("case", ["unreachable", "unknown topic", "empty range"])
def test_bad_input_is_one_line_and_exit_status_2(source_cluster, target_cluster, tmp_path, case):
    env = _env(source_cluster, target_cluster)
    args: list[str] = []
    if case == "unreachable":
        env["KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS"] = "127.0.0.1:1"
        args = ["--topic", "anything"]
        expected = "cannot reach the source cluster at 127.0.0.1:1"
    elif case == "unknown topic":
        args = ["--topic", "no.such.topic"]
        expected = "unknown topic no.such.topic on the source cluster"
    else:
        topic = _topic("empty")
        create_topic(source_cluster.bootstrap_servers, topic, 3)
        create_topic(target_cluster.bootstrap_servers, topic, 3)
        args = ["--topic", topic]
        expected = f"nothing to check: every partition of {topic} is empty"
    result = run_validate(env, tmp_path, *args, timeout_s=60)
    assert result.status == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, lines  # the step line, then the error
    assert lines[-1].startswith("exactly validate: "), lines
    assert expected in lines[-1], lines
    assert result.report is None  # no verdict, so no report that could be mistaken for one


@pytest.mark.parametrize("unwritable", ["--report", "--chart"])
def test_a_report_path_that_cannot_be_written_is_bad_input_before_the_audit(
    source_cluster, target_cluster, source_topic, tmp_path, unwritable
):
    """Found only after the audit, it would cost the verdict and exit 1, read as a discrepancy.
    The check leaves no file behind that could be taken for a report."""
    topic, _records = source_topic
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    path = blocker / "out"
    env = _env(source_cluster, target_cluster)
    out = tmp_path / "out"
    result = run_validate(env, out, "--topic", topic, unwritable, str(path), timeout_s=60)
    assert result.status == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"exactly validate: cannot write {path}: "), line
    assert result.report is None  # out/report.json: checked first when writable, then removed
    assert not (out / "report.html").exists()


# A Spark session on the image's jars alone: in make test-spark (by hand, outside CI), where
# make test-images's validator image audits with the same jars in CI.
@pytest.mark.slow
@pytest.mark.spark
def test_the_validator_images_connector_jars_audit_with_nothing_resolved(
    source_cluster, target_cluster, source_topic, tmp_path
):
    """The validator image's way (Dockerfile, stage exactly-validator): the jars the image build
    copies from deps/spark-kafka-connector.xml and the merge jar it builds, by the Dockerfile's
    own commands (offline here: `make install` resolved them), given as EXACTLY_SPARK_JARS."""
    jars = tmp_path / "spark-jars"
    (copy_jars,) = stage_runs("connector")
    argv = as_argv(
        copy_jars,
        {
            "/deps/pom.xml": str(REPOSITORY_ROOT / "deps" / "spark-kafka-connector.xml"),
            "/opt/spark-jars": str(jars),
        },
    )
    subprocess.run([argv[0], "--offline", *argv[1:]], check=True, timeout=300)
    assert any(jars.glob("spark-sql-kafka-0-10_2.13-*.jar")), sorted(jars.iterdir())
    # The merge jar, by the image's own command: compiled against those jars, into a cache of
    # its own (not this machine's), and copied beside them as the image's last stage does.
    (build_jar,) = [run for run in stage_runs("merge-jar") if "validator.merge_jar" in run]
    built = tmp_path / "merge-jar"
    command = build_jar.replace("/opt/spark-jars", str(jars))
    command = command.replace("/opt/merge-jar", str(built))
    command = command.replace("/opt/exactly/bin/python", sys.executable)
    subprocess.run(
        ["bash", "-c", command],
        check=True,
        timeout=300,
        env={**os.environ, "LOCALKAFKA_CACHE_DIR": str(tmp_path / "cache")},
    )
    shutil.copy(built / "exactly-validator-merge.jar", jars)
    settings, _planted = _copy(
        target_cluster, source_cluster, source_topic, provenance=True, faults=False
    )
    result = run_validate(
        {
            **_env(source_cluster, target_cluster),
            **settings,
            "EXACTLY_SPARK_JARS": f"{jars}/*.jar",
        },
        tmp_path / "out",
    )
    assert result.status == 0, result.stdout + result.stderr
    assert result.report["verdict"] == "clean"
    assert {t["plan"] for t in result.report["topics"]} == {"merge"}
    assert "merge plan's jar" not in result.stderr  # neither built nor missing
    # Spark's package resolver (Ivy) never ran: it announces itself on stderr when it does.
    assert ":: resolving dependencies ::" not in result.stderr, result.stderr

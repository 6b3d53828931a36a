"""A flow of both stages between the two three-node clusters under live traffic, a fault in the
middle, and what a user checks afterwards: every committed source record on the destination
exactly once (read back here, and audited on Spark by `exactly validate --require-complete`),
no role exited, and how long the destination stood still."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from exactly.harness.audit import run_audit
from localkafka import LocalCluster
from runtime.names import FlowNames
from tests.kafka_helpers import create_topic
from tests.nodes.arrivals import ArrivalWatch, Stall
from tests.replication.datamix import ContinuousProducer
from tests.replication.processes import RoleProcess, RoleProcesses
from tests.replication.staging import assert_exactly_once, await_records, read_source

PARTITIONS = 6
# How long a killed node stays down before it starts again.
HOLD_S = 8.0
# How long a restarted node may take to rejoin with every replica in sync (start_node): a JVM
# start, log recovery and catching up, on a loaded machine.
RESTART_S = 180.0
# localkafka's broker session (broker_config.py): a SIGKILLed node's partitions move after it.
SESSION_S = 6.0
# What a SIGKILL may stall the destination for: Kafka's failover (the session, then an election
# and a leader or coordinator that loads its log: up to 7.6 s for the offsets of stage 2's group
# on a just-started JVM here), the node's restart after HOLD_S, and on the target librdkafka's
# hung send_offsets_to_transaction (#5456, #5511: about one target event in two here), which
# stage 2 meets with its deadline (5 s) and a new producer whose transaction starts over.
FAILOVER_S = SESSION_S + 5 + HOLD_S
HUNG_PRODUCER_S = 18.0
# Modest rates: six replicating JVMs, both stages and the producers share two cores here, and
# at 1,300 records/s a restarted node's replicas did not catch up within 90 s.
RECORDS_PER_SECOND = 400
# Transactional traffic beside it, on a topic of its own: one transaction spans its partitions,
# so a dead leader stops the whole of it at the source, which would hide what the product does.
TRANSACTIONAL_PARTITIONS = 3
TRANSACTIONAL_RECORDS_PER_SECOND = 100
INSTANCE = "nodes"
# The listener each node has for roles that reach it through a proxy (conftest's network).
ROLES_LISTENER = "VIA_ROLES"
# What the measured stalls are reported in, one line per fault (conftest's summary).
STALLS: list[str] = []


@dataclass
class Flow:
    source: LocalCluster
    target: LocalCluster
    topic: str  # plain traffic, whose arrivals are timed
    transactional_topic: str
    names: FlowNames
    env: dict[str, str]
    audit_dir: Path  # the Spark audit's report and log

    @property
    def transactional_id(self) -> str:
        return self.names.deduplicator_transactional_id(INSTANCE)


def make_flow(
    clusters: dict[str, LocalCluster], unique_topic: Callable[[str], str], tmp_path, **extra: str
) -> Flow:
    source, target = clusters["source"], clusters["target"]
    topic = unique_topic("nodes")
    transactional_topic = unique_topic("nodes-txn")
    create_topic(source.bootstrap_servers, topic, PARTITIONS)
    create_topic(source.bootstrap_servers, transactional_topic, TRANSACTIONAL_PARTITIONS)
    flow = unique_topic("flow").replace(".", "-")[-90:]
    env = {
        "KAFKA_CLUSTERS_SOURCE_BOOTSTRAP_SERVERS": source.bootstrap_servers,
        "KAFKA_CLUSTERS_DESTINATION_BOOTSTRAP_SERVERS": target.bootstrap_servers,
        "REPLICATION_TOPICS_INCLUDE": f"{re.escape(topic)}|{re.escape(transactional_topic)}",
        "REPLICATION_FLOW": flow,
        "REPLICATION_INSTANCE_ID": INSTANCE,
        "REPLICATION_ENVELOPE_MAX_RECORDS": "50",
        "METRICS_PORT": "0",
        "STATE_DIR": str(tmp_path / "state"),
        **extra,
    }
    return Flow(
        source, target, topic, transactional_topic, FlowNames(flow), env, tmp_path / "audit"
    )


def run_through(
    flow: Flow,
    roles: RoleProcesses,
    fault: Callable[[], None],
    *,
    label: str,
    partition: int = 0,
    settle_s: float = 5.0,
    deduplicator_env: Mapping[str, str] | None = None,
) -> tuple[Stall, ArrivalWatch]:
    """Both stages under traffic, ``fault`` (which returns once it has healed), then the
    verdict. Returns the stalls measured from the fault's start until traffic stops, and the
    watch of the arrivals, to measure other windows. ``deduplicator_env`` adds to stage 2's
    environment (its own METRICS_PORT, to scrape it during the fault)."""
    began = time.monotonic()
    with (
        ContinuousProducer(
            flow.source.bootstrap_servers,
            {flow.topic: PARTITIONS},
            records_per_second=RECORDS_PER_SECOND,
        ) as producer,
        ContinuousProducer(
            flow.source.bootstrap_servers,
            {flow.transactional_topic: TRANSACTIONAL_PARTITIONS},
            records_per_second=TRANSACTIONAL_RECORDS_PER_SECOND,
            transactional_id=f"{flow.transactional_topic}-producer",
        ) as transactional,
    ):
        stages = [
            roles.start("replicator", flow.env),
            roles.start("deduplicator", {**flow.env, **(deduplicator_env or {})}),
        ]
        await_records(flow.target.bootstrap_servers, {flow.topic}, 1, 120)
        with ArrivalWatch(flow.target.bootstrap_servers, flow.topic, PARTITIONS) as watch:
            _await_arrivals(watch, stages)
            started = time.monotonic()
            fault()
            fault_s = time.monotonic() - started
            time.sleep(settle_s)
            stopped = time.monotonic()
            produced = producer.stop() + transactional.stop()
            stall = watch.stall(started, stopped, partition)
    assert produced > RECORDS_PER_SECOND, produced
    assert not producer.failures, producer.failures[:3]
    _, audit_s = assert_both_verdicts(flow, 240)
    for stage in stages:
        # No role exits on a single broker's failure: the orchestrator has nothing to do.
        assert stage.is_running(), f"{stage.name} exited {stage.returncode}\n{stage.log_tail()}"
    for stage in stages:
        assert stage.terminate(30) == 0, stage.log_tail()
    # A hung send_offsets_to_transaction (librdkafka #5456) mended in the process, not by exit.
    replaced = stages[1].log_text().count("transactional producer hung; replacing it")
    STALLS.append(
        f"{label}: whole destination stalled {stall.whole_s:.1f} s, "
        f"partition {partition} {stall.partition_s:.1f} s ({produced} records, exactly once"
        + (f"; stage 2 replaced {replaced} hung producer(s)" if replaced else "")
        + f"; the fault took {fault_s:.0f} s of the flow's {time.monotonic() - began:.0f} s"
        + f"; the Spark audit clean in {audit_s:.0f} s)"
    )
    return stall, watch


def assert_both_verdicts(flow: Flow, timeout_s: float) -> tuple[int, float]:
    """Both topics of the flow copied exactly once, by the record-by-record verdict read here
    (the destination awaited up to ``timeout_s``) and by the Spark audit. Returns the committed
    source records and the audit's seconds."""
    topics = [flow.topic, flow.transactional_topic]
    source = read_source(flow.source.bootstrap_servers, topics)
    records = sum(map(len, source.values()))
    destination = await_records(flow.target.bootstrap_servers, set(topics), records, timeout_s)
    assert_exactly_once(flow.source, source, destination)
    return records, _assert_audited(flow, records)


def _assert_audited(flow: Flow, source_records: int) -> float:
    """The second verdict, as a user gets it: `exactly validate --require-complete` on local
    Spark, through Spark's own Kafka reader and the provenance header, over both topics of the
    flow. Clean, and every committed source record matched (a clean audit of fewer records
    would be one that read less than the first verdict did). Returns its seconds."""
    audit = run_audit(
        source=flow.source.bootstrap_servers,
        destination=flow.target.bootstrap_servers,
        include=flow.env["REPLICATION_TOPICS_INCLUDE"],
        report_dir=flow.audit_dir,
        log_dir=flow.audit_dir,
    )
    log = audit.log.read_text(errors="replace")[-3000:] if audit.log.exists() else ""
    assert audit.clean, f"{audit.headline()}\n{log}"
    assert audit.totals.get("matched") == source_records, f"{audit.headline()}\n{log}"
    return audit.seconds


def _await_arrivals(watch: ArrivalWatch, stages: list[RoleProcess]) -> None:
    deadline = time.monotonic() + 60
    while watch.count() < RECORDS_PER_SECOND:
        for stage in stages:
            assert stage.is_running(), stage.log_tail()
        assert time.monotonic() < deadline, "records did not flow steadily within 60 s"
        time.sleep(0.2)

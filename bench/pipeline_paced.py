"""The phases of bench/pipeline_vs_mirrormaker.py under paced traffic: each record's latency
from production to visibility, and recovery after SIGKILLs (when records flow again, full speed,
caught up), with every record checked on the destination after the kills."""

from __future__ import annotations

import time
from contextlib import ExitStack, closing

from bench.flowmeter import exactly_once
from bench.pacing import PacedProducer, collect_arrivals, probe_until_visible
from bench.pipeline_candidates import check_mm2, check_roles
from bench.pipeline_throughput import ThroughputBench
from bench.recovery import FreshRecords, Recovery, Sampler, analyse_recovery
from bench.replicator_throughput import PARTITIONS, create_topic

START_TIMEOUT_S = 180.0
LATENCY_WARMUP_S = 3.0
LATENCY_WINDOW_S = 20.0
RECOVERY_WARMUP_S = 8.0
RECOVERY_TIMEOUT_S = 90.0
MM2_RECOVERY_TIMEOUT_S = 240.0


class PacedBench(ThroughputBench):
    """The pipeline and MirrorMaker 2 exactly-once under paced production."""

    def latency(
        self, candidate: str, rate: float, tag: str = "lat"
    ) -> tuple[str, float, list[float]]:
        topic = f"latency-{'pipeline' if candidate == 'pipeline' else 'mm2eos'}-{tag}"
        create_topic(self.source, topic)
        print(f"\n== latency of the {candidate} at {rate:,.0f} records/s", flush=True)
        with self._candidate(candidate, topic, tag) as (destination, check_alive):
            probe_until_visible(
                self.source, self.target, topic, destination, PARTITIONS, START_TIMEOUT_S
            )
            with PacedProducer(self.source, topic, PARTITIONS, rate, 100):
                time.sleep(LATENCY_WARMUP_S)
                window = (time.time(), time.time() + LATENCY_WINDOW_S)
                arrivals = collect_arrivals(
                    self.target, destination, PARTITIONS, window, check_alive, 120
                )
        return candidate, rate, [arrival.latency_ms for arrival in arrivals]

    def recovery_pipeline(self, rate: float) -> list[Recovery]:
        topic = "recovery-pipeline"
        create_topic(self.source, topic)
        flow = "bench-recovery"
        destination = f"pipeline.{topic}"
        print(f"\n== recovery of the pipeline at {rate:,.0f} records/s", flush=True)
        results = []
        with self._roles(flow, topic) as (replicator, deduplicator), ExitStack() as stack:

            def check_alive() -> None:
                check_roles(replicator, deduplicator)

            probe_until_visible(
                self.source, self.target, topic, destination, PARTITIONS, START_TIMEOUT_S
            )
            sampler = Sampler(self.source, topic, self.target, destination, PARTITIONS)
            fresh = stack.enter_context(closing(FreshRecords(self.target, destination, PARTITIONS)))
            with PacedProducer(self.source, topic, PARTITIONS, rate, 100):
                sampler.run_for(RECOVERY_WARMUP_S, check_alive)
                # The default configuration: each stage's identity is its host name.
                for victims in ([replicator], [deduplicator], [replicator, deduplicator]):
                    name = " and ".join(v.name for v in victims)
                    killed_at, moment = time.monotonic(), fresh.mark()
                    for victim in victims:
                        victim.kill()
                    for victim in victims:
                        victim.start()
                    sampler.run_until_recovered(killed_at, name, check_alive, RECOVERY_TIMEOUT_S)
                    results.append(
                        analyse_recovery(
                            sampler.samples, killed_at, name, _since(fresh, moment, killed_at)
                        )
                    )
            _report_exactness("pipeline", self.source, topic, self.target, destination)
        return results

    def recovery_mm2(self, rate: float) -> list[Recovery]:
        topic = "recovery-mm2eos"
        create_topic(self.source, topic)
        print(f"\n== recovery of MM2 exactly-once at {rate:,.0f} records/s", flush=True)
        with ExitStack() as stack:
            mm2 = stack.enter_context(self._mirrormaker("mm2eosrec", topic, exactly_once=True))
            destination = mm2.destination_topic
            probe_until_visible(
                self.source, self.target, topic, destination, PARTITIONS, START_TIMEOUT_S
            )
            sampler = Sampler(self.source, topic, self.target, destination, PARTITIONS)
            fresh = stack.enter_context(closing(FreshRecords(self.target, destination, PARTITIONS)))
            producer = stack.enter_context(PacedProducer(self.source, topic, PARTITIONS, rate, 100))
            sampler.run_for(RECOVERY_WARMUP_S, lambda: check_mm2(mm2))
            killed_at, moment = time.monotonic(), fresh.mark()
            mm2.kill()
            mm2.start()  # same alias: its offsets, configs and transactional ids
            sampler.run_until_recovered(
                killed_at, "MirrorMaker 2", lambda: check_mm2(mm2), MM2_RECOVERY_TIMEOUT_S
            )
            flowing = _since(fresh, moment, killed_at)
            producer.stop()  # MM2 goes on copying what is left
            _report_exactness("MirrorMaker 2 (EOS)", self.source, topic, self.target, destination)
        result = analyse_recovery(sampler.samples, killed_at, "MirrorMaker 2 (EOS)", flowing)
        return [result]


def _since(fresh: FreshRecords, moment: int, killed_at: float) -> float | None:
    seen = fresh.first_seen(moment)
    return None if seen is None else seen - killed_at


def _report_exactness(
    candidate: str, source: str, topic: str, target: str, destination: str
) -> None:
    """After the kills: every source record on the destination once, in order?"""
    records, missing, duplicated = exactly_once(source, topic, target, destination, PARTITIONS)
    print(
        f"   {candidate} after the kills: {records:,} source records, {missing:,} missing, "
        f"{duplicated:,} duplicated on the destination",
        flush=True,
    )

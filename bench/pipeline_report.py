"""What bench/pipeline_vs_mirrormaker.py prints: each phase's table and what its columns mean."""

from __future__ import annotations

from bench.common import percentile
from bench.pipeline_paced import LATENCY_WARMUP_S, LATENCY_WINDOW_S
from bench.pipeline_throughput import Row
from bench.recovery import Recovery
from bench.replicator_throughput import PARTITIONS


def report_throughput(row: Row) -> None:
    megabytes = row.count * (row.size + 24) / 1e6  # value, key and header
    plain = row.timings["plain loop"].seconds
    eos = row.timings["MM2 exactly-once"].seconds
    print(
        f"\n{row.size} B values, {row.count:,} records in {PARTITIONS} partitions; time from the "
        "first record appended on the target to the last visible (read_committed), the median "
        "of each candidate's rounds:"
    )
    print(
        f"  {'candidate':<24} {'records/s':>10} {'MB/s':>6} {'seconds':>7} {'start-up':>8} "
        f"{'cpu s/M':>7} {'brokers':>7} {'(JIT)':>7} {'x plain':>7} {'x MM2 EOS':>9} "
        f"{'extra offsets':>13}"
    )
    for name, timing in row.timings.items():
        print(
            f"  {name:<24} {row.count / timing.seconds:>10,.0f} "
            f"{megabytes / timing.seconds:>6.1f} {timing.seconds:>7.1f} {timing.startup:>8.1f} "
            f"{timing.cpu_role / row.count * 1e6:>7.2f} "
            f"{timing.cpu_brokers / row.count * 1e6:>7.2f} "
            f"{timing.cpu_brokers_jit / row.count * 1e6:>7.2f} "
            f"{plain / timing.seconds:>7.2f} {eos / timing.seconds:>9.2f} "
            f"{row.extra_offsets[name]:>13,}"
        )
    if any(len(runs) > 1 for runs in row.rounds.values()):
        print("  each round's records/s (the table shows the median round):")
        for name, runs in row.rounds.items():
            print(f"    {name:<24} " + ", ".join(f"{row.count / t.seconds:,.0f}" for t in runs))
    short = [n for n, timing in row.timings.items() if timing.seconds < 10]
    if short:
        print(f"  (shorter than 10 s: {', '.join(short)}; raise the record count)")


def report_summary(rows: list[Row]) -> None:
    print(
        "\nrecords/s: the source records over the copy's time; MB/s counts value + key + header; "
        "start-up: launch to first record on the target (not in the rate); cpu s/M: CPU seconds "
        "per million records of the candidate's processes and of both brokers over the copy; "
        "x plain, x MM2 EOS: throughput ratio (higher is faster); extra offsets: destination "
        "offsets beyond the records (transaction markers, or duplicates where there are none)."
    )
    print(
        "\ncompression: the plain loop's and MirrorMaker 2's producers lz4 (the same settings); "
        "the pipeline's staging as REPLICATION_STAGING_COMPRESSION says (default lz4), its "
        "destination none (stage 2's producer, librdkafka's default)"
    )
    print("\npipeline, the targets of issue 16 (>= 1.5x MM2 exactly-once, >= 0.7x the plain loop):")
    for row in rows:
        pipeline = row.timings["pipeline"].seconds
        print(
            f"  {row.size:>5} B: {row.timings['MM2 exactly-once'].seconds / pipeline:.2f}x "
            f"MM2 exactly-once, {row.timings['plain loop'].seconds / pipeline:.2f}x the plain "
            f"loop, {row.timings['MM2 at-least-once'].seconds / pipeline:.2f}x MM2 at-least-once"
        )


def report_latency(results: list[tuple[str, float, list[float]]]) -> None:
    print(
        f"\nlatency, production time (the record's CreateTime, producer linger 1 ms) to "
        f"visibility under read_committed on the destination, 100 B records over "
        f"{LATENCY_WINDOW_S:.0f} s after {LATENCY_WARMUP_S:.0f} s of warm-up:"
    )
    for candidate, rate, latencies in results:
        print(
            f"  {candidate:<18} at {rate:>8,.0f} records/s: p50 {percentile(latencies, 50):>6.0f}"
            f" ms, p99 {percentile(latencies, 99):>6.0f} ms, max {max(latencies):>6.0f} ms "
            f"({len(latencies):,} records)"
        )


def _describe(result: Recovery) -> str:
    def seconds(value: float | None) -> str:
        return "not within the wait" if value is None else f"{value:.1f} s"

    full_speed = (
        f"full speed (>= 90 % of {result.produce_rate:,.0f}/s) again after "
        f"{seconds(result.full_speed_s)}"
        if result.dipped
        else f"never below half of {result.produce_rate:,.0f}/s over any 1 s"
    )
    extra = result.max_lag - result.lag_before
    return (
        f"SIGKILL {result.victim}: records produced after the kill visible after "
        f"{seconds(result.flowing_again_s)}; {full_speed}, caught up after "
        f"{seconds(result.caught_up_s)}; longest stretch without progress "
        f"{result.stalled_s:.1f} s; lag {result.lag_before:,.0f} records before, "
        f"{result.max_lag:,} at most (+{extra / result.produce_rate:.1f} s of production)"
    )


def report_recovery(results: list[Recovery], rate: float) -> None:
    print(
        f"\nrecovery while producing {rate:,.0f} records/s, each victim SIGKILLed and restarted at "
        "once: visible after = kill to the first record produced after the kill seen by a "
        "read_committed reader of the destination's tail (docs/design.md §10: records flowing "
        "again); full speed = the first second after the kill's dip in which the destination "
        "gained >= 90 % of the produce rate; caught up = after the largest lag, records produced "
        "but not yet visible back to <= 2x the lag before the kill + 0.1 s of production "
        "(samples every 0.1 s):"
    )
    for result in results:
        print(f"  {_describe(result)}")

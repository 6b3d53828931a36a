"""`exactly demo` as a user runs it: the verdict, the crashes, the consumer-group failover, and
nothing left running afterwards (also after Ctrl-C); and the verdict's and the failover's
comparisons on hand-made records, so they can fail."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from envelope import HEADER_PROVENANCE, encode_provenance
from exactly.harness.failover import ConsumedRecord, StoppedGroup, compare_resumed
from exactly.harness.verdict import Reading, Record, compare_partition, judge
from localkafka import LocalCluster
from tests.commands import exactly_command, run_exactly
from tests.secured import assert_no_secret, secrets_of

CLUSTER_ID = "demo-cluster-id"
VERDICT_LINE = re.compile(
    r"^EXACTLY ONCE: (\d+) records in 12 partitions, 0 missing, 0 duplicated, 0 changed$", re.M
)
PROCESSED_LINE = re.compile(
    r"demo-app processed (\d+) of (\d+) records of demo\.orders on the source and stopped"
)
AUDIT_LINE = re.compile(
    r"exactly validate CLEAN: (\d+) of (\d+) source records matched, 0 missing, 0 duplicated, "
    r"0 out_of_order"
)
RESUMED_LINE = re.compile(
    r"demo-app resumed on the target: read (\d+) records, 0 read again, 0 skipped"
)


def _demo_env(tmp_path: Path) -> dict[str, str]:
    # A state directory of its own: the demo's clusters are apart from the session's and from
    # any `exactly kafka up` of the person running the tests.
    return {**os.environ, "LOCALKAFKA_STATE_DIR": str(tmp_path / "state")}


def _survivors(tmp_path: Path) -> list[str]:
    """Live processes started by a demo run under `tmp_path`: the JVMs name their config there in
    their command line, and every child inherits LOCALKAFKA_STATE_DIR pointing there."""
    marker = str(tmp_path).encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if "State:\tZ" in (proc / "status").read_text():
                continue
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if marker in cmdline or marker in environ:
            command = cmdline.replace(b"\0", b" ")[:150].decode(errors="replace")
            found.append(f"{proc.name}: {command}")
    return found


@pytest.mark.kafka
# The secure demo in `make chaos`: the secured data-mix test checks the same secrets in `make test`.
@pytest.mark.parametrize(
    "secure",
    [False, pytest.param(True, marks=pytest.mark.chaos)],
    ids=["plaintext", "secure"],
)
def test_demo_survives_both_crashes_and_ends_with_a_clean_verdict(tmp_path, secure):
    started = time.monotonic()
    flags = ["--secure"] if secure else []
    result = run_exactly("demo", "--duration", "12", *flags, env=_demo_env(tmp_path), timeout_s=400)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    if secure:
        assert re.search(r"secured: .* \d+ grants of least privilege", output), output
        # No password and no line of a private key in what the demo shows or keeps.
        demo_dir = tmp_path / "state" / "demo"
        shown = {path.name: path.read_text() for path in (demo_dir / "run").glob("*.log")}
        shown["output"] = output
        clusters = [LocalCluster.open(demo_dir / name) for name in ("demo-source", "demo-target")]
        assert_no_secret(shown, secrets_of(*clusters))
    verdict = VERDICT_LINE.search(result.stdout)
    assert verdict, output
    assert int(verdict.group(1)) > 1000  # about 250 records/s for 12 s, minus the aborted ones
    assert re.search(r"killed replicator \(pid \d+\) with SIGKILL — restarting", output), output
    assert re.search(r"killed deduplicator \(pid \d+\) with SIGKILL — restarting", output), output
    assert re.search(r"aborted transactions: [1-9]\d* records on the source, none in the", output)
    assert "replicator stopped cleanly (exit status 0)" in output
    assert "deduplicator stopped cleanly (exit status 0)" in output
    # The failover: half of demo.orders processed on the source, the rest read on the target.
    processed, resumed = PROCESSED_LINE.search(output), RESUMED_LINE.search(output)
    assert processed, output
    assert resumed, output
    stopped_at, total = int(processed.group(1)), int(processed.group(2))
    assert 0 < stopped_at < total
    assert int(resumed.group(1)) == total - stopped_at
    assert re.search(r"offsetsync moved demo-app to the target in \d+\.\d s", output), output
    assert re.search(r"^FAILOVER EXACT: demo-app resumed on the target", output, re.M), output
    assert "offsetsync stopped cleanly (exit status 0)" in output
    # The second verdict, Spark's, on the same flow: every record the first one counted.
    audited = AUDIT_LINE.search(output)
    assert audited, output
    assert audited.group(1) == audited.group(2) == verdict.group(1)
    chart = re.search(r"the audit's report: (\S+)", output)
    assert chart, output
    assert Path(chart.group(1)).is_file()
    assert "nothing left running" in output
    assert "Traceback" not in output
    assert _survivors(tmp_path) == []
    print(f"demo --duration 12 {' '.join(flags)} took {time.monotonic() - started:.1f} s")


# In `make chaos`: test_topologies.py's active-active test checks the same in `make test`.
@pytest.mark.chaos
@pytest.mark.kafka
def test_the_active_active_demo_is_exactly_once_both_ways_and_shows_the_loop_counters(tmp_path):
    result = run_exactly(
        "demo",
        *("--topology", "active-active", "--duration", "12"),
        env=_demo_env(tmp_path),
        timeout_s=400,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # One verdict per direction, each over the records produced in its source cluster only.
    verdicts = VERDICT_LINE.findall(result.stdout)
    assert len(verdicts) == 2, output
    assert all(int(count) > 1000 for count in verdicts), verdicts
    for direction in ("A->B", "B->A"):
        passed = re.search(
            rf"loop prevention: {direction}'s stage 1 passed over (\d+) copies", output
        )
        assert passed, output
        assert int(passed.group(1)) > 0  # the other direction's copies, read and not copied
    assert "records that came back to where they were produced: 0" in output
    assert re.search(r"killed A->B replicator \(pid \d+\) with SIGKILL", output), output
    assert re.search(r"killed B->A deduplicator \(pid \d+\) with SIGKILL", output), output
    assert "nothing left running" in output
    assert "Traceback" not in output
    assert _survivors(tmp_path) == []


def test_the_active_active_demo_refuses_secure_with_one_line(tmp_path):
    result = run_exactly("demo", "--topology", "active-active", "--secure", env=_demo_env(tmp_path))
    assert result.returncode == 2
    assert "--secure runs the one-way demo only" in result.stderr


# The demo's clusters and stages started a second time: in make test-slow, to keep the
# default suite inside its 20 minutes (the demo's own run stays in it).
@pytest.mark.slow
@pytest.mark.kafka
def test_ctrl_c_in_the_middle_stops_everything_and_exits_130(tmp_path):
    log = tmp_path / "demo.out"
    with log.open("w") as out:
        demo = subprocess.Popen(
            [*exactly_command(), "demo", "--duration", "60"],
            env=_demo_env(tmp_path),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 180
        while "started deduplicator (pid" not in log.read_text():
            assert demo.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        time.sleep(3)  # the roles are at work now, and the traffic flows
        demo.send_signal(signal.SIGINT)
        status = demo.wait(120)
    finally:
        if demo.poll() is None:
            demo.kill()
    output = log.read_text()
    assert status == 130, output
    assert "interrupted (Ctrl-C): stopping the roles and the clusters" in output
    assert "nothing left running" in output
    assert "Traceback" not in output
    assert _survivors(tmp_path) == []


# --- the verdict's comparison -------------------------------------------------------------------


def _source(offset: int, value: bytes = b"v") -> Record:
    return Record(offset, b"k%d" % offset, value, (("h", b"1"),), 0, 1_700_000_000_000 + offset)


def _copy(
    record: Record, offset: int, *, partition: int = 0, origin_offset: int | None = None
) -> Record:
    origin = encode_provenance(
        CLUSTER_ID, partition, record.offset if origin_offset is None else origin_offset
    )
    return Record(
        offset,
        record.key,
        record.value,
        (*record.headers, (HEADER_PROVENANCE, origin)),
        record.timestamp_type,
        record.timestamp,
    )


def test_an_exact_copy_is_clean():
    source = [_source(offset) for offset in (0, 1, 5, 6)]  # gaps: aborted records, markers
    destination = [_copy(record, i) for i, record in enumerate(source)]
    verdict = judge(CLUSTER_ID, Reading({("t", 0): source}), Reading({("t", 0): destination}))
    assert verdict.clean
    assert verdict.headline() == (
        "EXACTLY ONCE: 4 records in 1 partitions, 0 missing, 0 duplicated, 0 changed"
    )


def test_every_kind_of_discrepancy_is_counted_and_named():
    s = [_source(offset) for offset in range(8)]
    altered = Record(9, s[1].key, b"other", s[1].headers, 0, s[1].timestamp)
    destination = [
        _copy(s[0], 0),  # matched
        _copy(s[0], 1),  # duplicated
        _copy(altered, 2, origin_offset=1),  # changed: value
        # s[2] never arrives: missing
        _copy(s[4], 3),  # matched
        _copy(s[3], 4),  # changed: out of order
        _copy(s[5], 5, origin_offset=99),  # changed: no committed source record (aborted?)
        _copy(s[6], 6, partition=3),  # changed: origin names another partition
        Record(7, s[7].key, s[7].value, s[7].headers, 0, s[7].timestamp),  # changed: no origin
    ]
    verdict = compare_partition(CLUSTER_ID, "t", 0, s, destination)
    assert (verdict.matched, verdict.missing, verdict.duplicated, verdict.changed) == (2, 4, 1, 5)
    assert verdict.uncommitted == 1
    assert not verdict.clean

    # Each destination record on its own, so that the per-partition limit hides no note.
    notes = "\n".join(
        note
        for record in destination
        for note in compare_partition(CLUSTER_ID, "t", 0, s, [record]).examples
    )
    assert "t[0] source offset 1: value differs" in notes
    assert "which is no committed source record" in notes
    assert "names source partition 3" in notes
    assert f"no {HEADER_PROVENANCE} header" in notes

    duplicated = compare_partition(CLUSTER_ID, "t", 0, s[:1], [_copy(s[0], 0), _copy(s[0], 1)])
    assert duplicated.examples == [
        "t[0] source offset 0 arrived again (destination offsets 0 and 1)"
    ]
    reordered = compare_partition(CLUSTER_ID, "t", 0, s[:2], [_copy(s[1], 0), _copy(s[0], 1)])
    assert reordered.examples == ["t[0] source offset 0 arrived out of order"]
    missing = compare_partition(CLUSTER_ID, "t", 0, s[:3], [_copy(s[0], 0)])
    assert missing.examples == ["t[0] source offset 1 and 1 more never arrived"]


def test_a_changed_header_timestamp_or_key_is_named():
    original = _source(0)
    copy = _copy(original, 0)
    changed = Record(
        0, b"other-key", copy.value, (("h", b"2"), copy.headers[-1]), 1, copy.timestamp + 1
    )
    verdict = compare_partition(CLUSTER_ID, "t", 0, [original], [changed])
    assert verdict.changed == 1
    assert verdict.examples == ["t[0] source offset 0: key, headers, timestamp differ"]


def test_a_partition_not_read_to_its_end_and_a_wrong_cluster_fail_the_verdict():
    source = {("t", 0): [_source(0)], ("t", 1): [_source(0)]}
    destination = {("t", 0): [_copy(_source(0), 0)], ("t", 1): [_copy(_source(0), 0)]}
    unread = judge(CLUSTER_ID, Reading(source), Reading(destination, unread={("t", 1)}))
    assert not unread.clean
    assert unread.headline().startswith("NOT EXACTLY ONCE: 2 records in 2 partitions")
    assert "1 partitions not read to their end" in unread.headline()

    foreign = judge("another-cluster", Reading(source), Reading(destination))
    assert foreign.total("changed") == 2
    assert foreign.total("missing") == 2
    assert not foreign.clean


# --- the failover's comparison ------------------------------------------------------------------


def _stopped(committed: int) -> StoppedGroup:
    return StoppedGroup("g", "t", {0: [_source(offset) for offset in range(6)]}, {0: committed})


def _consumed(record: Record, offset: int) -> ConsumedRecord:
    copy = _copy(record, offset)
    return ConsumedRecord(
        0, offset, copy.key, copy.value, copy.headers, (copy.timestamp_type, copy.timestamp)
    )


def test_a_group_resumed_at_the_next_record_is_exact():
    stopped = _stopped(committed=3)
    resumed = {0: [_consumed(_source(offset), offset) for offset in (3, 4, 5)]}
    result = compare_resumed(stopped, resumed)
    assert (result.processed, result.read, result.re_read, result.skipped) == (3, 3, 0, 0)
    assert result.exact


def test_a_group_resumed_too_early_or_too_late_is_not_exact():
    stopped = _stopped(committed=3)
    early = compare_resumed(stopped, {0: [_consumed(_source(o), o) for o in range(2, 6)]})
    assert (early.read, early.re_read, early.skipped, early.exact) == (4, 1, 0, False)
    late = compare_resumed(stopped, {0: [_consumed(_source(o), o) for o in (5,)]})
    assert (late.read, late.re_read, late.skipped, late.exact) == (1, 0, 2, False)
    changed = Record(4, b"k4", b"other", (("h", b"1"),), 0, _source(4).timestamp)
    altered = compare_resumed(
        stopped, {0: [_consumed(_source(3), 3), _consumed(changed, 4), _consumed(_source(5), 5)]}
    )
    assert (altered.re_read, altered.skipped, altered.exact) == (0, 1, False)

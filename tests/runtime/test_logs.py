"""Log lines as an operator reads them: one line per event, key=value or JSON, no payloads."""

import io
import json
import logging
import re
from datetime import UTC, datetime

import pytest

from runtime import get_logger

TS = re.compile(r"ts=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def lines(stream: io.StringIO) -> list[str]:
    text = stream.getvalue()
    assert text.endswith("\n")
    return text[:-1].split("\n")


def test_line_has_the_fixed_keys_then_the_fields_in_order(configure):
    out = configure()
    log = get_logger("replicator.loop")
    log.info("session ended", reason="delivery_error", topic="orders", partition=3, offset=1042)
    [line] = lines(out)
    ts, rest = line.split(" ", 1)
    assert TS.fullmatch(ts)
    assert rest == (
        'level=info role=replicator logger=replicator.loop msg="session ended" '
        "reason=delivery_error topic=orders partition=3 offset=1042"
    )


def test_timestamp_is_utc_with_milliseconds(configure):
    configure()
    [handler] = logging.getLogger().handlers
    record = logging.LogRecord("replicator.loop", logging.WARNING, __file__, 1, "x", None, None)
    record.created = datetime(2026, 11, 22, 1, 2, 3, 456000, tzinfo=UTC).timestamp()
    assert handler.format(record) == (
        "ts=2026-11-22T01:02:03.456Z level=warning role=replicator logger=replicator.loop msg=x"
    )


def test_values_are_quoted_only_when_they_must_be(configure):
    out = configure()
    get_logger("t").info(
        "m",
        plain="orders-eu.v2",
        path="/var/lib/state",
        space="two words",
        quote='say "hi"',
        equals="a=b",
        empty="",
        newline="one\ntwo",
        tab="a\tb",
        unicode="café",
    )
    [line] = lines(out)
    assert line.endswith(
        ' msg=m plain=orders-eu.v2 path=/var/lib/state space="two words" '
        'quote="say \\"hi\\"" equals="a=b" empty="" newline="one\\ntwo" tab="a\\tb" unicode=café'
    )


def test_other_values_render_plainly(configure):
    out = configure()
    get_logger("t").info(
        "m", yes=True, no=False, nothing=None, ratio=0.5, partitions=[0, 1, 2], lag={"p0": 4}
    )
    [line] = lines(out)
    assert line.endswith(" yes=true no=false nothing=null ratio=0.5 partitions=0,1,2 lag=p0:4")


def test_bytes_never_render(configure):
    payload = b"card=4111111111111111"
    out = configure()
    log = get_logger("t")
    log.info("m", value=payload, key=bytearray(b"k1"), view=memoryview(payload))
    log.info("m", batch=[payload, b""], headers={"h": payload})
    first, second = lines(out)
    assert first.endswith(' value="<21 bytes>" key="<2 bytes>" view="<21 bytes>"')
    assert second.endswith(' batch="<21 bytes>,<0 bytes>" headers="h:<21 bytes>"')
    assert "4111" not in out.getvalue()


def test_bytes_never_render_in_json(configure):
    out = configure(json=True)
    get_logger("t").info("m", value=b"secret", batch=[b"secret"])
    event = json.loads(out.getvalue())
    assert (event["value"], event["batch"]) == ("<6 bytes>", ["<6 bytes>"])
    assert "secret" not in out.getvalue()


def test_json_has_the_same_keys_in_order(configure):
    out = configure(json=True)
    get_logger("replicator.loop").warning(
        "transaction aborted", topic="orders", partition=3, offset=7, retry=True
    )
    [line] = lines(out)
    event = json.loads(line)
    assert TS.fullmatch(f"ts={event.pop('ts')}")
    expected = {
        "level": "warning",
        "role": "replicator",
        "logger": "replicator.loop",
        "msg": "transaction aborted",
        "topic": "orders",
        "partition": 3,
        "offset": 7,
        "retry": True,
    }
    assert event == expected
    assert list(event) == list(expected)


def test_exception_is_one_field_on_the_same_line(configure):
    out = configure()
    log = get_logger("t")
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        log.exception("commit failed", topic="orders")
    log.warning("aborted", exc_info=KeyError("k"))
    first, second = lines(out)
    assert first.endswith(' msg="commit failed" topic=orders exc="ValueError: bad\\nthing"')
    assert second.endswith(" msg=aborted exc=\"KeyError: 'k'\"")
    assert "Traceback" not in out.getvalue()


def test_traceback_only_at_debug_still_one_line(configure):
    out = configure("DEBUG")
    try:
        raise ValueError("bad")
    except ValueError:
        get_logger("t").exception("commit failed")
    [line] = lines(out)
    assert ' exc="ValueError: bad" traceback="Traceback (most recent call last):\\n' in line
    assert line.endswith('ValueError: bad"')


def test_json_exception(configure):
    out = configure("DEBUG", json=True)
    try:
        raise ValueError("bad")
    except ValueError:
        get_logger("t").exception("commit failed")
    [line] = lines(out)
    event = json.loads(line)
    assert event["exc"] == "ValueError: bad"
    assert event["traceback"].startswith("Traceback (most recent call last):\n")


def test_field_named_like_a_fixed_key_is_renamed(configure):
    out = configure()
    get_logger("t").info("m", level=3, msg="x", exc="y")
    [line] = lines(out)
    assert line.endswith(" msg=m field_level=3 field_msg=x field_exc=y")


def test_level_filters_and_other_libraries_render_alike(configure):
    out = configure("WARNING")
    get_logger("t").info("hidden")
    logging.getLogger("some.library").warning("retrying %s\nin %d s", "fetch", 2)
    [line] = lines(out)
    assert line.endswith(
        ' level=warning role=replicator logger=some.library msg="retrying fetch\\nin 2 s"'
    )


def test_configuring_twice_keeps_one_handler(configure):
    configure()
    out = configure()
    get_logger("t").info("once")
    assert len(lines(out)) == 1
    assert len(logging.getLogger().handlers) == 1


def test_unknown_level_is_refused(configure):
    with pytest.raises(ValueError, match="unknown log level 'LOUD'"):
        configure("LOUD")


def test_record_names_the_caller(configure):
    configure()
    seen = []
    logger = logging.getLogger("t.caller")
    logger.addFilter(lambda record: seen.append(record.funcName) or True)
    try:
        get_logger("t.caller").info("m")
    finally:
        logger.filters.clear()
    assert seen == ["test_record_names_the_caller"]

"""Structured logs: one line per event, ``key=value`` (or JSON), fields in the order given.

    log = get_logger(__name__)
    log.info("session ended", reason="delivery_error", topic="orders", partition=3)

after ``configure_logging("INFO", "replicator")`` writes, on one line::

    ts=2026-11-22T01:02:03.456Z level=info role=replicator logger=replicator.loop
    msg="session ended" reason=delivery_error topic=orders partition=3

A value is quoted (JSON string escapes) only when it holds a space, a quote, ``=`` or a
character that is not printable, so a message or an exception never breaks the line. Payloads
never reach a log: a bytes value, however deep in a list or dict, renders as ``<N bytes>``.
"""

from __future__ import annotations

import json
import logging
import math
import re
from datetime import UTC, datetime
from typing import TextIO

ExcInfo = BaseException | bool | None

_FIELDS = "event_fields"  # the LogRecord attribute (set through ``extra``) holding the fields
_PLAIN = re.compile(r'[^\s"=]+')  # a value rendered without quotes
# Keys every line has; a field with one of these names is renamed field_<name>.
_RESERVED = frozenset({"ts", "level", "role", "logger", "msg", "exc", "traceback"})


class EventLogger:
    """A logger whose keyword arguments are fields: ``log.info("msg", topic=t, partition=p)``.

    ``exc_info`` (an exception, or True for the one being handled) adds an ``exc`` field.
    """

    __slots__ = ("logger",)

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger

    def debug(self, msg: str, /, *, exc_info: ExcInfo = None, **fields: object) -> None:
        self._log(logging.DEBUG, msg, exc_info, fields)

    def info(self, msg: str, /, *, exc_info: ExcInfo = None, **fields: object) -> None:
        self._log(logging.INFO, msg, exc_info, fields)

    def warning(self, msg: str, /, *, exc_info: ExcInfo = None, **fields: object) -> None:
        self._log(logging.WARNING, msg, exc_info, fields)

    def error(self, msg: str, /, *, exc_info: ExcInfo = None, **fields: object) -> None:
        self._log(logging.ERROR, msg, exc_info, fields)

    def exception(self, msg: str, /, **fields: object) -> None:
        """``error`` with the exception being handled; call it from an ``except`` block."""
        self._log(logging.ERROR, msg, True, fields)

    def _log(self, level: int, msg: str, exc_info: ExcInfo, fields: dict[str, object]) -> None:
        # stacklevel 3: the record names our caller, not this method or the one above it.
        self.logger.log(level, msg, exc_info=exc_info, extra={_FIELDS: fields}, stacklevel=3)


def get_logger(name: str) -> EventLogger:
    """The ``EventLogger`` of ``logging.getLogger(name)``; by convention ``name`` is __name__."""
    return EventLogger(logging.getLogger(name))


def configure_logging(
    level: str, role: str, *, json: bool = False, stream: TextIO | None = None
) -> None:
    """Send every record to stderr (or ``stream``) as one line of ``key=value`` or JSON.

    Replaces the root logger's handlers: call it once, first thing in a role's ``main``. Records
    from other libraries render the same way, without fields. An exception is one ``exc`` field
    (type and message); its traceback is added, escaped onto the same line, only at DEBUG.
    """
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_EventFormatter(role, json=json, tracebacks=numeric <= logging.DEBUG))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)


class _EventFormatter(logging.Formatter):
    def __init__(self, role: str, *, json: bool, tracebacks: bool) -> None:
        super().__init__()
        self.role = role
        self.json = json
        self.tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        event = self.event(record)
        if self.json:
            return json.dumps(event, ensure_ascii=False)
        return " ".join(f"{key}={_quote(_text(value))}" for key, value in event.items())

    def event(self, record: logging.LogRecord) -> dict[str, object]:
        """The line's keys and values, in order; values are JSON-ready and hold no bytes."""
        event: dict[str, object] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "role": self.role,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields: dict[str, object] = getattr(record, _FIELDS, {})
        for key, value in fields.items():
            event[f"field_{key}" if key in _RESERVED else key] = _safe(value)
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            message = str(error)
            event["exc"] = f"{type(error).__name__}: {message}" if message else type(error).__name__
            if self.tracebacks:
                event["traceback"] = self.formatException(record.exc_info)
        return event


def _timestamp(created: float) -> str:
    moment = datetime.fromtimestamp(created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _safe(value: object) -> object:
    """``value`` as JSON-ready data with every bytes-like part replaced by ``<N bytes>``."""
    if isinstance(value, bytes | bytearray | memoryview):
        size = value.nbytes if isinstance(value, memoryview) else len(value)
        return f"<{size} bytes>"
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple | set | frozenset):
        return [_safe(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _safe(item) for key, item in value.items()}
    return str(value)


def _text(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(_text(item) for item in value)
    if isinstance(value, dict):
        return ",".join(f"{key}:{_text(item)}" for key, item in value.items())
    return str(value)


def _quote(text: str) -> str:
    if _PLAIN.fullmatch(text) and text.isprintable():
        return text
    return json.dumps(text, ensure_ascii=False)

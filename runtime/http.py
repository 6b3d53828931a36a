"""Metrics and health on one HTTP port per process: ``/metrics``, ``/healthz``, ``/readyz``.

    health = Health()
    server = serve_http(settings.metrics_port, registry=registry, health=health)
    try:
        health.set_ready(True)
        ...
    finally:
        if server is not None:
            server.close()

``/healthz`` answers 200 while the process is live (503: restart it); ``/readyz`` 200 once it
does its work (503: starting, rebalancing, ...). A 503 body is the reason, one line.
"""

from __future__ import annotations

import errno
import socket
import socketserver
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from runtime.closeable import Closeable
from runtime.errors import ExactlyError
from runtime.logs import get_logger

_POLL_SECONDS = 0.1  # how soon the serving thread notices close()
_CLIENT_TIMEOUT_SECONDS = 5.0  # a client that stalls longer is dropped; close() waits for it
_TEXT = "text/plain; charset=utf-8"

_log = get_logger(__name__)

Check = Literal["live", "ready"]


class HttpServerError(ExactlyError):
    """The HTTP port cannot be served (in use, not allowed, bad host); the message names it."""


class Health:
    """Liveness and readiness: the role sets them, the probes read them; thread-safe.

    Starts live and not ready ("starting"). A flip is logged once; setting the same state again
    (every loop, say) logs nothing and only replaces the reason.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._checks: dict[Check, tuple[bool, str]] = {
            "live": (True, ""),
            "ready": (False, "starting"),
        }

    @property
    def live(self) -> bool:
        return self.check("live")[0]

    @property
    def live_reason(self) -> str:
        return self.check("live")[1]

    @property
    def ready(self) -> bool:
        return self.check("ready")[0]

    @property
    def ready_reason(self) -> str:
        return self.check("ready")[1]

    def set_live(self, live: bool, reason: str = "") -> None:
        self._set("live", live, reason)

    def set_ready(self, ready: bool, reason: str = "") -> None:
        self._set("ready", ready, reason)

    def check(self, name: Check) -> tuple[bool, str]:
        """``("live" | "ready")`` -> (state, reason), read together."""
        with self._lock:
            return self._checks[name]

    def _set(self, name: Check, state: bool, reason: str) -> None:
        with self._lock:
            changed = self._checks[name][0] != state
            self._checks[name] = (state, reason)
        if not changed:
            return
        if state:
            _log.info(name)
        elif name == "live":
            _log.warning("not live", reason=reason)
        else:
            _log.info("not ready", reason=reason)


class HttpServer(Closeable):
    """A running server; ``close()`` stops it, joins its threads and closes the socket."""

    def __init__(self, server: _Server) -> None:
        self._server = server
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": _POLL_SECONDS},
            name=f"http-{self.port}",
            daemon=True,
        )
        self._thread.start()

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.server_address[1])

    def close(self) -> None:
        """Stop serving; calling it again does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._server.shutdown()
        self._thread.join()
        self._server.server_close()


def serve_http(
    port: int, *, registry: CollectorRegistry, health: Health, host: str = "0.0.0.0"
) -> HttpServer | None:
    """Serve ``registry`` and ``health`` on ``host:port`` from a daemon thread; None if port 0.

    Port 0 is METRICS_PORT's "off", never "any free port". HttpServerError if it cannot bind.
    """
    if port == 0:
        return None
    try:
        server = _Server((host, port), registry, health)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise HttpServerError(
                f"port {port} is already in use (give each role on a host its own METRICS_PORT)"
            ) from exc
        raise HttpServerError(f"cannot serve HTTP on {host}:{port}: {exc}") from exc
    _log.info("serving metrics and health", host=host, port=port)
    return HttpServer(server)


class _Server(ThreadingHTTPServer):
    def __init__(
        self, address: tuple[str, int], registry: CollectorRegistry, health: Health
    ) -> None:
        self.registry = registry
        self.health = health
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer's would look up the host's FQDN: a DNS query, slow where DNS is, unused here.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]

    def handle_error(self, request: object, client_address: object) -> None:
        # Logged, not printed to stderr; a client that hangs up early is not worth a warning.
        error = sys.exc_info()[1]
        quiet = isinstance(error, ConnectionError | TimeoutError)
        log = _log.debug if quiet else _log.warning
        log("http request failed", client=client_address, exc_info=error)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = _CLIENT_TIMEOUT_SECONDS

    def do_GET(self) -> None:
        path = self.path.partition("?")[0]
        if path == "/metrics":
            self._reply(HTTPStatus.OK, generate_latest(self.server.registry), CONTENT_TYPE_LATEST)
        elif path in ("/healthz", "/readyz"):
            name: Check = "live" if path == "/healthz" else "ready"
            state, reason = self.server.health.check(name)
            if state:
                self._reply(HTTPStatus.OK, b"ok\n")
            else:
                text = " ".join(reason.split()) or f"not {name}"
                self._reply(HTTPStatus.SERVICE_UNAVAILABLE, f"{text}\n".encode())
        else:
            self._reply(HTTPStatus.NOT_FOUND, b"not found\n")

    def _reply(self, status: HTTPStatus, body: bytes, content_type: str = _TEXT) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Silent: a probe every few seconds is not worth a line; health flips are logged."""

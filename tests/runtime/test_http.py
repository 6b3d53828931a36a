"""Metrics and health as Prometheus and Kubernetes probes see them: plain HTTP GETs."""

import logging
import urllib.error
import urllib.request

import pytest
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter

from localkafka import free_port  # serve_http's port 0 means "off": a free one is handed over
from runtime import ExactlyError, Health, HttpServerError, serve_http


def get(port: int, path: str) -> tuple[int, str, str]:
    """(status, body, content type) of GET ``path``; error statuses are answers too."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode(), response.headers["Content-Type"]
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode(), error.headers["Content-Type"]


@pytest.fixture
def registry():
    return CollectorRegistry()


@pytest.fixture
def health():
    return Health()


@pytest.fixture
def server(registry, health):
    server = serve_http(free_port(), registry=registry, health=health, host="127.0.0.1")
    assert server is not None
    with server:
        yield server


def test_metrics_expose_the_registry(server, registry):
    records = Counter("exactly_test_records", "Records copied.", ["topic"], registry=registry)
    records.labels(topic="orders").inc(3)
    status, body, content_type = get(server.port, "/metrics")
    assert status == 200
    assert content_type == CONTENT_TYPE_LATEST
    assert 'exactly_test_records_total{topic="orders"} 3.0\n' in body


def test_healthz_follows_liveness(server, health):
    assert get(server.port, "/healthz")[:2] == (200, "ok\n")
    health.set_live(False, "poll loop stalled for 120 s")
    assert get(server.port, "/healthz")[:2] == (503, "poll loop stalled for 120 s\n")
    assert (health.live, health.live_reason) == (False, "poll loop stalled for 120 s")
    health.set_live(True)
    assert get(server.port, "/healthz?verbose=1")[:2] == (200, "ok\n")


def test_readyz_starts_unready_and_follows_readiness(server, health):
    assert get(server.port, "/readyz")[:2] == (503, "starting\n")
    health.set_ready(True)
    assert get(server.port, "/readyz")[:2] == (200, "ok\n")
    health.set_ready(False, "rebalancing\npartitions revoked")
    assert get(server.port, "/readyz")[:2] == (503, "rebalancing partitions revoked\n")
    health.set_ready(False)
    assert get(server.port, "/readyz")[:2] == (503, "not ready\n")


def test_unknown_path_is_404(server):
    assert get(server.port, "/")[0] == 404
    assert get(server.port, "/metrics/extra")[0] == 404


def test_port_in_use_names_the_port(server, registry, health):
    with pytest.raises(HttpServerError, match=f"port {server.port} is already in use") as caught:
        serve_http(server.port, registry=registry, health=health, host="127.0.0.1")
    assert isinstance(caught.value, ExactlyError)


def test_port_zero_is_off(registry, health):
    assert serve_http(0, registry=registry, health=health) is None


def test_close_is_idempotent_and_frees_the_port(registry, health):
    server = serve_http(free_port(), registry=registry, health=health, host="127.0.0.1")
    assert server is not None
    port = server.port
    assert get(port, "/healthz")[0] == 200
    server.close()
    server.close()
    with pytest.raises(urllib.error.URLError):
        get(port, "/healthz")
    again = serve_http(port, registry=registry, health=health, host="127.0.0.1")
    assert again is not None
    again.close()


def test_health_logs_only_flips(health, caplog):
    caplog.set_level(logging.INFO, logger="runtime.http")
    for _ in range(3):
        health.set_ready(True)
    health.set_ready(False, "rebalancing")
    health.set_ready(False, "still rebalancing")
    health.set_live(True)
    health.set_live(False, "stuck")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "ready"),
        ("INFO", "not ready"),
        ("WARNING", "not live"),
    ]
    assert health.ready_reason == "still rebalancing"

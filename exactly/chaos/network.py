"""Network faults between each role instance and each cluster, through toxiproxy.

Every role instance reaches each node of each cluster through a proxy of its own: the cluster
was made with a listener per instance whose advertised port, on every node, is where that
node's proxy listens (localkafka's ``proxied`` listeners), so the metadata a role is given sends
it back through its proxies and every byte it exchanges with a broker passes there. The proxies
of one instance to one cluster are a link (``replicator@source``: one proxy per node, named
``replicator@source.node2``). A fault is a toxic on every proxy of one link: the instance is cut
from, or slowed towards, the whole cluster, as a network fault between a client's host and a
cluster's would (a single node cut off from everyone is a node fault, not a link's):

    latency     1-3 s added each way (with jitter)
    bandwidth   32 KiB/s each way
    reset       every connection reset as soon as data flows (TCP RST)
    blackhole   data stops while connections stay open: longer than the clients' request
                timeouts (30 s), in runs long enough to hold it (plan.py)

A toxic comes off in the background: toxiproxy's removal flushes what the toxic holds to the
client, and blocks for as long as the client does not read (a role frozen by SIGSTOP never does
until SIGCONT, which the fault loop sends; Shopify/toxiproxy#558). Waiting for it there would
stop the loop that ends the freeze.

toxiproxy (Shopify/toxiproxy, Go) is built once with ``go install`` from the Go module proxy
into the tool cache beside the Kafka jars, and run as a child process on loopback; this module
talks to its HTTP API. We do not write a TCP fault proxy of our own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exactly.chaos.errors import ChaosError
from localkafka import cache_root, die_with_parent, free_ports

TOXIPROXY_MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
TOXIPROXY_VERSION = "v2.12.0"
_BUILD_TIMEOUT_S = 600.0
_API_TIMEOUT_S = 5.0
_READY_TIMEOUT_S = 15.0
_HEAL_RETRY_S = 1.0
_HEAL_CALL_TIMEOUT_S = 30.0  # toxiproxy itself answers 503 after 25 s
# Where Go is when it is not on PATH (the official tarball's place).
_GO_FALLBACK = Path("/usr/local/go/bin/go")

VARIANTS = ("latency", "bandwidth", "reset", "blackhole")


def listener_name(instance: str) -> str:
    """The cluster listener an instance reaches it through: deduplicator-1 -> VIA_DEDUPLICATOR_1."""
    return "VIA_" + instance.upper().replace("-", "_")


def link_name(instance: str, cluster: str) -> str:
    """A fault target: the path from a role instance to a cluster."""
    return f"{instance}@{cluster}"


def ensure_toxiproxy() -> Path:
    """The toxiproxy server binary, built with ``go install`` into the cache on first use."""
    binary = cache_root() / f"toxiproxy-{TOXIPROXY_VERSION}" / "toxiproxy-server"
    if binary.is_file():
        return binary
    go = shutil.which("go") or (str(_GO_FALLBACK) if _GO_FALLBACK.is_file() else None)
    if go is None:
        raise ChaosError(
            "network faults need toxiproxy, built with Go: `go` is not on PATH "
            f"(go install {TOXIPROXY_MODULE}@{TOXIPROXY_VERSION})"
        )
    binary.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=binary.parent) as build:
        # Go's own module and build caches (~/go, ~/.cache/go-build) serve later builds.
        env = {**os.environ, "GOBIN": build}
        try:
            result = subprocess.run(
                [go, "install", f"{TOXIPROXY_MODULE}@{TOXIPROXY_VERSION}"],
                env=env,
                capture_output=True,
                text=True,
                timeout=_BUILD_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ChaosError(f"building toxiproxy took over {_BUILD_TIMEOUT_S:.0f} s") from exc
        built = Path(build) / "server"
        if result.returncode != 0 or not built.is_file():
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-10:])
            raise ChaosError(f"could not build toxiproxy with {go}:\n{tail}")
        # Into place in one rename: a half-copied binary never passes for the cached one.
        built.rename(binary)
    return binary


class Toxiproxy:
    """A toxiproxy server of this run, with one proxy per (instance, cluster node), grouped by
    link (instance, cluster)."""

    def __init__(self, binary: Path, log_path: Path) -> None:
        self._binary = binary
        self._log_path = log_path
        (self._port,) = free_ports(1)
        self._process: subprocess.Popen[bytes] | None = None
        self._proxies: dict[str, list[str]] = {}  # link -> its proxies, one per node
        self._toxics: dict[str, list[str]] = {}  # link -> paths of its toxics in place
        self._healing: dict[str, threading.Thread] = {}  # link -> its toxics coming off
        self._heal_errors: dict[str, str] = {}  # link -> why its last try failed
        self._stopped = threading.Event()

    def start(self) -> None:
        with self._log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [str(self._binary), "-host", "127.0.0.1", "-port", str(self._port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while True:
            with contextlib.suppress(ChaosError):
                self._call("GET", "/version")
                return
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise ChaosError(f"toxiproxy did not start (log: {self._log_path})")
            time.sleep(0.1)

    def stop(self) -> None:
        self._stopped.set()
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(10)

    def add_link(self, link: str, routes: Mapping[int, tuple[int, int]]) -> None:
        """The link's proxies: node id -> (the port its proxy listens on, the node's port)."""
        for node, (listen_port, upstream_port) in routes.items():
            proxy = f"{link}.node{node}"
            self._call(
                "POST",
                "/proxies",
                {
                    "name": proxy,
                    "listen": f"127.0.0.1:{listen_port}",
                    "upstream": f"127.0.0.1:{upstream_port}",
                    "enabled": True,
                },
            )
            self._proxies.setdefault(link, []).append(proxy)

    def healing(self, link: str) -> bool:
        """Whether the link's last toxics are still coming off: a new fault on it would wait
        for their removal (toxiproxy holds the link's lock) and stop the fault loop with it."""
        thread = self._healing.get(link)
        return thread is not None and thread.is_alive()

    def break_link(self, link: str, variant: str) -> None:
        toxics = _TOXICS.get(variant)
        if toxics is None:
            raise ChaosError(f"unknown network fault {variant!r}")
        if self.healing(link):
            raise ChaosError(f"{link}: its last fault's toxics are still coming off")
        paths = self._toxics.setdefault(link, [])
        for proxy in self._proxies_of(link):
            for stream in ("downstream", "upstream"):
                name = f"{variant}-{stream}"
                toxic_type, attributes = toxics
                self._call(
                    "POST",
                    f"/proxies/{proxy}/toxics",
                    {"name": name, "type": toxic_type, "stream": stream, "attributes": attributes},
                )
                # At once: heal_link removes what is in place, if a later one failed.
                paths.append(f"/proxies/{proxy}/toxics/{name}")

    def heal_link(self, link: str) -> None:
        """Start taking the link's toxics off; returns at once (see the module's docstring)."""
        paths = self._toxics.pop(link, [])
        if not paths:
            return
        thread = threading.Thread(
            target=self._heal, args=(link, paths), name=f"heal {link}", daemon=True
        )
        self._healing[link] = thread
        thread.start()

    def await_healed(self, timeout_s: float) -> dict[str, str]:
        """Wait up to `timeout_s` for every link's toxics to be off; the links still not
        healed, each with the last reason its removal gave."""
        deadline = time.monotonic() + timeout_s
        for thread in list(self._healing.values()):
            thread.join(max(0.0, deadline - time.monotonic()))
        return {
            link: self._heal_errors.get(link, "its toxics are still coming off")
            for link in self._healing
            if self.healing(link)
        }

    def _proxies_of(self, link: str) -> list[str]:
        try:
            return self._proxies[link]
        except KeyError:
            raise ChaosError(f"no network link {link!r}") from None

    def _heal(self, link: str, paths: list[str]) -> None:
        # The removal goes on in the server after a call gives up (toxiproxy answers 503
        # after 25 s), so each try after the first finds the toxic gone (404) once it is.
        for path in paths:
            while True:
                try:
                    self._call("DELETE", path, missing_ok=True, timeout_s=_HEAL_CALL_TIMEOUT_S)
                    break
                except ChaosError as exc:
                    self._heal_errors[link] = str(exc)
                    if self._stopped.wait(_HEAL_RETRY_S):
                        return
        self._heal_errors.pop(link, None)

    def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        missing_ok: bool = False,
        timeout_s: float = _API_TIMEOUT_S,
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self._port}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            if missing_ok and exc.code == 404:
                return None
            raise ChaosError(f"toxiproxy {method} {path}: {exc}") from exc
        except (OSError, urllib.error.URLError) as exc:
            raise ChaosError(f"toxiproxy {method} {path}: {exc}") from exc
        return json.loads(text) if text.strip() else None


# variant -> (toxiproxy toxic type, its attributes), applied on both streams.
_TOXICS: dict[str, tuple[str, dict[str, int]]] = {
    "latency": ("latency", {"latency": 2000, "jitter": 1000}),
    "bandwidth": ("bandwidth", {"rate": 32}),  # KiB/s
    "reset": ("reset_peer", {"timeout": 0}),
    "blackhole": ("timeout", {"timeout": 0}),  # data dropped, connection held open
}

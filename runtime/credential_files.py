"""The files a role's credentials come from, watched so that renewed ones are used.

librdkafka reads a certificate, key or CA file (``ssl.*.location``) once, when a client is made,
and keeps it for the client's life; there is no reload (confluentinc/librdkafka#2868). A role
whose certificate is renewed on disk (cert-manager, Vault, certbot) would go on presenting the
old one, and when that expires every new connection is refused: the flow stops weeks after the
renewal that should have kept it going. The same holds for a secret read from a ``_FILE``
variable (a rotated SCRAM password).

So a role looks at those files every ``EXACTLY_CREDENTIALS_CHECK_MS``. A change is acted on once
the files have stayed the same for a whole look (a writer may put the certificate before its key)
and librdkafka accepts them together; then the role is asked to stop, drains as on SIGTERM and
exits ``EXIT_RELOAD``, and whatever restarts it (``exactly run`` at once, an orchestrator by its
restart policy) starts it with the new files. Files librdkafka refuses (a key that does not match
its certificate, a file half-written) are logged once at ERROR and the role keeps the credentials
it has. What only a broker can judge (a password the cluster does not know yet, a certificate
from a CA it does not trust) is not checked here: the restarted role stops at start-up naming
the refusal (runtime/clients.py), as any role given refused credentials. And when no renewal
comes, the validity of the certificate a process presents is exported (``CertificateValidity``),
for an alert well before it expires.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Self

from cryptography import x509
from prometheus_client.core import GaugeMetricFamily

from runtime.closeable import Closeable
from runtime.logs import get_logger
from runtime.properties import librdkafka_refusal, masked
from runtime.settings import Settings

log = get_logger(__name__)

# The clusters a role's clients connect to, as Settings names them.
SOURCE = "source"
DESTINATION = "destination"

_LOCATION_SUFFIX = ".location"
_JOIN_S = 5.0


@dataclass(frozen=True, slots=True)
class WatchedFile:
    cluster: str  # SOURCE or DESTINATION
    property: str  # the librdkafka property the file is for
    path: str
    secret: bool  # its contents are the property's value (a `_FILE` variable)

    def __str__(self) -> str:
        return f"{self.path} ({self.cluster} {self.property})"


def watched_files(settings: Settings, clusters: Iterable[str]) -> list[WatchedFile]:
    """The credential files of ``clusters``' clients: every ``ssl.*.location`` property naming a
    file or directory that exists (not ``probe``), and every property read from a ``_FILE``."""
    found = []
    for cluster in clusters:
        cluster_settings = getattr(settings, cluster)
        for name, value in sorted(cluster_settings.properties.items()):
            if _is_tls_file(name) and os.path.exists(value):
                found.append(WatchedFile(cluster, name, value, secret=False))
        for name, path in sorted(cluster_settings.property_files.items()):
            found.append(WatchedFile(cluster, name, path, secret=True))
    return found


def _is_tls_file(name: str) -> bool:
    return name.startswith("ssl.") and name.endswith(_LOCATION_SUFFIX)


def fingerprint(path: str) -> str:
    """What ``path`` holds, as a digest: a file's bytes, or a directory's files (a CA directory)
    by name and bytes; an unreadable path is a fingerprint of its own."""
    digest = hashlib.sha256()
    try:
        if os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                member = os.path.join(path, name)
                if os.path.isfile(member):
                    digest.update(name.encode() + b"\0" + _bytes(member) + b"\0")
        else:
            digest.update(_bytes(path))
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    return digest.hexdigest()


def _bytes(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def _read_secret(path: str) -> tuple[str, str | None]:
    """A `_FILE` property's value as the settings read it (runtime/properties.py), or why it
    cannot be read: a reason that never shows a byte of it."""
    try:
        with open(path, encoding="utf-8") as file:
            return file.read().rstrip("\r\n"), None
    except OSError as exc:
        return "", f"cannot read the file: {exc.strerror}"
    except UnicodeDecodeError:
        return "", "the file is not UTF-8 text"


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


class CredentialFiles:
    """What the files held when the role's clients were made, and one look at them at a time."""

    def __init__(self, settings: Settings, clusters: Iterable[str]) -> None:
        self._settings = settings
        self.files = watched_files(settings, clusters)
        # A secret as the settings loaded it, not as its file holds it now: a change since
        # then is a change, and one of its trailing newline alone is none.
        self._loaded = {
            file: _digest(self._loaded_secret(file)) if file.secret else fingerprint(file.path)
            for file in self.files
        }
        self._seen: dict[WatchedFile, str] | None = None  # a change seen at the last look
        self._refused: dict[WatchedFile, str] | None = None  # a change already reported

    def renewed(self) -> list[WatchedFile]:
        """The files that changed, once they have stayed so for a whole look and librdkafka
        accepts them; otherwise none."""
        now = self._now()
        changed = [file for file in self.files if now[file] != self._loaded[file]]
        if not changed:
            self._seen = None
            return []
        if now != self._seen:
            self._seen = now  # a writer may not be done: look again before acting
            return []
        if now == self._refused:
            return []
        refusals = [
            reason
            for cluster in sorted({file.cluster for file in changed})
            if (reason := self._refusal(cluster)) is not None
        ]
        if refusals:
            self._refused = now
            log.error(
                "credential files changed but librdkafka refuses them; the role keeps the "
                "credentials it loaded at start",
                files=", ".join(str(file) for file in changed),
                error="; ".join(refusals),
            )
            return []
        return changed

    def _now(self) -> dict[WatchedFile, str]:
        return {file: self._fingerprint(file) for file in self.files}

    @staticmethod
    def _fingerprint(file: WatchedFile) -> str:
        if not file.secret:
            return fingerprint(file.path)
        value, unreadable = _read_secret(file.path)
        return unreadable or _digest(value)

    def _loaded_secret(self, file: WatchedFile) -> str:
        cluster_settings = getattr(self._settings, file.cluster)
        return str(cluster_settings.secret_properties[file.property].get_secret_value())

    def _refusal(self, cluster: str) -> str | None:
        """Why librdkafka would not make a client of ``cluster`` with the files as they are now
        (a `_FILE` value read again), or None."""
        cluster_settings = getattr(self._settings, cluster)
        secrets = [
            secret.get_secret_value() for secret in cluster_settings.secret_properties.values()
        ]
        read_again: dict[str, str] = {}
        for file in self.files:
            if file.cluster == cluster and file.secret:
                value, unreadable = _read_secret(file.path)
                if unreadable:
                    return f"{file}: {unreadable}"
                read_again[file.property] = value
                secrets.append(value)
        # Through client_config, as the restarted role will: what we derive from a property
        # (our reconnect.backoff.max.ms from reconnect.backoff.ms) follows its new value.
        reason = librdkafka_refusal(cluster_settings.client_config(read_again))
        return None if reason is None else masked(reason, secrets)


class CertificateValidity:
    """``exactly_client_certificate_not_{before,after}_timestamp_seconds{cluster}``: when the
    client certificate this process presents to each cluster became valid and when it expires
    (the ExactlyCertificateExpiring alert), read once: a renewed one is used, and reported, by
    the process started again with it."""

    def __init__(self, settings: Settings, clusters: Iterable[str]) -> None:
        self._validity: dict[str, tuple[float, float]] = {}
        for cluster in clusters:
            validity = _certificate_validity(getattr(settings, cluster).client_config())
            if validity is not None:
                self._validity[cluster] = validity

    def collect(self) -> Iterator[GaugeMetricFamily]:
        bounds = (
            ("not_before", "became valid", 0),
            ("not_after", "expires", 1),
        )
        for bound, meaning, index in bounds:
            family = GaugeMetricFamily(
                f"exactly_client_certificate_{bound}_timestamp_seconds",
                f"When the client certificate this process presents to the cluster {meaning} "
                "(Unix time); a renewed one is loaded by a restart (EXACTLY_CREDENTIALS_CHECK_MS).",
                labels=["cluster"],
            )
            for cluster, validity in sorted(self._validity.items()):
                family.add_metric([cluster], validity[index])
            yield family


def _certificate_validity(config: Mapping[str, str]) -> tuple[float, float] | None:
    """The validity of the first (the client's own) certificate of ``ssl.certificate.location``
    or ``ssl.certificate.pem``, or None: none configured, or not PEM (a PKCS#12 key store)."""
    pem: bytes | None = None
    if "ssl.certificate.location" in config:
        try:
            pem = _bytes(config["ssl.certificate.location"])
        except OSError:
            return None  # librdkafka says why, with the path, when the client is made
    elif "ssl.certificate.pem" in config:
        pem = config["ssl.certificate.pem"].encode()
    if pem is None:
        return None
    try:
        certificate = x509.load_pem_x509_certificates(pem)[0]
    except ValueError:
        return None
    return (
        certificate.not_valid_before_utc.timestamp(),
        certificate.not_valid_after_utc.timestamp(),
    )


class CredentialWatch(Closeable):
    """A thread that looks at the credential files every ``interval_s`` and calls ``on_renewed``
    once, with the files renewed, when ``CredentialFiles.renewed`` finds some; ``with`` starts
    it and stops it."""

    def __init__(
        self,
        files: CredentialFiles,
        interval_s: float,
        on_renewed: Callable[[list[WatchedFile]], None],
    ) -> None:
        self._files = files
        self._interval_s = interval_s
        self._on_renewed = on_renewed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="credential-watch", daemon=True)

    def __enter__(self) -> Self:
        if self._files.files:
            self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            # Bounded: a look that hangs (a client being made) must not hold up the exit of a
            # role that has drained; the thread is a daemon.
            self._thread.join(_JOIN_S)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                renewed = self._files.renewed()
            except Exception:  # a bug here must not pass unseen: the role runs on without it
                log.exception(
                    "the credential watch failed; renewed files are loaded at the next start"
                )
                return
            if renewed:
                self._on_renewed(renewed)
                return

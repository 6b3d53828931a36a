"""Errors raised by the envelope codec (the whole tree: runtime/errors.py); catch
``EnvelopeError``.

Every message says what is wrong and where, e.g.
"envelope record 3 field 'key': expected bytes or nil, got int".
"""

from runtime.errors import ExactlyError


class EnvelopeError(ExactlyError):
    """Root of the envelope package's errors."""


class UnsupportedVersionError(EnvelopeError):
    """The envelope names a format version this build does not read."""

    def __init__(self, version: int, supported: int) -> None:
        super().__init__(
            f"unsupported envelope format version {version} (this build reads {supported})"
        )
        self.version = version
        self.supported = supported


class MalformedEnvelopeError(EnvelopeError):
    """The bytes are not a valid envelope, or an Envelope value breaks the format's invariants."""

"""Errors raised by the envelope codec.

    EnvelopeError                 anything wrong with an envelope (catch this one)
    ├── UnsupportedVersionError   a well-formed envelope of a format version this build cannot read
    └── MalformedEnvelopeError    bytes, or an Envelope value, that break the format contract

Every message says what is wrong and where, e.g.
"envelope record 3 field 'key': expected bytes or nil, got int".
"""


class EnvelopeError(Exception):
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

"""The base of objects whose whole teardown is ``close()``: ``with`` closes them."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Closeable:
    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

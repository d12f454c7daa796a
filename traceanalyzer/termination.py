"""SIGTERM as an exception, and a way to hold it back while something must not be cut.

The handler always runs on the main thread, whichever thread the operating system delivered
the signal to, so holding it back is done here (a flag the handler reads) rather than with a
signal mask: a mask set on the main thread does not stop the signal reaching polars' or the
process pool's threads, after which the main thread raises at its next bytecode anyway.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


class Terminated(BaseException):
    """SIGTERM arrived: unwind (temporary folders and partial outputs are removed on the way)."""


_held = 0
_pending = False


def _handler(signum: int, frame: object) -> None:
    global _pending
    if _held:
        _pending = True  # raised when the hold ends
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Terminated


def install() -> None:
    """Turn SIGTERM into `Terminated` on the main thread."""
    signal.signal(signal.SIGTERM, _handler)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """SIGTERM arriving inside the block is raised as `Terminated` when the block ends."""
    global _held, _pending
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held and _pending:
            _pending = False
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            raise Terminated

"""Exception hierarchy: every error a user can cause carries the file, the problem and a hint.

The CLI turns a `TraceAnalyzerError` into one `error:` line on stderr and exit status 2.
"""

from __future__ import annotations

from pathlib import Path


class TraceAnalyzerError(Exception):
    """Base of all errors the user can act on."""

    def __init__(self, message: str, *, path: Path | str | None = None, hint: str = "") -> None:
        self.path = str(path) if path is not None else None
        self.problem = message
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """Return `path: problem (hint: ...)` on one line."""
        where = f"{self.path}: " if self.path else ""
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"{where}{self.problem}{hint}"


class TraceFormatError(TraceAnalyzerError):
    """The input is of a known kind but malformed, empty or holds nothing to analyse."""


class UnsupportedTraceError(TraceAnalyzerError):
    """The input is not a trace format the tool reads."""


class NoGpuEventsError(TraceFormatError):
    """The trace holds no GPU work: a CPU-only trace, or one from a device we do not read."""


class ConfigError(TraceAnalyzerError):
    """An option or setting is invalid."""


class ReportWriteError(TraceAnalyzerError):
    """The report could not be written."""

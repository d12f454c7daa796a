"""Readers: trace files -> Timeline. `read(path)` picks the reader by the file's first bytes."""

from __future__ import annotations

from pathlib import Path

from traceanalyzer.errors import TraceFormatError, UnsupportedTraceError
from traceanalyzer.model import Timeline
from traceanalyzer.readers.base import Reader, head_bytes
from traceanalyzer.readers.chrome_trace import ChromeTraceReader

READERS: dict[str, Reader] = {"chrome": ChromeTraceReader()}


def detect(path: Path) -> Reader:
    """Return the reader for a file or folder, judged by content, not by suffix."""
    if not path.exists():
        raise TraceFormatError("no such file or folder", path=path, hint="check the path")
    if path.is_dir():
        return READERS["chrome"]
    if path.stat().st_size == 0:
        raise TraceFormatError(
            "the file is empty", path=path, hint="the profiler may have crashed before writing"
        )
    for reader in READERS.values():
        if reader.sniff(path):
            return reader
    if not head_bytes(path, 1 << 16).strip():
        raise TraceFormatError(
            "the file is empty (only whitespace)",
            path=path,
            hint="the profiler may have crashed before writing",
        )
    head = head_bytes(path, 16)
    what = "an SQLite database" if head.startswith(b"SQLite format 3") else "not a known trace"
    raise UnsupportedTraceError(
        f"{what}: the content matches none of the formats read ({', '.join(READERS)})",
        path=path,
        hint="traceanalyzer reads torch.profiler Chrome traces (.json or .json.gz)",
    )


def read(path: Path | str) -> Timeline:
    """Read a trace file or a folder of per-rank trace files into a validated Timeline."""
    p = Path(path)
    return detect(p).read(p)


__all__ = ["READERS", "detect", "read"]
